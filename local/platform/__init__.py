"""The local platform: the embedded stand-in for the cluster on one machine.

`mlops up` starts Prometheus, HAProxy and the local sync loop (our stand-in
for Argo CD) as supervised background processes whose configs, pid files,
logs and state live in one work dir; `mlops down` stops them all;
`mlops status` reads them back. Modules, one job each:

* ``workdir``     -- the layout of the work dir and the platform's config file
* ``procs``       -- start/identify/stop supervised processes (pid files)
* ``binaries``    -- find prometheus/haproxy or say what to install
* ``services``    -- what starting any service takes: the start lock, waiting until it answers
* ``prometheus``  -- Prometheus: prometheus.yml, the file_sd target files, its start
* ``haproxy``     -- HAProxy: haproxy.cfg (with ``router_latency.lua``), its start and
  its runtime-API client (weights and servers, no reload)
* ``desired``     -- parse ``apps/<model>/`` of the GitOps repo (pure)
* ``podspec``     -- a version's Deployment as the process to start (pure; the container
  part is ``cogs.containers``)
* ``gitsource``   -- poll and read the GitOps repo with the git CLI
* ``plan``        -- the pure reconcile decision ``plan(desired, actual)``
* ``reposync``    -- the sync's repo half: follow the branch, keep the last good state
* ``supervisor``  -- the sync's supervisor half: restart a dead Prometheus or HAProxy
* ``sync``        -- the sync daemon: observe, plan, execute, record status
* ``lifecycle``   -- up / down / status, used by ``mlops.commands.platform``
* ``readiness``   -- what the controller asks before it sends a version traffic
"""

# The doors: what the face (`mlops up`, the controller's local runtime, the UI, the demo)
# uses; the sync loop and the services it runs are the platform's own.
__all__ = [
    "lifecycle",  # up / down / status
    "procs",      # supervised processes: the demo starts and checks its own the same way
    "readiness",  # PlatformReadiness: "is this version deployed and ready?" here
    "workdir",    # the work dir's layout and the platform's config file
]
