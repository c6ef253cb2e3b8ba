"""`mlops serve` (the model server) and `mlops load` (the open-loop load generator)."""

import argparse
import logging
import os
import pathlib
import signal
import sys

from mlops.errors import UserError
from serving import limits as http_limits


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `serve` and `load` commands."""
    serve = subparsers.add_parser(
        "serve",
        help="serve a Paddle model directory over the Open Inference Protocol v2",
        description="Serve MODEL_DIR (paddle.jit.save export + infer_cfg.yml + model.yaml) "
        "over OIP v2 HTTP, with a Paddle Serving compatible route and /metrics.",
    )
    serve.add_argument("model_dir", metavar="MODEL_DIR", type=pathlib.Path)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--model-name", help="default: model.yaml's name, else the directory name")
    serve.add_argument("--model-version", help="default: model.yaml's version, else "
                       "sha256-<first 12 hex digits of the weights' sha256>")
    serve.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024,
                       help="larger request bodies get 413 (default 8 MiB)")
    serve.add_argument("--max-in-flight", type=int, default=16,
                       help="inference requests admitted at once; more get 503 (default 16)")
    serve.add_argument("--weights-sha256", metavar="HEX",
                       help="refuse to serve unless the weights file has this sha256 "
                            "(the Deployment passes its annotation)")
    serve.add_argument("--body-timeout", type=float, default=10.0,
                       help="seconds a client may take to send its body; then 408 (default 10)")
    serve.add_argument("--threads", type=int, default=None,
                       help="predictor worker threads per worker process (default: the "
                            "cores divided among the worker processes, at least 1)")
    serve.add_argument("--workers", type=int, default=None,
                       help="server processes behind the one port, each with its own "
                            "predictors (default: infer_cfg.yml serving.workers, else 1)")
    serve.add_argument("--batch-max-size", type=int, default=None, metavar="B",
                       help="adaptive batching: stack up to B images of concurrent requests "
                            "into one predictor run (default: infer_cfg.yml "
                            "serving.batch_max_size, else 1 = off)")
    serve.add_argument("--batch-timeout-ms", type=float, default=None, metavar="MS",
                       help="longest a request waits for others to join its batch "
                            "(default: infer_cfg.yml serving.batch_timeout_ms, else 0: a "
                            "batch is what queued while the predictor ran)")
    serve.add_argument("--inline-max-ms", type=float, default=20.0, metavar="MS",
                       help="run a request on the event loop, without the hand-off to a "
                            "predictor thread, when none is in flight and recent ones took at "
                            "most MS (default 20; 0: always hand off)")
    serve.add_argument("--max-request-pixels", type=int, default=None, metavar="N",
                       help="pixels all images of one request may decode to; more get 400 "
                            "(default: infer_cfg.yml serving.max_request_pixels, else "
                            "16777216: a 12 MP photo fits)")
    serve.add_argument("--reduced-decode", action=argparse.BooleanOptionalAction, default=None,
                       help="decode a JPEG at 1/2, 1/4 or 1/8 scale when the model's resize "
                            "shrinks it at least that much (faster, answers differ a little; "
                            "default: infer_cfg.yml serving.reduced_decode, else off)")
    serve.add_argument("--decode-timeout", type=float, default=5.0, metavar="S",
                       help="seconds one request's images may take to decode and prepare; "
                            "then 400 (default 5)")
    http_limits.add_flags(serve)
    serve.add_argument("--math-threads", type=int, default=1,
                       help="CPU math threads inside each predictor (default 1)")
    serve.add_argument("--graceful-timeout", type=float, default=30.0,
                       help="seconds to let in-flight requests finish on SIGTERM")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=run_serve)

    load = subparsers.add_parser(
        "load",
        help="open-loop load at a fixed request rate against a model server",
        description="Send real images at a fixed rate (open loop: send times do not wait "
        "for responses), then print achieved rate, status codes and latency percentiles.",
    )
    load.add_argument("url", metavar="URL", help="server base URL, e.g. http://127.0.0.1:8000")
    load.add_argument("--rps", type=float, required=True, help="requests per second to offer")
    load.add_argument("--duration", type=float, required=True, help="seconds to send for")
    load.add_argument("--model", default=None,
                      help="model name (default: asked from the server's metadata)")
    load.add_argument("--images", type=pathlib.Path, default=None,
                      help="directory of PNG/JPEG images, or a model repo (its data/val); "
                      "default: the example's data/val")
    load.add_argument("--concurrency-cap", type=int, default=64,
                      help="most requests outstanding at once; beyond it a send is counted "
                      "as dropped, not delayed (default 64)")
    load.add_argument("--timeout", type=float, default=10.0, help="per-request timeout, seconds")
    load.add_argument("--route", choices=["infer", "paddle-serving"], default="infer")
    load.add_argument("--seed", type=int, default=None,
                      help="seed of the random draw of each request's image (default: a "
                      "fresh draw each run)")
    load.add_argument("--json", dest="json_out", type=pathlib.Path, default=None,
                      help="also write the report as JSON here")
    load.set_defaults(func=run_load_command)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model directory (errors are user errors), then serve until SIGTERM."""
    # Paddle's CPU kernels use OpenMP; left unset, every predictor thread may
    # start one OpenMP thread per core and they fight over the same cores.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, args.math_threads)))
    # lazy (import cost): `mlops --help` does not load it; it pulls pillow, opencv, pysimdjson
    from serving.dataplane import ServerSettings

    # lazy (import cost): `mlops --help` does not load it
    from serving.modeldir import load_model_dir

    # lazy (import cost): `mlops --help` does not load it; it pulls pydantic
    from serving.options import (
        DEFAULT_BATCH_MAX_SIZE,
        DEFAULT_BATCH_TIMEOUT_MS,
        DEFAULT_WORKERS,
        ServingOptions,
    )

    # lazy (import cost): `mlops --help` does not load it; it pulls pillow, pysimdjson
    from serving.preprocess import MAX_REQUEST_PIXELS, ImageOptions

    # lazy (import cost): `mlops --help` does not load it
    from serving.runtime import default_threads

    # lazy (import cost): `mlops --help` does not load it;
    # it pulls pillow, opencv, pysimdjson, starlette, uvicorn
    from serving.server import serve

    model = load_model_dir(args.model_dir)
    name = args.model_name or str(model.record.get("name") or model.path.resolve().name)
    version = args.model_version or model.record.get("version")
    if not version:  # an upstream export as it is (no model.yaml): its weights name it
        version = f"sha256-{model.weights_sha256[:12]}"
        print(f"{model.path}: no model.yaml version; serving it as version {version} "
              "(the weights' digest; --model-version names it)", file=sys.stderr)
    for flag in ("max_body_bytes", "max_in_flight", "math_threads"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.body_timeout <= 0:
        raise UserError("--body-timeout must be positive")
    declared = model.infer_cfg.serving or ServingOptions()

    def pick(flag: str, default: float) -> float:
        value = getattr(args, flag)
        if value is None:
            value = getattr(declared, flag)
        return default if value is None else value

    workers = int(pick("workers", DEFAULT_WORKERS))
    batch_max_size = int(pick("batch_max_size", DEFAULT_BATCH_MAX_SIZE))
    batch_timeout_ms = float(pick("batch_timeout_ms", DEFAULT_BATCH_TIMEOUT_MS))
    if workers < 1:
        raise UserError("--workers must be at least 1")
    if batch_max_size < 1:
        raise UserError("--batch-max-size must be at least 1 (1: no batching)")
    if not 0 <= batch_timeout_ms <= 1000:
        raise UserError("--batch-timeout-ms must be between 0 and 1000")
    max_request_pixels = int(pick("max_request_pixels", MAX_REQUEST_PIXELS))
    if max_request_pixels < 1:
        raise UserError("--max-request-pixels must be at least 1")
    if not 0 < args.decode_timeout <= 3600:  # also refuses nan
        raise UserError("--decode-timeout must be positive (seconds, at most 3600)")
    reduced = args.reduced_decode if args.reduced_decode is not None else declared.reduced_decode
    images = ImageOptions(max_request_pixels, args.decode_timeout, bool(reduced))
    if not 0 <= args.inline_max_ms <= 1000:  # also refuses nan
        raise UserError("--inline-max-ms must be between 0 and 1000")
    try:  # the request-head and body-memory limits, bounded in serving.limits
        limits = http_limits.from_args(args)
        limits.body_budget(args.max_in_flight, args.max_body_bytes)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    threads = args.threads if args.threads is not None else max(1, default_threads() // workers)
    if threads < 1:
        raise UserError("--threads must be at least 1")
    settings = ServerSettings(
        model_name=name,
        model_version=str(version),
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body_bytes,
        max_in_flight=args.max_in_flight,
        threads=threads,
        math_threads=args.math_threads,
        graceful_timeout=args.graceful_timeout,
        body_timeout=args.body_timeout,
        weights_sha256=args.weights_sha256,
        workers=workers,
        batch_max_size=batch_max_size,
        batch_timeout_ms=batch_timeout_ms,
        inline_max_ms=args.inline_max_ms,
        images=images,
        limits=limits,
    )
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    return serve(model, settings, log_level=args.log_level)


def run_load_command(args: argparse.Namespace) -> int:
    """Run the load generator and print its report."""
    # lazy (import cost): `mlops --help` does not load it; it pulls pysimdjson
    from serving.loadgen import LoadError, Stop, default_images_dir, load_images, run_load

    images_dir = args.images or default_images_dir()
    try:
        images = load_images(images_dir)
    except LoadError as exc:
        raise UserError(str(exc)) from None
    # SIGTERM ends the run like Ctrl-C: stop sending, then report what was sent.
    with Stop.on_signals((signal.SIGINT, signal.SIGTERM)) as stop:
        report = run_load(
            args.url,
            rps=args.rps,
            duration=args.duration,
            images=images,
            model=args.model,
            concurrency_cap=args.concurrency_cap,
            timeout=args.timeout,
            route=args.route,
            seed=args.seed,
            stop=stop,
        )
    print(report.summary())
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(report.to_json())
        print(f"report written to {args.json_out}", file=sys.stderr)
    return 0
