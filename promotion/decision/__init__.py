"""Pure functions and the data they judge, no I/O: the gate, the canary analysis, the policy.

The canary analysis (`analysis.decide`) is the controller's own; other rooms use the
gate and its paired comparison, COCO AP, the policy and the persisted canary state.
"""

__all__ = [
    "coco_ap",  # COCO AP from detections matched once (the pipeline's comparison)
    "gate",     # the quality gate: is the candidate good enough to propose
    "paired",   # champion vs challenger on the same images: a paired bootstrap
    "policy",   # CanaryPolicy: what a model's mlops.yaml says about the canary
    "state",    # CanaryState: the shape of apps/<model>/promotion.yaml
]
