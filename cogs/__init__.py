"""The bottom floor: shared mechanics every room may use (Kopf's `_cogs` is the model).

Nothing here knows about models, pipelines or GitOps; it imports nothing of ours.
Every module is a door, one job each (the comments below).
"""

__all__ = [
    "containers",  # a container spec as a local process: env, argv, working dir, mounts
    "files",       # atomic writes (tmp in the same dir, then rename), lenient JSON reads
    "options",     # a settings model's refusal as one line naming the flags
    "pods",        # the restricted securityContext every rendered pod runs under
    "ports",       # free loopback ports
    "text",        # someone else's text made safe for a terminal or a one-line record
]
