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
    # Defaults and bounds are the settings' (`serving.settings.ServeSettings`): an option
    # left out is None here, and its help says what the settings make of it.
    serve.add_argument("model_dir", metavar="MODEL_DIR", type=pathlib.Path)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--model-name", help="default: model.yaml's name, else the directory name")
    serve.add_argument("--model-version", help="default: model.yaml's version, else "
                       "sha256-<first 12 hex digits of the weights' sha256>")
    serve.add_argument("--max-body-bytes", type=int,
                       help="larger request bodies get 413 (default 8 MiB)")
    serve.add_argument("--max-in-flight", type=int,
                       help="inference requests admitted at once; more get 503 (default 16)")
    serve.add_argument("--weights-sha256", metavar="HEX",
                       help="refuse to serve unless the weights file has this sha256 "
                            "(the Deployment passes its annotation)")
    serve.add_argument("--body-timeout", type=float,
                       help="seconds a client may take to send its body; then 408 (default 10)")
    serve.add_argument("--threads", type=int,
                       help="predictor worker threads per worker process (default: the "
                            "cores divided among the worker processes, at least 1)")
    serve.add_argument("--workers", type=int,
                       help="server processes behind the one port, each with its own "
                            "predictors, 1 to 64 (default: infer_cfg.yml serving.workers, "
                            "else 1)")
    serve.add_argument("--batch-max-size", type=int, metavar="B",
                       help="adaptive batching: stack up to B images (1 to 256) of concurrent "
                            "requests into one predictor run (default: infer_cfg.yml "
                            "serving.batch_max_size, else 1 = off)")
    serve.add_argument("--batch-timeout-ms", type=float, metavar="MS",
                       help="longest a request waits for others to join its batch, 0 to "
                            "1000 (default: infer_cfg.yml serving.batch_timeout_ms, else 0: a "
                            "batch is what queued while the predictor ran)")
    serve.add_argument("--inline-max-ms", type=float, metavar="MS",
                       help="run a request on the event loop, without the hand-off to a "
                            "predictor thread, when none is in flight and recent ones took at "
                            "most MS, 0 to 1000 (default 20; 0: always hand off)")
    serve.add_argument("--max-request-pixels", type=int, metavar="N",
                       help="pixels all images of one request may decode to; more get 400 "
                            "(default: infer_cfg.yml serving.max_request_pixels, else "
                            "16777216: a 12 MP photo fits)")
    serve.add_argument("--reduced-decode", action=argparse.BooleanOptionalAction,
                       help="decode a JPEG at 1/2, 1/4 or 1/8 scale when the model's resize "
                            "shrinks it at least that much (faster, answers differ a little; "
                            "default: infer_cfg.yml serving.reduced_decode, else off)")
    serve.add_argument("--decode-timeout", type=float, metavar="S",
                       help="seconds one request's images may take to decode and prepare, "
                            "at most 3600; then 400 (default 5)")
    http_limits.add_flags(serve)
    serve.add_argument("--math-threads", type=int,
                       help="CPU math threads inside each predictor (default 1)")
    serve.add_argument("--graceful-timeout", type=float,
                       help="seconds to let in-flight requests finish on SIGTERM (default 30)")
    serve.add_argument("--termination-log", metavar="PATH",
                       help="when the version cannot answer its warm-up sample request (an "
                            "error no retry fixes), write why to PATH and exit with code 9 "
                            "instead of staying live and never ready (the Deployment passes "
                            "its terminationMessagePath, so Kubernetes shows why)")
    serve.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"],
                       help="default: info")
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
    """Check the flags, load the model directory (errors are user errors), merge its
    `serving:` section (`ServeSettings.from_options`), then serve until SIGTERM."""
    from serving.settings import ServeSettings

    flags = ServeSettings.from_options(vars(args))  # the flags alone: refused before loading
    # Paddle's CPU kernels use OpenMP; left unset, every predictor thread may
    # start one OpenMP thread per core and they fight over the same cores.
    os.environ.setdefault("OMP_NUM_THREADS", str(flags.math_threads))
    from serving.modeldir import load_model_dir
    from serving.runtime import default_threads
    from serving.server import serve

    model = load_model_dir(args.model_dir)
    options = ServeSettings.from_options(vars(args), model.infer_cfg.serving)
    name = options.model_name or str(model.record.get("name") or model.path.resolve().name)
    version = options.model_version or model.record.get("version")
    if not version:  # an upstream export as it is (no model.yaml): its weights name it
        version = f"sha256-{model.weights_sha256[:12]}"
        print(f"{model.path}: no model.yaml version; serving it as version {version} "
              "(the weights' digest; --model-version names it)", file=sys.stderr)
    settings = options.server_settings(name, str(version), default_threads())
    logging.basicConfig(
        level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    return serve(model, settings, log_level=options.log_level)


def run_load_command(args: argparse.Namespace) -> int:
    """Run the load generator and print its report."""
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
