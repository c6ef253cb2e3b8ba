"""`mlops gate plan RUN`: what a run's evaluation images can tell, and how many it would take.

From the run's paired comparison (`full/paired.json`: the bootstrap standard deviation
of each difference, all sets pooled and each set alone): the regression this run's
interval rules out, how often an equally good candidate is shown non-inferior by the
margin (`--margin`, default the run's `gate.max_regression`), the smallest margin shown
with `--power` (default 95 %), and the images that margin would need
(`promotion.decision.gate.plan`; docs/gate.md states the rule and its error rates).
RUN is a run's output dir, a hook's run dir, or a name under `--runs DIR`, as for
`mlops runs compare`. Exit 2 when the run has no paired comparison (no production yet).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from mlops.errors import UserError


def _plan(args: argparse.Namespace) -> int:
    from promotion.decision.gate import plan
    from promotion.decision.paired import PairedResult
    from workflows.run_compare import find_run

    out = find_run(args.run, [pathlib.Path(r).expanduser() for r in args.runs])
    paired_file, gate_file = out / "full" / "paired.json", out / "full" / "gate.json"
    if not paired_file.is_file():
        raise UserError(f"{paired_file}: no paired comparison in this run (it had no "
                        "production model to compare with, or stopped before evaluate)")
    try:
        doc = json.loads(paired_file.read_text())
        gate = json.loads(gate_file.read_text()) if gate_file.is_file() else {}
        results = [("all sets", PairedResult.model_validate(doc.get("pooled")
                                                            or doc["sets"][0]["paired"]))]
        if len(doc["sets"]) > 1:
            results += [(e["set"], PairedResult.model_validate(e["paired"]))
                        for e in doc["sets"]]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise UserError(f"{paired_file}: not a paired comparison ({exc})") from None
    metric = args.metric or gate.get("metric", "map50")
    margin = args.margin if args.margin is not None else float(gate.get("max_regression", 0.01))
    rows = []
    for label, paired in results:
        p = plan(paired.difference[metric], paired.sd.get(metric, 0.0), paired.images,
                 margin, paired.confidence, args.power)
        rows.append({"set": label, **p.model_dump()})
    if args.json:
        print(json.dumps({"metric": metric, "margin": margin, "power_goal": args.power,
                          "rows": rows}, indent=2))
        return 0
    print(f"{metric}, margin {margin:.4f}, planned power {args.power:.0%} "
          "(for a candidate exactly as good as production):")
    print(f"{'images':<10}{'n':>7}{'sd':>9}{'rules out':>11}{'power':>8}"
          f"{'margin at goal':>16}{'n at margin':>13}")
    for r in rows:
        print(f"{r['set']:<10}{r['images']:>7}{r['sd']:>9.4f}{r['rules_out']:>11.4f}"
              f"{r['power']:>8.1%}{r['margin_for_power']:>16.4f}{r['images_needed']:>13}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops gate plan`."""
    parser = subparsers.add_parser("gate", help="the quality gate: sample-size planning")
    sub = parser.add_subparsers(dest="gate_command", metavar="ACTION", required=True)
    p = sub.add_parser("plan", help="what a run's evaluation images can rule out, and how "
                                    "many images a margin needs")
    p.add_argument("run", metavar="RUN", help="a run's output dir, or its name under --runs")
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="a runs dir of the post-receive hook (repeatable)")
    p.add_argument("--margin", type=float, default=None,
                   help="the margin to plan for (default: the run's gate.max_regression)")
    p.add_argument("--power", type=float, default=0.95,
                   help="how often an equally good candidate should pass (default 0.95)")
    p.add_argument("--metric", choices=["map50", "map"], default=None,
                   help="default: the run's gate metric")
    p.add_argument("--json", action="store_true", help="the plan as JSON")
    p.set_defaults(func=_plan)
