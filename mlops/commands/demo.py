"""`mlops demo`: the whole story on this machine, from a git push to a promoted
(or rolled-back) model, with real git, Prometheus, HAProxy and Paddle.

The story itself is `mlops.demo.story`; this module is only its command line.
"""

import argparse

from mlops.demo import scenarios


def _demo(args: argparse.Namespace) -> int:
    import os

    from mlops.demo.story import play
    from mlops.images.podman import STORE_ENV, default_store_dir

    # The pushes' build-image builds the model repo's image with podman (`mlops run`,
    # mlops.images.stepbuild) in the user's image store, named here before the demo points
    # its children's XDG_CACHE_HOME into the work dir: the store's layers (the training
    # base's PaddlePaddle, ~1 GB) outlive a demo.
    os.environ.setdefault(STORE_ENV, str(default_store_dir()))
    return play(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="the whole story on this machine: push, pipeline, PR, approval, canary",
        description="Create a model repo and a GitOps repo, start the local platform, push "
        "the example and walk it to production; then push each scenario's change and show "
        "the canary promote it or roll it back, or the gate refuse it.",
    )
    parser.add_argument("--workdir", default=".mlops-demo",
                        help="everything goes here; a previous demo's files in it are replaced "
                        "(default: ./.mlops-demo)")
    parser.add_argument("--example", default=scenarios.DEFAULT_EXAMPLE,
                        choices=list(scenarios.EXAMPLES),
                        help="the model repo under examples/ to push (default: "
                        f"{scenarios.DEFAULT_EXAMPLE}; products-yolov3 trains ~10 minutes a push)")
    parser.add_argument("--scenario", default="good", choices=[*scenarios.NAMES, "all"],
                        help="good: promoted; slow / errors / skew: rolled back by the canary "
                        "(latency, errors, model quality); low-map: refused by the gate; all: the "
                        "five in a row (default: good)")
    parser.add_argument("--wait-approval", action="store_true",
                        help="wait for you to approve each PR (`mlops pr approve`) instead of "
                        "approving it for you")
    parser.add_argument("--keep-running", action="store_true",
                        help="leave the platform, controller and load up at the end "
                        "(stop them with `mlops down --workdir WORKDIR/platform`)")
    parser.add_argument("--rps", type=float, default=40.0,
                        help="load on the model's route while a canary is judged, requests/s "
                        "(default 40; an eighth of it while a pipeline trains)")
    parser.add_argument("--preset", default=None,
                        help="metric preset the controller reads (haproxy|model; default: the "
                        "platform's router view, haproxy: latency and errors as clients see "
                        "them; model reads only the servers' own histograms)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the training seed of every push (default: the example's); "
                        "no outcome of the demo depends on it")
    parser.add_argument("--show-every", type=float, default=5.0, metavar="SECONDS",
                        help="how often the canary's per-version numbers are printed")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="limit for each stage (a pipeline run, a canary)")
    parser.set_defaults(func=_demo)
