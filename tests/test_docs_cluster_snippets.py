"""The cluster guide's snippets (docs/cluster.md) say what the code and the upstream
programs need: each is parsed from the guide and checked against what `mlops` renders,
the way tests/test_docs_commands.py runs the guide's commands (issue 42: B3, B4, B5 and
the harmless list). What no program here can run (a GitHub ruleset, Istio, the
Prometheus Operator) is checked against the rule the guide states, with its source.
"""

from __future__ import annotations

import json
import pathlib
import re

import yaml

from promotion.cluster.deploy import controller_manifests
from serving import manifests
from tests.manifest_validation import validate_manifest

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "cluster.md").read_text()


def _section(title: str) -> str:
    start = GUIDE.index(f"\n## {title}")
    end = GUIDE.find("\n## ", start + 1)
    return GUIDE[start:end if end > 0 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def _yaml_docs(text: str) -> list[dict]:
    return [d for block in _blocks(text, "yaml") for d in yaml.safe_load_all(block)
            if isinstance(d, dict)]


def test_the_ruleset_lets_reviewers_merge_and_only_the_bot_push():
    """B4: "Restrict updates" (rule type `update`) lets only bypass actors update `main`, so
    no reviewer could merge a candidate's pull request. The guide's ruleset requires a pull
    request, blocks force pushes and deletion, and lets the bot's team bypass, always
    (GitHub REST "Create a repository ruleset": rule types `pull_request`,
    `non_fast_forward`, `deletion`, `update`; bypass actor types Integration,
    OrganizationAdmin, RepositoryRole, Team, DeployKey; the `pull_request` rule's five
    parameters are required)."""
    (block,) = _blocks(_section("3. The GitOps repo on a forge"), "json")
    ruleset = json.loads(block)
    rules = {rule["type"]: rule for rule in ruleset["rules"]}
    assert set(rules) == {"pull_request", "non_fast_forward", "deletion"}
    params = rules["pull_request"]["parameters"]
    assert set(params) == {"required_approving_review_count", "dismiss_stale_reviews_on_push",
                           "require_code_owner_review", "require_last_push_approval",
                           "required_review_thread_resolution"}
    assert params["required_approving_review_count"] >= 1
    assert ruleset["conditions"]["ref_name"]["include"] == ["refs/heads/main"]
    (actor,) = ruleset["bypass_actors"]
    assert actor["bypass_mode"] == "always"
    assert actor["actor_type"] in {"Integration", "Team", "RepositoryRole",
                                   "OrganizationAdmin", "DeployKey"}


def test_the_gateway_advice_keeps_the_mesh_first():
    """B3: a VirtualService that lists a Gateway without `mesh` binds to the Gateway alone
    (istio pilot/pkg/model/push_context.go `getGatewayNames`); the guide's edit keeps it, and
    is what `serving.manifests.virtual_service` renders with the same Gateway."""
    docs = _yaml_docs(_section("4. The serving namespace"))
    gateway = next(d for d in docs if d.get("kind") == "Gateway")
    edit = next(d for d in docs if "gateways" in d and "kind" not in d)
    named = f"{gateway['metadata']['namespace']}/{gateway['metadata']['name']}"
    assert edit["gateways"] == ["mesh", named]
    rendered = manifests.virtual_service("shapes-detector", 90, 10, gateways=[named],
                                         namespace="models", hosts=edit["hosts"])
    validate_manifest(rendered)
    assert rendered["spec"]["gateways"] == edit["gateways"]
    assert set(edit["hosts"]) >= set(gateway["spec"]["servers"][0]["hosts"])


def test_both_namespaces_claim_the_one_models_export():
    """The harmless list: section 4 asked for a dynamically provisioned `mlops-models` in
    `models` and then for static volumes; a dynamic claim gets a volume of its own, and the
    models the pipeline publishes never reach the servers. Now: two PersistentVolumes on
    one export, each bound by name to the claim of its namespace, the servers' read-only."""
    docs = _yaml_docs(_section("4. The serving namespace"))
    pvs = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "PersistentVolume"}
    claims = {d["metadata"]["namespace"]: d for d in docs
              if d.get("kind") == "PersistentVolumeClaim"}
    assert set(claims) == {"mlops", "models"}
    exports = {(pv["spec"]["nfs"]["server"], pv["spec"]["nfs"]["path"]) for pv in pvs.values()}
    assert len(exports) == 1 and len(pvs) == 2
    for namespace, claim in claims.items():
        validate_manifest(claim)
        pv = pvs[claim["spec"]["volumeName"]]
        assert claim["spec"]["storageClassName"] == ""  # no dynamic provisioning
        assert pv["spec"]["claimRef"] == {"namespace": namespace,
                                          "name": claim["metadata"]["name"]}
        assert claim["metadata"]["name"] == "mlops-models"  # the setting's default, serving's
    assert pvs[claims["models"]["spec"]["volumeName"]]["spec"]["nfs"]["readOnly"] is True
    assert claims["mlops"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_guide_pins_the_data_before_the_repo_is_pushed():
    """B5: the model repo the guide says to push names `data/shapes.lock`, which the example
    does not ship; prepare-data failed on every run. Section 5 now pins the data first,
    from where the pods read it, commits the lock, and only then pushes."""
    section = _section("5. The model repo")
    pin = section.index("mlops data snapshot /datasets/")
    commit = section.index("git add data/shapes.lock")
    push = section.index("push the repo to the\n   forge")
    assert pin < commit < push
    example = yaml.safe_load((ROOT / "examples" / "shapes-detector" / "mlops.yaml").read_text())
    assert f"--out {example['data']['train']}" in section


def test_the_data_cache_claim_is_read_write_many():
    """The harmless list: `data_cache_claim` named a claim nothing created, which several
    runs' pods on different nodes write at once. The guide creates it, ReadWriteMany."""
    (claim,) = [d for d in _yaml_docs(_section("5. The model repo"))
                if d.get("kind") == "PersistentVolumeClaim"]
    validate_manifest(claim)
    settings = next(b for b in _blocks(_section("5. The model repo"), "yaml")
                    if "data_cache_claim:" in b)
    assert claim["metadata"]["name"] == yaml.safe_load(settings)["data_cache_claim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_pod_monitors_select_the_pods_and_ports_mlops_renders():
    """The harmless list: with the Prometheus Operator nothing scraped the annotations. The
    guide's PodMonitors must select the model servers' and the controller's pods by the
    labels they carry and name their ports as their containers do."""
    monitors = {d["metadata"]["name"]: d for d in _yaml_docs(_section(
        "1. Install the upstream services, in this order")) if d.get("kind") == "PodMonitor"}
    serving = manifests.deployment("shapes-detector", "v1", image="i",
                                   model_uri="file:///models/shapes-detector/v1",
                                   weights_sha256="a" * 64)["spec"]["template"]
    controller = next(d for d in controller_manifests(gitops_url="g", prometheus_url="p")
                      if d["kind"] == "Deployment")["spec"]["template"]
    for pod, monitor in ((serving, monitors["mlops-model-servers"]),
                         (controller, monitors["mlops-controller"])):
        selector = monitor["spec"]["selector"]
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
        assert all(e["key"] in labels for e in selector.get("matchExpressions") or [])
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports") or []}
        assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports


def test_the_limit_range_and_the_namespace_labels_are_valid():
    """B6 and B8: the LimitRange that admits containers others inject into a quota'd
    namespace, and the Pod Security labels, are objects the API server accepts."""
    docs = _yaml_docs(GUIDE)
    (limit_range,) = [d for d in docs if d.get("kind") == "LimitRange"]
    validate_manifest(limit_range)
    (default,) = limit_range["spec"]["limits"]
    assert {"cpu", "memory"} <= set(default["default"]) and \
        {"cpu", "memory"} <= set(default["defaultRequest"])
    namespace = next(d for d in docs if d.get("kind") == "Namespace"
                     and d["metadata"]["name"] == "models")
    validate_manifest(namespace)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert "kubectl label namespace mlops pod-security.kubernetes.io/enforce=privileged" in GUIDE
