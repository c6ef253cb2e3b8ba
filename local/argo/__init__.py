"""Stand-ins for Argo on one machine: ``runner`` (Argo Workflows) and ``hooks`` (Argo Events)."""

__all__ = [
    "hooks",   # the post-receive hook that starts a local run on a push
    "runner",  # run_workflow(): act out the rendered DAG on one machine
]
