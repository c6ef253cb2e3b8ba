"""The bottom floor: shared mechanics every room may use (Kopf's `_cogs` is the model).

Nothing here knows about models, pipelines or GitOps; it imports nothing of
ours. Modules, one job each:

* ``files``  -- atomic writes (tmp in the same dir, then rename) and lenient JSON reads
* ``ports``  -- free loopback ports
* ``options`` -- a settings model's refusal as one line naming the flags
* ``text``   -- someone else's text made safe for a terminal or a one-line record
"""
