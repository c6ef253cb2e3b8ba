"""The promotion room: the quality gate, the canary decision, and the controller that acts on it.

`decision/` holds the pure functions and the data they judge; `gitrepo/`, `cluster/`,
`metrics/` and `reports/` hold one kind of effect each; the controller runs the loop
on top (design §5). Each sub-package's `__all__` names its own doors.
"""

__all__ = [
    "cluster",              # the controller's manifests and the cluster clients it calls
    "controller",           # Controller: read git, observe, decide, commit
    "controller_metrics",   # the controller's own /metrics
    "controller_settings",  # ControllerSettings: every option of `mlops controller run`
    "decision",             # the gate, the canary policy and state (pure)
    "errors",               # the room's exceptions, in one module
    "gitrepo",              # what promotion reads from and writes to the GitOps repo
    "metrics",              # metric sources: Prometheus, presets, live rates, the probe
    "reports",              # what a person reads: report sections, pictures, notices
]
