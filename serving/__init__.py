"""Serving room: the OIP v2 model server, its client, the load generator, and manifests.

Importing the package imports nothing heavy: `promotion` uses only the manifest
builders, and the server modules load Paddle only when serving. The doors below are
what other rooms may import; the server's inner parts (HTTP handlers, pre- and
post-processing, its metrics, the worker supervisor) are its own.
"""

__all__ = [
    "client",     # a small OIP v2 client: health, metadata, infer
    "errors",     # ServingError, carrying the HTTP status a caller sees
    "fault",      # FaultConfig: the fault drill a version declares (part of its identity)
    "limits",     # the bounds on what a client may send (`mlops serve`'s flags)
    "loadgen",    # the open-loop load generator (`mlops load`)
    "manifests",  # pure builders of one model's Kubernetes and Istio documents
    "modeldir",   # load_model_dir(): the export, infer_cfg.yml and model.yaml, read
    "options",    # ServingOptions: the `serving:` section of infer_cfg.yml
    "settings",   # ServeSettings: every `mlops serve` option's default, bounds, precedence
    "probe",      # the probe set as the server hands it out (its file rule)
    "protocol",   # OIP v2 request and response bodies (Tensor)
    "runtime",    # PredictorPool: Paddle Inference predictors, safe under concurrency
    "server",     # serve(): the model server process
    "service",    # ModelService: one inference request's work, without HTTP
]
