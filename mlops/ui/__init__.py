"""`mlops ui`: a web app to watch and steer the platform from one machine (issue 15).

One module per job, no second parser of anything:

* :mod:`mlops.ui.source` -- the GitOps repo read through `gitops.repo.Mirror` and
  `gitops.layout` (what `mlops status`, the sync and the controller read);
* :mod:`mlops.ui.models`, :mod:`mlops.ui.proposals`, :mod:`mlops.ui.runs` -- each
  page's data, built by pure functions from what the readers return;
* :mod:`mlops.ui.live` -- per-version rates now and the live canary charts, read through
  the controller's preset (`promotion.metrics.live`, the one home of the live queries);
* :mod:`mlops.ui.actions` -- every button calls the domain function its CLI command calls
  (`gitops.approval`, `promotion.gitrepo.steering`);
* :mod:`mlops.ui.stream` -- server-sent events: each page's data pushed when it changes;
* :mod:`mlops.ui.app` -- the Starlette routes; `static/` holds hand-written HTML, CSS
  and JS (no build step, no CDN: every asset ships in the package; the charts use the
  vendored uPlot in `static/vendor/`);
* :mod:`mlops.ui.manifests` -- Deployment + Service to run it in a cluster.
"""
