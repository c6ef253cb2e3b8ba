"""`mlops ui`: a web app to watch and steer the platform from one machine.

One module per job, no second parser of anything: `source` reads the GitOps repo,
`models`, `proposals` and `runs` build each page's data, `live` the live rates and
charts, `actions` calls the domain function each CLI command calls, `stream` pushes
server-sent events, `app` holds the Starlette routes, `manifests` runs it in a cluster.
How it is built: docs/guides/ui.md.
"""
