"""The local platform: the embedded stand-in for the cluster on one machine.

`mlops up` starts Prometheus, HAProxy and the local sync loop (our stand-in
for Argo CD) as supervised background processes whose configs, pid files,
logs and state live in one work dir; `mlops down` stops them all;
`mlops status` reads them back. Modules, one job each:

* ``workdir``     -- the layout of the work dir and the platform's config file
* ``procs``       -- start/identify/stop supervised processes (pid files)
* ``files``, ``ports`` -- atomic writes; free loopback ports
* ``binaries``    -- find prometheus/haproxy or say what to install
* ``services``    -- start Prometheus/HAProxy and wait until they answer
* ``prometheus``  -- render prometheus.yml and the file_sd target files
* ``haproxy``     -- render haproxy.cfg; ``runtime`` -- its runtime-API client
* ``desired``     -- parse ``apps/<model>/`` of the GitOps repo (pure)
* ``gitsource``   -- poll and read the GitOps repo with the git CLI
* ``plan``        -- the pure reconcile decision ``plan(desired, actual)``
* ``sync``        -- the sync daemon: observe, plan, execute, record status
* ``lifecycle``   -- up / down / status, used by ``mlops.commands.platform``
"""
