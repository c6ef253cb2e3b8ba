"""`gate`: pass or fail the candidate against `gate.min` and the production model.

The verdict is an output parameter (`passed`), not the exit code: a failed
gate is a judgement, not a crash, so Argo must not retry it and the exit
handler still records it. `--exit-code` makes a failed gate exit 6 (gate refused) for
scripts that want that.

The production model is read from the GitOps repo the candidate would be
proposed to (`--production-from-gitops REPO`, the pipeline passes its
`gitops-repo` parameter): the stable version's recorded metrics
(`promotion.gitrepo.production`). An empty REPO means none is configured (Argo
passes the parameter even when it is unset). `--production FILE` (a
model.yaml or metrics JSON) overrides it. A GitOps repo that cannot be read
fails the step: production would be unknown, not absent.

When the evaluate step ran production on the same images (`paired.json`,
`workflows.paired_evaluation`), that is what is judged (`evaluate_paired_gate`: the
sets pooled, each set and class a safety check; docs/gate.md), and
production's recorded metrics are not read. Its `outcome` output is `pass`,
`review` (inconclusive, proposed for a human's judgement) or `fail`; `passed`
is true for the first two.
"""

import argparse
import json
import pathlib
from typing import Any, Sequence

import yaml

from contracts.errors import ExitCode, MlopsError
from promotion.decision.gate import GateConfig, evaluate_gate, evaluate_paired_gate
from promotion.decision.paired import PairedResult
from promotion.gitrepo.platform_policy import read_platform_policy
from promotion.gitrepo.production import read_production
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.steps.common import base_parser, outputs_dir, run_main, write_outputs


class GateFailed(MlopsError):
    """The candidate did not pass (only raised with --exit-code)."""

    exit_code = ExitCode.GATE_REFUSED


def _read_metrics(path: pathlib.Path, what: str) -> dict[str, float]:
    if not path.is_file():
        raise ConfigError(f"{what} {path}: not found")
    data = yaml.safe_load(path.read_text()) or {}
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        data = data["metrics"]  # a model.yaml record
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: expected a mapping of metric -> value")
    try:
        return {k: float(v) for k, v in data.items() if isinstance(v, (int, float, str))
                and k in ("map", "map50", "map75")}
    except ValueError as exc:
        raise ConfigError(f"{what} {path}: {exc}") from exc


def _production_from_gitops(repo: str, model: str, branch: str) -> dict[str, float] | None:
    found = read_production(repo, model, branch)
    if found is None:
        print(f"production: no stable version of {model} in {repo} ({branch})", flush=True)
        return None
    if not found.metrics:
        print(f"production: {model} {found.version} has no recorded metrics; not compared",
              flush=True)
        return None
    print(f"production: {model} {found.version} (metrics from {found.source})", flush=True)
    return found.metrics


def paired_verdict(gate: GateConfig, doc: dict[str, Any]) -> dict[str, Any]:
    """`gate.json` for a same-images comparison: the pooled comparison judged, every set
    and class as a safety check (`evaluate_paired_gate`)."""
    sets = {entry["set"]: PairedResult.model_validate(entry["paired"]) for entry in doc["sets"]}
    pooled_doc = doc.get("pooled") or doc["sets"][0]["paired"]  # one set: the set itself
    pooled = PairedResult.model_validate(pooled_doc)
    result = evaluate_paired_gate(gate, pooled, sets)
    by_name = {v.name: v for v in result.sets}
    return {
        **result.model_dump(exclude={"sets"}),
        "images": pooled.images,
        "paired_confidence": pooled.confidence, "paired_resamples": pooled.resamples,
        "class_confidence": pooled.class_confidence, "class_family": pooled.class_family,
        "production_version": doc["production"]["version"],
        "pooled": {k: pooled_doc[k] for k in ("candidate", "production", "difference")},
        "sets": [{
            "set": entry["set"], **by_name[entry["set"]].model_dump(exclude={"name"}),
            "intervals": {"candidate": entry["paired"]["candidate"],
                          "production": entry["paired"]["production"],
                          "difference": entry["paired"]["difference"]},
            "classes": entry["paired"]["classes"], "pictures": entry["pictures"],
        } for entry in doc["sets"]],
    }


def run(
    repo: str,
    out: str,
    production: str | None = None,
    which: str = "full",
    production_from_gitops: str | None = None,
    gitops_branch: str = "main",
) -> dict[str, Any]:
    """Judge `out/<which>/metrics.json`; returns output parameters.

    Production metrics come from `production` (a file) if given, else from the
    stable version in the GitOps repo `production_from_gitops` (empty: none).
    """
    loaded = load_config(repo)
    output_dir = pathlib.Path(out).resolve() / which
    metrics = _read_metrics(output_dir / "metrics.json", "candidate metrics")
    gate = loaded.config.gate
    paired_file = output_dir / "paired.json"
    prod: dict[str, float] | None
    if paired_file.is_file() and not production:
        if production_from_gitops:
            platform = read_platform_policy(production_from_gitops, gitops_branch or "main")
            gate = platform.gate_for(gate, f"{loaded.path}: gate")
        verdict = paired_verdict(gate, json.loads(paired_file.read_text()))
        (output_dir / "gate.json").write_text(json.dumps(verdict, indent=2) + "\n")
        print(verdict["reason"], flush=True)
        return {"passed": "true" if verdict["passed"] else "false",
                "outcome": verdict["outcome"], "reason": verdict["reason"],
                "value": f"{verdict['value']:.6f}"}
    if production:
        prod = _read_metrics(pathlib.Path(production), "production metrics")
    elif production_from_gitops:
        # The platform's gate in the GitOps repo bounds the pushed mlops.yaml's: a push
        # that lowers `min` to 0 fails here, naming the field.

        prod = _production_from_gitops(production_from_gitops, loaded.config.model,
                                       gitops_branch or "main")
        platform = read_platform_policy(production_from_gitops, gitops_branch or "main")
        gate = platform.gate_for(gate, f"{loaded.path}: gate")
    else:
        prod = None
    result = evaluate_gate(gate, metrics, prod)
    (output_dir / "gate.json").write_text(json.dumps(result.model_dump(), indent=2) + "\n")
    print(result.reason, flush=True)
    return {**result.as_outputs(), "outcome": "pass" if result.passed else "fail",
            "value": f"{result.value:.6f}"}


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--production", help="production model's model.yaml or metrics JSON")
    parser.add_argument(
        "--production-from-gitops",
        metavar="REPO",
        default="",
        help="GitOps repo (path or URL) whose stable version is production (empty: none)",
    )
    parser.add_argument("--gitops-branch", default="main", help="branch of the GitOps repo")
    parser.add_argument("--which", default="full", choices=["full", "smoke"])
    parser.add_argument("--exit-code", action="store_true",
                        help="exit 6 (gate refused) when the gate fails")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()

    def go(a: Any) -> dict[str, Any]:
        params = run(a.repo, a.out, a.production, a.which, a.production_from_gitops,
                     a.gitops_branch)
        if a.exit_code and params["passed"] != "true":
            write_outputs(outputs_dir(a), params)
            raise GateFailed(params["reason"])
        return params

    return run_main(go, parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
