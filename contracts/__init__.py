"""Rules every room shares and none owns: the bottom layer (imports nothing of ours but cogs).

Every module is a door: what the rooms exchange, defined once.
"""

__all__ = [
    "artifact",  # the model artifact: its files, the typed model.yaml, the weights digest
    "errors",    # the error base class every room's errors derive from, and the exit codes
    "kubeapi",   # a Kubernetes API call as RBAC sees it, declared beside the code making it
    "names",     # the model-name rule and the names derived from it
    "traffic",   # the traffic split: built, read and edited here
]
