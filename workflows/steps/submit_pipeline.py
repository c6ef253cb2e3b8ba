"""`submit-pipeline`: render the checked-out commit's pipeline and create its Workflow.

The push Workflow's second step (`workflows.push`): renders the pipeline from the
`mlops.yaml` of the commit in `--repo` with the platform settings of `--settings` and
creates it with the pod's own token (ServiceAccount `mlops-submitter`). A broken
`mlops.yaml` fails the step naming the file and field; a Workflow already there (409) is
a duplicate delivery, and succeeds. The local runner parses the same args
(:func:`build_parser`) and runs what :func:`render_child` builds.
"""

import argparse
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from contracts.kubeapi import ApiCall
from workflows.binding import bind, parse_binding
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.lint import validate_doc
from workflows.push import child_workflow
from workflows.settings import PipelineSettings
from workflows.steps.common import base_parser, run_main
from workflows.submit import ArgoUnavailable, SubmitError

#: Every Kubernetes API call this module makes (`workflows.identity` holds them against the
#: submitter's Role; tests/workflows/test_push_submit.py records what `create_workflow` sends).
API_CALLS = (ApiCall("create", "workflows", "argoproj.io"),)


def build_parser() -> argparse.ArgumentParser:
    """The step's arguments (the push template passes all of them)."""
    parser = base_parser("render the checked-out commit's pipeline and create its Workflow")
    parser.add_argument("--repo-url", required=True, help="git URL the pipeline clones")
    parser.add_argument("--revision", required=True, help="the pushed commit's sha")
    parser.add_argument("--ref", default="", help="the pushed ref")
    parser.add_argument("--annotations", default="{}",
                        help="the push Workflow's annotations as JSON (title, description)")
    parser.add_argument("--settings", default="{}", help="the platform settings as JSON")
    parser.add_argument("--platform", required=True,
                        help="what the platform binds this repo to, as JSON (model, GitOps "
                             "repo, branch, forge; `workflows.binding`): a commit naming "
                             "others is refused")
    parser.add_argument("--api-server", default="",
                        help="Kubernetes API URL (default: the pod's in-cluster config)")
    return parser


def render_child(args: argparse.Namespace) -> dict[str, Any]:
    """The commit's pipeline Workflow (schema-checked); ConfigError names what is wrong.

    The commit's `mlops.yaml` is held to the push template's binding first: its model
    name and GitOps repo (where the git token goes) are the platform's."""
    loaded = bind(load_config(args.repo), parse_binding(args.platform))
    try:
        settings = PipelineSettings.model_validate_json(args.settings)
    except ValidationError as exc:
        raise ConfigError(f"--settings: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
                          ) from None
    try:
        annotations = json.loads(args.annotations or "{}")
    except ValueError as exc:
        raise ConfigError(f"--annotations: not JSON ({exc})") from None
    if not isinstance(annotations, dict):
        raise ConfigError("--annotations: expected a JSON object")
    child = child_workflow(loaded, settings, repo=args.repo_url, revision=args.revision,
                           ref=args.ref, annotations={str(k): str(v)
                                                      for k, v in annotations.items()})
    problems = [p for p in validate_doc(child) if "not checked" not in p]
    if problems:
        raise ConfigError(f"{loaded.path}: the rendered pipeline does not validate:\n  "
                          + "\n  ".join(problems))
    return child


def create_workflow(doc: dict[str, Any], api_server: str = "") -> bool:
    """Create `doc`; False when a Workflow of that name exists (a duplicate delivery)."""
    # Here, not at the top: the local runner renders with this module and never calls this.
    from kubernetes import client, config

    if api_server:
        configuration = client.Configuration()
        configuration.host = api_server
        api_client = client.ApiClient(configuration)
    else:
        try:
            config.load_incluster_config()  # the pod's token, CA and the API server's address
        except config.ConfigException as exc:
            raise SubmitError(f"no in-cluster Kubernetes config ({exc}): this step runs in "
                              "the push Workflow's pod; elsewhere pass --api-server") from None
        api_client = client.ApiClient()
    api = client.CustomObjectsApi(api_client)
    try:
        api.create_namespaced_custom_object(
            group="argoproj.io", version="v1alpha1", namespace=doc["metadata"]["namespace"],
            plural="workflows", body=doc)
    except client.ApiException as exc:
        if exc.status == 409:
            return False
        raise SubmitError(f"creating Workflow {doc['metadata']['name']}: the API server "
                          f"answered {exc.status} {exc.reason}: {exc.body}") from None
    except Exception as exc:  # urllib3's connection errors: refused, DNS, TLS
        raise ArgoUnavailable(f"creating Workflow {doc['metadata']['name']}: cannot reach the "
                              f"Kubernetes API ({exc})") from None
    return True


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Render, then create; outputs the Workflow's name and whether this step created it."""
    child = render_child(args)
    name = child["metadata"]["name"]
    created = create_workflow(child, args.api_server)
    print(f"{'created' if created else 'already there (a duplicate delivery)'}: "
          f"Workflow {child['metadata']['namespace']}/{name}")
    return {"workflow": name, "created": "true" if created else "false"}


def main(argv: Sequence[str] | None = None) -> int:
    """`mlops step submit-pipeline ...`."""
    return run_main(run, build_parser(), argv)
