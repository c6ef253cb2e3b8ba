"""The local runtime: the stand-ins for the cluster's services on one machine.

What runs Argo Workflows, Argo Events, Argo CD and the kubelet in a cluster
runs here as local processes, from the same rendered manifests (design §2):

* ``argo``     -- the Argo Workflows stand-in (``runner``: walks the rendered
  WorkflowTemplate) and the Argo Events one (``hooks``: a post-receive hook)
* ``platform`` -- Argo CD + kubelet: the sync loop, the model servers it runs,
  Prometheus and HAProxy (``mlops up``)

It sits between the face (``mlops``: CLI, UI, demo, images) and ``workflows``.
"""

__all__ = [
    "argo",      # the Argo stand-ins: runner (`mlops run`), hooks (`mlops hooks`)
    "errors",    # LocalError: the runtime's error base
    "platform",  # the platform (`mlops up|down|status`), its work dir and readiness
]
