"""Serving manifest builders: schema-valid, pinned as golden YAML, bad input refused.

Pure tests, no server: the builders do no I/O (see serving/manifests.py).
"""

import pathlib

import pytest
import yaml

from mlops.cli import build_parser
from serving import manifests
from serving.manifests import ManifestError
from serving.options import ServingOptions, read_serving_options
from tests.manifest_validation import assert_golden, validate_manifest

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "serving"
SHA = "ab" * 32


def _dump(doc):
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _deployment(**kw):
    args = dict(
        image="registry.local/shapes-detector:3f2a",
        model_uri="file:///var/lib/mlops/models/shapes-detector/v2",
        weights_sha256=SHA,
    )
    args.update(kw)
    return manifests.deployment("shapes-detector", "v2", **args)


CASES = {
    "deployment.yaml": lambda: _deployment(),
    "deployment-namespaced.yaml": lambda: _deployment(
        replicas=3,
        namespace="models",
        resources={"requests": {"cpu": 2, "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
    ),
    "deployment-metrics.yaml": lambda: _deployment(metrics={"map50": 0.91, "map": 0.61}),
    "service.yaml": lambda: manifests.service("shapes-detector"),
    "destinationrule.yaml": lambda: manifests.destination_rule("shapes-detector", "v1", "v2"),
    "destinationrule-stable-only.yaml": lambda: manifests.destination_rule("shapes-detector", "v1"),
    "virtualservice.yaml": lambda: manifests.virtual_service("shapes-detector", 90, 10),
    "virtualservice-stable-only.yaml": lambda: manifests.virtual_service(
        "shapes-detector", 100, 0, canary=False
    ),
    "virtualservice-gateway.yaml": lambda: manifests.virtual_service(
        "shapes-detector",
        75,
        25,
        gateways=["istio-system/public"],
        hosts=["detect.example.com"],
        namespace="models",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_manifest_is_valid_and_matches_golden(name):
    doc = CASES[name]()
    validate_manifest(doc)
    assert_golden(GOLDEN / name, _dump(doc))


def test_deployment_contract_other_rooms_rely_on():
    doc = _deployment()
    meta = doc["metadata"]
    assert meta["name"] == "shapes-detector-v2"
    assert meta["labels"] == {"app": "shapes-detector", "version": "v2"}
    assert meta["annotations"][manifests.ANNOTATION_MODEL_URI].startswith("file:///")
    assert meta["annotations"][manifests.ANNOTATION_WEIGHTS_SHA256] == SHA
    pod = doc["spec"]["template"]
    assert pod["metadata"]["labels"] == doc["spec"]["selector"]["matchLabels"]
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    (container,) = pod["spec"]["containers"]
    assert container["command"] + container["args"] == [
        "mlops",
        "serve",
        "/models/shapes-detector/v2",
        "--port",
        "8080",
        "--host",
        "0.0.0.0",
        "--model-name",
        "shapes-detector",
        "--model-version",
        "v2",
        "--weights-sha256",  # the server refuses other weights than the annotation's
        SHA,
        "--termination-log",  # a warm-up failure no retry fixes: why, to the kubelet
        "/dev/termination-log",
    ]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    models = [m for m in container["volumeMounts"] if m["name"] == "models"]
    assert models == [{"name": "models", "mountPath": "/models", "readOnly": True}]


def test_metrics_annotation_is_compact_sorted_json_and_reads_back():
    doc = _deployment(metrics={"map50": 0.91, "map": 0.61, "images": 200})
    text = doc["metadata"]["annotations"][manifests.ANNOTATION_METRICS]
    assert text == '{"images":200,"map":0.61,"map50":0.91}'
    assert manifests.deployment_metrics(doc) == {"images": 200.0, "map": 0.61, "map50": 0.91}
    # only the Deployment says how good its model was; the pod template is unchanged
    assert manifests.ANNOTATION_METRICS not in doc["spec"]["template"]["metadata"]["annotations"]


def test_without_metrics_the_deployment_is_unchanged():
    doc = _deployment()
    assert set(doc["metadata"]["annotations"]) == {
        manifests.ANNOTATION_MODEL_URI,
        manifests.ANNOTATION_WEIGHTS_SHA256,
    }
    assert manifests.deployment_metrics(doc) is None
    assert _dump(_deployment(metrics=None)) == _dump(doc)


@pytest.mark.parametrize(
    "text, words",
    [
        ("not json", "is not JSON"),
        ("[0.9]", "must be a JSON object"),
        ('{"map50": "high"}', "'map50' = 'high' must be a finite number"),
        ('{"map50": NaN}', "'map50' = nan must be a finite number"),
    ],
)
def test_a_hand_broken_metrics_annotation_is_named(text, words):
    doc = _deployment()
    doc["metadata"]["annotations"][manifests.ANNOTATION_METRICS] = text
    with pytest.raises(ManifestError) as info:
        manifests.deployment_metrics(doc)
    assert "Deployment 'shapes-detector-v2'" in str(info.value) and words in str(info.value)


def test_builders_do_not_share_mutable_defaults():
    first = _deployment()
    first["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "99"
    assert _deployment()["spec"]["template"]["spec"]["containers"][0]["resources"] == (
        manifests.DEFAULT_RESOURCES
    )


@pytest.mark.parametrize(
    "stable, canary, words",
    [
        (90, 20, "stable=90 + canary=20 = 110"),
        (50, 40, "= 90"),
        (110, -10, "canary_weight=-10"),
        (100.0, 0, "stable_weight=100.0"),
        (True, 99, "stable_weight=True"),
        ("90", "10", "stable_weight='90'"),
    ],
)
def test_virtual_service_refuses_bad_weights(stable, canary, words):
    with pytest.raises(ManifestError) as info:
        manifests.virtual_service("shapes-detector", stable, canary)
    assert words in str(info.value)
    assert info.value.exit_code == 2


def test_virtual_service_without_canary_subset_needs_zero_canary_weight():
    with pytest.raises(ManifestError, match="no canary subset"):
        manifests.virtual_service("m", 90, 10, canary=False)


@pytest.mark.parametrize("weights", [(100, 0), (0, 100), (1, 99), (50, 50)])
def test_virtual_service_weights_edge_values_are_valid(weights):
    doc = manifests.virtual_service("m", *weights)
    validate_manifest(doc)
    assert [r["weight"] for r in doc["spec"]["http"][0]["route"]] == list(weights)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: manifests.service("Shapes"), "model name 'Shapes'"),
        (lambda: manifests.service("m", port=0), "port 0"),
        (lambda: manifests.destination_rule("m", "v1", "v1"), "canary version 'v1' is the stable"),
        (lambda: manifests.destination_rule("m", "V1"), "model version 'V1'"),
        (lambda: _deployment(weights_sha256="abc"), "weights_sha256 'abc'"),
        (lambda: _deployment(image=""), "image ''"),
        (lambda: _deployment(replicas=-1), "replicas -1"),
        (lambda: _deployment(resources={"cpu": "1"}), "resources {'cpu': '1'}"),
        (lambda: _deployment(metrics={"map50": float("inf")}), "metric 'map50' = inf"),
        (lambda: _deployment(metrics={"map50": True}), "metric 'map50' = True"),
        (lambda: _deployment(metrics=[0.9]), "metrics [0.9] must be a mapping"),
    ],
)
def test_bad_input_is_named(call, words):
    with pytest.raises(ManifestError) as info:
        call()
    assert words in str(info.value)


def test_validator_catches_a_broken_manifest():
    """The helper must fail on real mistakes, or the tests above prove nothing."""
    doc = _deployment()
    doc["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(AssertionError, match="readinessprobe"):
        validate_manifest(doc)
    vs = manifests.virtual_service("m", 90, 10)
    vs["spec"]["http"][0]["route"][0]["weight"] = "90"
    with pytest.raises(AssertionError, match="weight"):
        validate_manifest(vs)
    dr = manifests.destination_rule("m", "v1")
    dr["spec"]["subset"] = dr["spec"].pop("subsets")
    with pytest.raises(AssertionError, match="subset"):
        validate_manifest(dr)


# ---- serving options (infer_cfg.yml `serving:`) -> flags and resources -----------------------


def test_serving_options_become_flags_and_size_the_resources():
    options = ServingOptions(workers=3, batch_max_size=8, batch_timeout_ms=2.5)
    doc = _deployment(serving=options)
    validate_manifest(doc)
    container = doc["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert (args.workers, args.batch_max_size, args.batch_timeout_ms) == (3, 8, 2.5)
    assert container["resources"] == {"requests": {"cpu": "3", "memory": "3Gi"},
                                      "limits": {"cpu": "4", "memory": "4Gi"}}
    # explicit resources win; no section: the document is exactly what it was
    explicit = {"requests": {"cpu": "500m"}}
    kept = _deployment(serving=options, resources=explicit)
    assert kept["spec"]["template"]["spec"]["containers"][0]["resources"] == explicit
    assert _deployment(serving=ServingOptions()) == _deployment()


def test_serving_section_is_read_from_infer_cfg(tmp_path):
    assert read_serving_options(tmp_path) is None
    (tmp_path / "infer_cfg.yml").write_text(yaml.safe_dump({"model": "m"}))
    assert read_serving_options(tmp_path) is None
    (tmp_path / "infer_cfg.yml").write_text(yaml.safe_dump({"serving": {"workers": 2}}))
    assert read_serving_options(tmp_path) == ServingOptions(workers=2)
    (tmp_path / "infer_cfg.yml").write_text(yaml.safe_dump({"serving": {"wokers": 2}}))
    with pytest.raises(ValueError, match="wokers"):
        read_serving_options(tmp_path)
