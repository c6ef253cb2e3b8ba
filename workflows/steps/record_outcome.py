"""The pipeline's exit handler: record how the run ended, whatever happened.

Run after the DAG with `{{workflow.status}}` and `{{workflow.failures}}` (the local runner
runs the same template), it writes `OUT/outcome.json` (with the gate verdict when the gate
ran), `OUT/report.md` (the exit handler's `report` artifact) and `OUT/pr-link`, exported
as the Workflow's global output `pr-url`: the run's pull request, else the GitOps repo's
list of them, else the model repo's page. Why: docs/inside-workflows.md.
"""

import argparse
import json
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from cogs.files import atomic_write_text
from gitops.forges.registry import pulls_page, repo_page
from promotion.reports.report_paired import same_images_section

OUTCOME_FILE = "outcome.json"
"""The exit handler's record in OUT; a local run folds it into `run.json` (local.argo.runner)."""
LINK_FILE = "pr-link"
"""The link the Workflow exports as its global output `pr-url` (workflows.pipeline)."""


def _read_json(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None  # a step that died mid-write: the report says "-" rather than failing


def report(result: dict[str, Any], metrics: Any, proposal: Any, commit: str) -> str:
    """The run's report as Markdown (pure: from the records the steps left)."""
    gate = result.get("gate") or {}
    metrics = metrics if isinstance(metrics, dict) else {}
    proposal = proposal if isinstance(proposal, dict) else {}

    def num(key: str) -> str:
        value = metrics.get(key)
        return f"{value:.6f}" if isinstance(value, (int, float)) else "-"

    pr = proposal.get("pr_url") or (f"#{proposal['pr_number']}" if proposal.get("pr_number")
                                    else None)
    lines = [
        f"# Pipeline run `{result.get('workflow') or '(local)'}`: {result.get('status')}",
        "",
        f"- commit: `{commit or '-'}`",
        f"- mAP@0.5: {num('map50')}; mAP@[.5:.95]: {num('map')}",
        f"- gate: {gate.get('reason') or 'did not run'}",
        f"- proposal: {proposal['model']} {proposal['version']}, PR {pr or '-'} "
        f"({proposal.get('status')})" if proposal.get("version") else "- proposal: none",
    ]
    if gate.get("sets"):  # production ran on the same images: the tables and pictures
        lines += ["", *same_images_section(gate)]
    failures = result.get("failures")
    if isinstance(failures, list) and failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {f.get('displayName', '?')}: {f.get('message', '')}" for f in failures
                  if isinstance(f, dict)]
    return "\n".join(lines) + "\n"


def pr_link(proposal: Any, gitops: str = "", forge: str = "", repo: str = "") -> str:
    """Where the run's "Pull request" link leads (pure): its PR; else the GitOps repo's
    pull requests on `forge`; else the model repo's page; else "" (no web page known)."""
    url = proposal.get("pr_url") if isinstance(proposal, dict) else None
    if isinstance(url, str) and url:
        return url  # a hosted forge's web page; the local forge's `<repo>#pr-N`
    return pulls_page(forge, gitops) or repo_page(repo) or ""


def record(out: pathlib.Path, status: str, workflow: str, failures: Any, *, gitops: str = "",
           forge: str = "", repo: str = "") -> dict[str, Any]:
    """Write and return the outcome record; write the report and the PR link next to it."""
    gate = _read_json(out / "full" / "gate.json")
    result = {
        "workflow": workflow,
        "status": status,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "failures": failures,
        "gate": gate,
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / OUTCOME_FILE, json.dumps(result, indent=2) + "\n")
    proposal = _read_json(out / "full" / "proposal" / "proposal.json")
    text = report(result, _read_json(out / "full" / "metrics.json"), proposal,
                  os.environ.get("MLOPS_TRAINING_COMMIT", ""))
    atomic_write_text(out / LINK_FILE, pr_link(proposal, gitops, forge, repo))
    atomic_write_text(out / "report.md", text)
    return result


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", required=True)
    parser.add_argument("--workflow", default="")
    parser.add_argument("--failures", default="null", help="JSON, as Argo's {{workflow.failures}}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--gitops", default="", help="the GitOps repo (its PR list: the link "
                        "when the run opened no PR)")
    parser.add_argument("--forge", default="", help="the GitOps repo's forge")
    parser.add_argument("--repo", default="", help="the model repo (the last resort link)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry (`mlops step record-outcome`)."""
    args = build_parser().parse_args(argv)
    try:
        failures = json.loads(args.failures) if args.failures else None
    except json.JSONDecodeError:
        failures = args.failures  # Argo passes an empty string when nothing failed
    result = record(pathlib.Path(args.out), args.status, args.workflow, failures,
                    gitops=args.gitops, forge=args.forge, repo=args.repo)
    gate = result["gate"]
    verdict = f"; gate: {gate['reason']}" if gate else ""
    print(f"workflow {args.workflow or '(local)'} {args.status}{verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
