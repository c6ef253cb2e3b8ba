"""Identities: which API token every rendered pod holds, and whether its calls are allowed.

The rules are Kubernetes' and Argo's, read in their sources (cited in
`workflows/identity.py`): the ServiceAccount admission plugin
(kubernetes/kubernetes plugin/pkg/admission/serviceaccount/admission.go:
the pod's automountServiceAccountToken wins over the account's, default
true), Argo's pod builder (argoproj/argo-workflows v3.7.9
workflow/controller/workflowpod.go setupServiceAccount and newExecContainer,
operator.go executeResource: argoexec, a resource template's main container,
holds the executor's token) and RBAC (plugin/pkg/auth/authorizer/rbac/rbac.go
RuleAllows, pkg/apis/rbac/v1/evaluation_helpers.go, pkg/registry/rbac/
validation/rule.go). No API server runs here, so the evaluator is checked on
a table of cases written from those sources, including the ones it must deny.
"""

import pathlib
import re
import shutil

import pytest
import yaml

from contracts.kubeapi import ApiCall, request_call
from mlops import cli
from serving import manifests as serving_manifests
from tests.test_docs_commands import mlops_commands
from workflows.config import load_config
from workflows.identity import (
    OWNER_REFERENCE_CALL,
    allowed,
    identity_problems,
    kubectl_calls,
    pod_identities,
)
from workflows.render import render_documents
from workflows.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"

ROLE = {"kind": "Role", "metadata": {"name": "r", "namespace": "ns"}, "rules": [
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
    {"apiGroups": ["argoproj.io"], "resources": ["applications"], "resourceNames": ["shapes"],
     "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["batch"], "resources": ["*/status"], "verbs": ["*"]},
]}
CLUSTER_ROLE = {"kind": "ClusterRole", "metadata": {"name": "c"}, "rules": [
    {"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["list"]},
    {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]},
]}


def _binding(kind, role_kind, role, subject, namespace=None):
    meta = {"name": "b", **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "subjects": [subject],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                        "name": role}}


SA = {"kind": "ServiceAccount", "name": "app", "namespace": "ns"}
BINDINGS = [
    _binding("RoleBinding", "Role", "r", SA, "ns"),
    _binding("ClusterRoleBinding", "ClusterRole", "c", SA),
    # A ClusterRole bound by a RoleBinding grants only in that binding's namespace.
    _binding("RoleBinding", "ClusterRole", "c", {"kind": "Group",
                                                 "name": "system:serviceaccounts:ns"}, "other"),
]
CASES = [
    ("exact rule", ApiCall("get", "deployments", "apps", name="x", namespace="ns"), True),
    ("wrong namespace", ApiCall("get", "deployments", "apps", name="x", namespace="prod"),
     False),
    ("wrong verb", ApiCall("delete", "deployments", "apps", name="x", namespace="ns"), False),
    ("wrong apiGroup", ApiCall("get", "deployments", "extensions", name="x", namespace="ns"),
     False),
    ("core group is not apps", ApiCall("get", "deployments", "", name="x", namespace="ns"),
     False),
    ("named object", ApiCall("patch", "applications", "argoproj.io", name="shapes",
                             namespace="ns"), True),
    ("wrong resourceName", ApiCall("patch", "applications", "argoproj.io", name="other",
                                   namespace="ns"), False),
    ("resourceNames never cover a create",
     ApiCall("get", "applications", "argoproj.io", namespace="ns"), False),
    ("subresource granted", ApiCall("get", "pods", "", "log", name="p", namespace="ns"), True),
    ("subresource not granted by its resource",
     ApiCall("get", "pods", "", "exec", name="p", namespace="ns"), False),
    ("resource not granted by its subresource", ApiCall("get", "pods", "", name="p",
                                                        namespace="ns"), False),
    ("*/subresource", ApiCall("update", "jobs", "batch", "status", name="j", namespace="ns"),
     True),
    ("*/subresource is not the resource", ApiCall("update", "jobs", "batch", name="j",
                                                  namespace="ns"), False),
    ("ClusterRoleBinding: cluster-scoped", ApiCall("list", "nodes", "", namespace=""), True),
    ("ClusterRoleBinding: every namespace", ApiCall("list", "nodes", "x", namespace="any"),
     True),
    ("RoleBinding of a ClusterRole: its namespace",
     ApiCall("list", "nodes", "", namespace="other"), True),
    ("non-resource URL", ApiCall("get", path="/metrics", namespace=""), True),
    ("non-resource prefix", ApiCall("get", path="/debug/pprof", namespace=""), True),
    ("non-resource URL not listed", ApiCall("get", path="/logs", namespace=""), False),
    ("non-resource verb", ApiCall("post", path="/metrics", namespace=""), False),
]


@pytest.mark.parametrize("call, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rbac_evaluator(call, expected):
    assert allowed([ROLE, CLUSTER_ROLE], BINDINGS, ("ns", "app"), call) is expected


@pytest.mark.parametrize("subject, expected", [
    ({"kind": "ServiceAccount", "name": "app", "namespace": "ns"}, True),
    ({"kind": "ServiceAccount", "name": "app"}, True),  # the RoleBinding's namespace
    ({"kind": "ServiceAccount", "name": "app", "namespace": "other"}, False),
    ({"kind": "ServiceAccount", "name": "other", "namespace": "ns"}, False),
    ({"kind": "User", "name": "system:serviceaccount:ns:app"}, True),
    ({"kind": "Group", "name": "system:serviceaccounts"}, True),
    ({"kind": "Group", "name": "system:serviceaccounts:other"}, False),
])
def test_rbac_subjects(subject, expected):
    binding = _binding("RoleBinding", "Role", "r", subject, "ns")
    call = ApiCall("get", "deployments", "apps", name="x", namespace="ns")
    assert allowed([ROLE], [binding], ("ns", "app"), call) is expected


def test_a_binding_to_a_missing_role_grants_nothing():
    binding = _binding("RoleBinding", "Role", "missing", SA, "ns")
    assert not allowed([ROLE], [binding], ("ns", "app"),
                       ApiCall("get", "deployments", "apps", name="x", namespace="ns"))


@pytest.mark.parametrize("method, url, call", [
    ("GET", "/apis/apps/v1/namespaces/models/deployments/shapes-v2",
     ApiCall("get", "deployments", "apps", name="shapes-v2", namespace="models")),
    ("PATCH", "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/shapes",
     ApiCall("patch", "applications", "argoproj.io", name="shapes", namespace="argocd")),
    ("POST", "/apis/argoproj.io/v1alpha1/namespaces/mlops/workflows",
     ApiCall("create", "workflows", "argoproj.io", namespace="mlops")),
    ("GET", "/api/v1/namespaces/mlops/pods?labelSelector=a",
     ApiCall("list", "pods", namespace="mlops")),
    ("GET", "/api/v1/namespaces/mlops/pods?watch=true", ApiCall("watch", "pods",
                                                                 namespace="mlops")),
    ("GET", "/api/v1/namespaces/mlops/pods/p/log",
     ApiCall("get", "pods", "", "log", name="p", namespace="mlops")),
    ("GET", "/api/v1/nodes", ApiCall("list", "nodes", namespace="")),
    ("GET", "/api/v1/namespaces/mlops", ApiCall("get", "namespaces", name="mlops",
                                                namespace="")),
    ("GET", "/apis", ApiCall("get", path="/apis", namespace="")),
])
def test_request_attributes_as_the_api_server_reads_them(method, url, call):
    """staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go NewRequestInfo."""
    assert request_call(method, url) == call


# --- which token each pod holds ---------------------------------------------------------

def _sa(name, automount=None):
    doc = {"kind": "ServiceAccount", "metadata": {"name": name, "namespace": "ns"}}
    if automount is not None:
        doc["automountServiceAccountToken"] = automount
    return doc


def _deployment(sa=None, automount=None, mounts=()):
    pod = {"containers": [{"name": "c", "volumeMounts": list(mounts)}]}
    if sa:
        pod["serviceAccountName"] = sa
    if automount is not None:
        pod["automountServiceAccountToken"] = automount
    return {"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": pod}}}


@pytest.mark.parametrize("account, pod, token", [
    (None, None, True),     # neither says: Kubernetes mounts it
    (False, None, False),   # the account says no
    (False, True, True),    # the pod's field wins
    (True, False, False),
    (None, False, False),
])
def test_automount_pod_field_wins_over_the_account(account, pod, token):
    docs = [_sa("app", account), _deployment("app", pod)]
    (identity,) = pod_identities(docs)
    assert (identity.service_account, identity.token_mounted) == ("app", token)


def test_a_pod_without_an_account_runs_as_default():
    (identity,) = pod_identities([_deployment()])
    assert identity.service_account == "default" and identity.token_mounted


def _workflow(template, **spec):
    return {"kind": "WorkflowTemplate", "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"templates": [template], **spec}}


RESOURCE = {"name": "job", "resource": {
    "action": "create", "successCondition": "status.phase == Done",
    "manifest": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"}}
CONTAINER = {"name": "step", "container": {"image": "i"}}


def _by_part(identities):
    return {i.component.rsplit("(", 1)[1].rstrip(")"): i for i in identities}


def test_argo_only_passes_a_false_automount_to_the_pod():
    """setupServiceAccount copies automountServiceAccountToken to the pod only when it is
    false: a template's `true` leaves the account's own setting in force."""
    docs = [_sa("steps", automount=False),
            _workflow({**CONTAINER, "automountServiceAccountToken": True},
                      serviceAccountName="steps")]
    assert not _by_part(pod_identities(docs))["main"].token_mounted


def test_argoexec_holds_the_executor_token_and_the_main_container_the_pods():
    docs = [_workflow(CONTAINER, serviceAccountName="steps", automountServiceAccountToken=False,
                      executor={"serviceAccountName": "exec"})]
    parts = _by_part(pod_identities(docs))
    assert (parts["main"].service_account, parts["main"].token_mounted) == ("steps", False)
    assert (parts["argoexec"].service_account, parts["argoexec"].token_mounted) == ("exec", True)
    assert parts["argoexec"].token_secret == "exec.service-account-token"


def test_a_resource_templates_kubectl_runs_with_the_template_executor():
    """The template's `executor` wins over the workflow's (newExecContainer); the calls are
    kubectl's for the action, the GET of the success condition, and the task results."""
    docs = [_workflow({**RESOURCE, "executor": {"serviceAccountName": "jobs"}},
                      executor={"serviceAccountName": "exec"})]
    parts = _by_part(pod_identities(docs))
    assert set(parts) == {"argoexec"}  # argoexec is the main container; no user code
    argoexec = parts["argoexec"]
    assert argoexec.service_account == "jobs" and argoexec.token_mounted
    assert {str(c) for c in argoexec.calls if c.group == "batch"} == {
        "create jobs.batch in namespace 'ns'", "get jobs.batch 'j' in namespace 'ns'"}
    assert ApiCall("create", "workflowtaskresults", "argoproj.io", namespace="ns") \
        in argoexec.calls


def test_without_an_executor_account_argoexec_holds_the_pods_token():
    docs = [_sa("steps"), _workflow(CONTAINER, serviceAccountName="steps")]
    parts = _by_part(pod_identities(docs))
    assert parts["argoexec"].service_account == "steps" and parts["argoexec"].token_mounted


# --- the check -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pipeline_docs():
    docs = render_documents(load_config(EXAMPLE), load_settings())
    return [d for file_docs in docs.values() for d in file_docs]


def test_the_paddlejob_templates_kubectl_may_apply_its_paddlejob(pipeline_docs):
    """Issue 25, defect 1: argoexec applies the PaddleJob with the executor's token
    (workflowpod.go mounts it at /var/run/secrets/kubernetes.io/serviceaccount in every
    argoexec container, and a resource template's main container is argoexec), so the
    PaddleJob rights must be that token's. They were the pod's account's, and
    `argoexec resource` got "paddlejobs ... forbidden" on every run."""
    roles = [d for d in pipeline_docs if d["kind"] == "Role"]
    bindings = [d for d in pipeline_docs if d["kind"] == "RoleBinding"]
    for template in ("smoke-train", "train"):
        (argoexec,) = [p for p in pod_identities(pipeline_docs)
                       if p.component.endswith(f": {template} (argoexec)")]
        paddlejob_calls = [c for c in argoexec.calls if c.resource == "paddlejobs"]
        assert {c.verb for c in paddlejob_calls} == {"get", "create", "patch"}
        assert argoexec.token_mounted
        for call in paddlejob_calls:
            assert allowed(roles, bindings, ("mlops", argoexec.service_account), call), \
                f"{template}: {argoexec.service_account} may not {call}"
    assert identity_problems(pipeline_docs) == []


def test_only_the_paddlejob_templates_executor_may_touch_paddlejobs(pipeline_docs):
    roles = [d for d in pipeline_docs if d["kind"] == "Role"]
    bindings = [d for d in pipeline_docs if d["kind"] == "RoleBinding"]
    apply = ApiCall("create", "paddlejobs", "batch.paddlepaddle.org", namespace="mlops")
    holders = {p.service_account for p in pod_identities(pipeline_docs)
               if p.token_mounted and allowed(roles, bindings,
                                              ("mlops", p.service_account), apply)}
    assert holders == {"mlops-paddlejob"}
    # No pod runs *as* that account: only argoexec of the two templates gets its token.
    assert all(p.service_account != "mlops-paddlejob" or p.component.endswith("(argoexec)")
               for p in pod_identities(pipeline_docs))


def test_a_missing_grant_or_token_secret_is_named(pipeline_docs):
    broken = [d for d in pipeline_docs
              if not (d["kind"] == "Secret" and d["metadata"]["name"].startswith(
                  "mlops-paddlejob"))]
    problems = identity_problems(broken)
    assert any("mlops/mlops-paddlejob.service-account-token" in p for p in problems)
    narrowed = [{**d, "rules": [r for r in d["rules"] if "workflows" not in r["resources"]]}
                if d["kind"] == "Role" and d["metadata"]["name"] == "mlops-sensor" else d
                for d in pipeline_docs]
    assert "Sensor mlops/shapes-detector-train: mlops/mlops-sensor may not create " \
           "workflows.argoproj.io in namespace 'mlops'" in identity_problems(narrowed)


def test_the_paddlejob_executor_may_name_the_workflow_its_owner(pipeline_docs):
    """Issue 42, B7: the training templates set `setOwnerReference`, so Argo writes the
    Workflow as the PaddleJob's controller owner with `blockOwnerDeletion: true`
    (operator.go, metav1.NewControllerRef, v3.7.9); with the OwnerReferencesPermissionEnforcement
    admission plugin (OpenShift's default) that create is refused unless the caller may
    `update` the owner's finalizers ("cannot set blockOwnerDeletion if an ownerReference
    refers to a resource you can't set finalizers on": kubernetes/kubernetes
    plugin/pkg/admission/gc/gc_admission.go). The model asks for the call, the Role grants it."""
    train = next(t for d in pipeline_docs if d["kind"] == "WorkflowTemplate"
                 for t in d["spec"]["templates"] if t["name"] == "train")
    assert train["resource"]["setOwnerReference"] is True
    assert OWNER_REFERENCE_CALL in kubectl_calls(train)
    assert identity_problems(pipeline_docs) == []
    without = [{**d, "rules": [r for r in d["rules"] if r["resources"] != ["workflows/finalizers"]]}
               if d["kind"] == "Role" and d["metadata"]["name"] == "mlops-paddlejob" else d
               for d in pipeline_docs]
    assert any("may not update workflows.argoproj.io/finalizers" in p
               for p in identity_problems(without)), identity_problems(without)


def _the_guides_manifests(tmp_path, monkeypatch, capsys):
    """Run docs/cluster.md's render and manifests commands as written (the way
    tests/test_docs_commands.py does), then add the serving Deployment its section 4
    puts in the `models` namespace. Returns every rendered document."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    settings = re.search(r"```yaml\n(# settings\.yaml\n.*?)```", text, re.S)
    assert settings
    (tmp_path / "settings.yaml").write_text(settings.group(1))
    (tmp_path / "manifests").mkdir()
    (tmp_path / "shapes-detector").symlink_to(EXAMPLE)
    monkeypatch.chdir(tmp_path)
    ran = []
    for argv in mlops_commands(ROOT / "docs" / "cluster.md"):
        if argv[:2] == ["workflows", "render"]:
            assert cli.main(argv) == 0, argv
        elif argv[1:2] == ["manifests"] and argv[0] in ("controller", "ui"):
            capsys.readouterr()
            assert cli.main(argv) == 0, argv
            (tmp_path / "manifests" / f"{argv[0]}-{len(ran)}.yaml").write_text(
                capsys.readouterr().out)
        else:
            continue
        ran.append(argv[0])
    # The guide renders the UI twice (read-only with the Argo Server, then with actions
    # behind the proxy): both are checked, each from its own file.
    assert sorted(set(ran)) == ["controller", "ui", "workflows"]
    docs = [d for path in sorted((tmp_path / "manifests").rglob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text()) if d]
    docs.append(serving_manifests.deployment(
        "shapes-detector", "v1", image="registry.example.com/mlops/serve:0.1.0",
        model_uri="file:///models/shapes-detector/v1", weights_sha256="a" * 64,
        namespace="models", image_pull_secrets=["mlops-pull"]))
    return docs


def test_the_cluster_guides_manifests_hold_exactly_the_tokens_they_use(tmp_path, monkeypatch,
                                                                       capsys):
    """Item 3's acceptance: every pod the guide renders (workflow steps, argoexec, PaddleJob
    workers, Sensor and EventSource, the controller, the UI, a model server) holds a token
    only when its code calls the API, and every call is allowed by the rendered Roles."""
    docs = _the_guides_manifests(tmp_path, monkeypatch, capsys)
    pods = pod_identities(docs)
    names = " ".join(p.component for p in pods)
    for expected in ("checkout (main)", "train (argoexec)", "PaddleJob worker", "Sensor",
                     "EventSource", "Deployment mlops/mlops-controller",
                     "Deployment mlops/mlops-ui", "Deployment models/shapes-detector-v1"):
        assert expected in names
    assert identity_problems(docs) == []
    holders = {p.component.split(" (")[0].split(": ")[-1]: p.service_account
               for p in pods if p.token_mounted}
    assert holders == {
        # argoexec of every step reports results; of the two training steps applies the job
        **{step: "mlops-executor" for step in ("checkout", "build-image", "push-image",
                                                "find-production",
                                                "prepare-data",
                                               "evaluate", "gate", "publish-model", "propose",
                                               "record-outcome")},
        "smoke-train": "mlops-paddlejob", "train": "mlops-paddlejob",
        "Sensor mlops/shapes-detector-train": "mlops-sensor",
        # the push Workflow's submitter: creates the commit's pipeline Workflow
        "submit-pipeline": "mlops-submitter",
        "Deployment mlops/mlops-controller": "mlops-controller",
        # the UI with actions: its rollback button's readiness check (not its auth proxy)
        "Deployment mlops/mlops-ui": "mlops-ui",
    }
    ui = next(p for p in pods
              if p.component == "Deployment mlops/mlops-ui (ui)" and p.token_mounted)
    assert {str(c) for c in ui.calls} == {
        "get deployments.apps 'shapes-detector-<version>' in namespace 'models'",
        "list pods in namespace 'models'",
    }
    controller = next(p for p in pods if "mlops-controller" in p.component)
    assert {str(c) for c in controller.calls} == {
        "patch applications.argoproj.io 'shapes-detector' in namespace 'argocd'",
        "get deployments.apps 'shapes-detector-<version>' in namespace 'models'",
        "list pods in namespace 'models'",  # did a version's server give up (exit 9)
        "get destinationrules.networking.istio.io 'shapes-detector' in namespace 'models'",
        "get virtualservices.networking.istio.io 'shapes-detector' in namespace 'models'",
    }


def test_lint_reports_an_identity_without_a_right(tmp_path, monkeypatch, capsys):
    """`mlops workflows lint DIR` holds the pods of DIR against its Roles: the pipeline as
    rendered before issue 25 (PaddleJob rights on the pod's account, not the executor's)
    fails with the forbidden call named."""
    out = tmp_path / "pipeline"
    assert cli.main(["workflows", "render", str(EXAMPLE), "--out", str(out)]) == 0
    assert cli.main(["workflows", "lint", str(out)]) == 0
    text = (out / "workflowtemplate.yaml").read_text()
    old = re.sub(r"executor:\n\s+serviceAccountName: mlops-paddlejob\n",
                 "serviceAccountName: mlops-paddlejob\n", text)
    assert old != text
    (out / "workflowtemplate.yaml").write_text(old)
    capsys.readouterr()
    assert cli.main(["workflows", "lint", str(out)]) != 0
    err = capsys.readouterr().err
    assert "identity: WorkflowTemplate mlops/shapes-detector: train (argoexec): " \
           "mlops/mlops-executor may not create paddlejobs.batch.paddlepaddle.org" in err
    shutil.rmtree(out)
