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
"""

import argparse
import json
import pathlib
from typing import Any, Sequence

import yaml

from contracts.errors import ExitCode, MlopsError
from promotion.decision.gate import evaluate_gate
from promotion.gitrepo.production import read_production
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.steps.common import base_parser, run_main


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
    prod: dict[str, float] | None
    if production:
        prod = _read_metrics(pathlib.Path(production), "production metrics")
    elif production_from_gitops:
        # The platform's gate in the GitOps repo bounds the pushed mlops.yaml's: a push
        # that lowers `min` to 0 fails here, naming the field.
        from promotion.gitrepo.platform_policy import read_platform_policy

        prod = _production_from_gitops(production_from_gitops, loaded.config.model,
                                       gitops_branch or "main")
        platform = read_platform_policy(production_from_gitops, gitops_branch or "main")
        gate = platform.gate_for(gate, f"{loaded.path}: gate")
    else:
        prod = None
    result = evaluate_gate(gate, metrics, prod)
    (output_dir / "gate.json").write_text(json.dumps(result.model_dump(), indent=2) + "\n")
    print(result.reason, flush=True)
    return {**result.as_outputs(), "value": f"{result.value:.6f}"}


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
            from workflows.steps.common import outputs_dir, write_outputs
            write_outputs(outputs_dir(a), params)
            raise GateFailed(params["reason"])
        return params

    return run_main(go, parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
