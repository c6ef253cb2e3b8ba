"""The local platform: the embedded stand-in for the cluster on one machine.

`mlops up` starts Prometheus, HAProxy and the local sync loop (the stand-in for Argo CD)
as supervised background processes whose configs, pid files, logs and state live in one
work dir; `mlops down` stops them all; `mlops status` reads them back. One module per
job; the list: docs/inside-local.md.
"""

# The doors: what the face (`mlops up`, the controller's local runtime, the UI, the demo)
# uses; the sync loop and the services it runs are the platform's own.
__all__ = [
    "lifecycle",  # up / down / status
    "procs",      # supervised processes: the demo starts and checks its own the same way
    "readiness",  # PlatformReadiness: "is this version deployed and ready?" here
    "workdir",    # the work dir's layout and the platform's config file
]
