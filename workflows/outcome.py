"""The pipeline's exit handler: record how the run ended, whatever happened.

Argo runs it after the DAG (success or not) with `{{workflow.status}}` and
`{{workflow.failures}}`; the local runner runs the same template. It writes
`OUT/outcome.json` (status, failures, and the gate verdict when the gate
ran) and prints one line, so a run's end is readable from the workspace,
the step log, or the workflow metrics.
"""

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any


def record(out: pathlib.Path, status: str, workflow: str, failures: Any) -> dict[str, Any]:
    """Write and return the outcome record."""
    gate_file = out / "full" / "gate.json"
    gate = json.loads(gate_file.read_text()) if gate_file.is_file() else None
    result = {
        "workflow": workflow,
        "status": status,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "failures": failures,
        "gate": gate,
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".outcome.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out / "outcome.json")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry (`python -m workflows.outcome`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", required=True)
    parser.add_argument("--workflow", default="")
    parser.add_argument("--failures", default="null", help="JSON, as Argo's {{workflow.failures}}")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        failures = json.loads(args.failures) if args.failures else None
    except json.JSONDecodeError:
        failures = args.failures  # Argo passes an empty string when nothing failed
    result = record(pathlib.Path(args.out), args.status, args.workflow, failures)
    gate = result["gate"]
    verdict = f"; gate: {gate['reason']}" if gate else ""
    print(f"workflow {args.workflow or '(local)'} {args.status}{verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
