"""The flags every model repo's `train.py` takes: the pipeline appends them
(workflows/worker_command.py).

    --output-dir OUT --checkpoint-dir CKPT     where the export and the checkpoints go
    --epochs --batch-size --lr --max-steps --subset --seed --log-every --checkpoint-every
    --kernels reproducible|fast                MKL's code path pinned or not (kernels.py)
    --drill-delay-ms --drill-error-rate --drill-error-status --drill-skew   a fault drill
    --weights-cache DIR                        reuse the weights of an identical earlier run

A repo adds its own flags (where its data is, a warm start...) to the parser
this returns, then checks the result with :func:`check`. Defaults that depend
on the model (epochs, learning rate) and the skews its `infer_cfg.yml` can
carry are the repo's to give.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from modelkit import kernels
from modelkit.errors import TrainError

__all__ = ["check", "training_parser"]


def training_parser(description: str, *, epochs: int, lr: float, skews: Sequence[str],
                    skew_help: str, generator: str = "") -> argparse.ArgumentParser:
    """The parser of the common flags; `skews` are the `--drill-skew` choices ("none" first)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--output-dir", required=True, help="export + bbox.json go here")
    p.add_argument("--checkpoint-dir", required=True, help="checkpoints; resumed from")
    p.add_argument("--data-dir", default="data",
                   help="the dataset: the pipeline passes the one prepare-data verified from "
                   "the repo's pins (annotations/<split>.json, images/)"
                   + (f"; by hand, make one with {generator}" if generator else ""))
    p.add_argument("--epochs", type=int, default=epochs,
                   help="passes over the train split; 0 with --init-from: no training, the "
                   "starting weights are exported as they are (a change to serving flags only)")
    p.add_argument("--batch-size", type=int, default=32, help="global batch, split over ranks")
    p.add_argument("--lr", type=float, default=lr, help="peak AdamW learning rate")
    p.add_argument("--max-steps", type=int, default=0, help="cap on total steps (0 = none)")
    p.add_argument("--subset", type=int, default=0, help="use only the first N train images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernels", choices=kernels.MODES, default="reproducible",
                   help="reproducible: MKL's code path pinned (MKL_CBWR=AVX2), the same "
                        "weights on any x86-64 CPU; fast: MKL picks the CPU's fastest path")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    drill = p.add_argument_group(
        "fault drill", "declare that the exported version misbehaves on purpose (infer_cfg.yml "
        "fault:), to rehearse a canary rollback; all zero = a normal model")
    drill.add_argument("--drill-delay-ms", type=float, default=0.0, metavar="MS",
                       help="delay the server adds to every inference request, ms")
    drill.add_argument("--drill-error-rate", type=float, default=0.0, metavar="SHARE",
                       help="share of inference requests the server fails (0..1)")
    drill.add_argument("--drill-error-status", type=int, default=500, metavar="{500,503}",
                       help="HTTP status of the injected errors")
    drill.add_argument("--drill-skew", choices=tuple(skews), default="none",
                       help="export infer_cfg.yml with a serving-side mistake the training code's "
                       "own bbox.json cannot show (the pipeline's gate runs the export as "
                       "served, so it does): "
                       + skew_help)
    p.add_argument("--weights-cache", default="", metavar="DIR",
                   help="reuse the final checkpoint of an earlier run with the same data, "
                   "hyperparameters, workers and code (empty: train every time)")
    p.add_argument("--init-from", default="", metavar="MODEL_DIR",
                   help="start from this export's weights (inference.json/.pdiparams; the "
                   "pipeline passes production's for `training.init_from: production`; "
                   "empty: from scratch); a checkpoint to resume wins over it")
    return p


def check(args: argparse.Namespace) -> argparse.Namespace:
    """`args` when every common flag is in range, else a `TrainError` naming the flag."""
    for name in ("batch_size", "log_every", "checkpoint_every"):
        if getattr(args, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    # 0 epochs re-exports the weights it starts from (a push that changes only serving
    # flags needs no training); from scratch that would export random weights
    if args.epochs < 0 or (args.epochs == 0 and not getattr(args, "init_from", "")):
        raise TrainError(f"--epochs must be >= 1 (or 0 with --init-from), got {args.epochs}")
    for name in ("max_steps", "subset"):
        if getattr(args, name) < 0:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if not args.lr > 0:
        raise TrainError(f"--lr must be > 0, got {args.lr}")
    # the same bounds the server's infer_cfg.yml check applies (serving/modeldir.py FaultConfig)
    if not 0 <= args.drill_delay_ms <= 3_600_000:  # also refuses nan
        raise TrainError(f"--drill-delay-ms must be in 0..3600000, got {args.drill_delay_ms}")
    if not 0 <= args.drill_error_rate <= 1:
        raise TrainError(f"--drill-error-rate must be between 0 and 1, got {args.drill_error_rate}")
    if args.drill_error_status not in (500, 503):
        raise TrainError(f"--drill-error-status must be 500 or 503, got {args.drill_error_status}")
    return args
