"""Which API token each rendered pod holds, and whether its calls are allowed (pure).

Every pod the project renders is derived from the manifests with the rules of the
programs that make them (Kubernetes' ServiceAccount admission, Argo Workflows v3.7.9,
paddle-operator, Argo Events v1.9); :func:`allowed` decides each call with Kubernetes'
RBAC semantics, and :func:`identity_problems` requires every call a component declares
(`API_CALLS`) to be allowed for its pod's token, and no token where no call is made.
The upstream sources each rule follows: docs/inside-workflows.md.
"""

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import yaml

from contracts.kubeapi import ApiCall
from promotion.cluster import argocd, readiness
from promotion.cluster.deploy import NAME as CONTROLLER
from workflows.argo_events import SENSOR_API_CALLS
from workflows.push import PUSH_LABEL, SUBMIT_STEP
from workflows.steps import submit_pipeline

__all__ = [
    "BOOTSTRAP",
    "DEPLOYMENT_CALLS",
    "EXECUTOR_API_CALLS",
    "PodIdentity",
    "STEP_API_CALLS",
    "allowed",
    "identity_problems",
    "kubectl_calls",
    "pod_identities",
]

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
_POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}

#: What argoexec (init, wait, or a resource/data template's main) asks with the executor's
#: token: it reports outputs as a WorkflowTaskResult named after the node, created then
#: patched (workflow/executor/taskresult.go, v3.7.9; docs/workflow-rbac.md "The minimum
#: for the executor to function").
EXECUTOR_API_CALLS = (
    ApiCall("create", "workflowtaskresults", "argoproj.io"),
    ApiCall("patch", "workflowtaskresults", "argoproj.io", name="{node}"),
)
#: The `mlops step`s whose code calls the API (each lists its calls next to its client code).
STEP_API_CALLS: dict[str, tuple[ApiCall, ...]] = {SUBMIT_STEP: submit_pipeline.API_CALLS}
#: kubectl's discovery (it maps a manifest's kind to its resource before any request).
KUBECTL_DISCOVERY = (ApiCall("get", path="/api", namespace=""),
                     ApiCall("get", path="/apis", namespace=""))
#: `argoexec resource ACTION` runs `kubectl ACTION -f manifest` (workflow/executor/resource.go
#: getKubectlArguments); client-side `apply` reads the object, then creates or patches it.
_KUBECTL_VERBS = {
    "apply": ("get", "create", "patch"),
    "create": ("create",),
    "get": ("get",),
    "patch": ("patch",),
    "replace": ("update",),
    "delete": ("delete",),
}

#: `setOwnerReference: true` makes Argo write the Workflow as the object's controller
#: owner with `blockOwnerDeletion: true` (operator.go executeResource, metav1.NewControllerRef,
#: v3.7.9); under the OwnerReferencesPermissionEnforcement admission plugin (OpenShift's
#: default) whoever sets that must be allowed to `update` the owner's `finalizers`
#: subresource (kubernetes/kubernetes plugin/pkg/admission/gc/gc_admission.go), or the
#: create is refused.
OWNER_REFERENCE_CALL = ApiCall("update", "workflows", "argoproj.io", subresource="finalizers",
                               name="{workflow}")

#: The ClusterRoles and bindings every cluster has for every authenticated account
#: (bootstrappolicy/policy.go ClusterRoles, ClusterRoleBindings).
BOOTSTRAP: tuple[dict[str, Any], ...] = (
    {"kind": "ClusterRole", "metadata": {"name": "system:discovery"}, "rules": [
        {"verbs": ["get"], "nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
            "/openapi/*", "/readyz", "/version", "/version/"]}]},
    {"kind": "ClusterRole", "metadata": {"name": "system:basic-user"}, "rules": [
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}]},
    *({"kind": "ClusterRoleBinding", "metadata": {"name": name},
       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
       "subjects": [{"kind": "Group", "name": "system:authenticated"}]}
      for name in ("system:discovery", "system:basic-user")),
)


@dataclasses.dataclass(frozen=True)
class PodIdentity:
    """One component's pod (or container): the token it holds and the calls it makes."""

    component: str  # what a human reads: "WorkflowTemplate mlops/shapes: train (argoexec)"
    namespace: str
    service_account: str
    token_mounted: bool
    calls: tuple[ApiCall, ...] = ()  # bound: names and namespaces filled in
    token_secret: str = ""  # the Secret Argo mounts for an executor account ("" otherwise)
    checked: bool = True  # False: its calls depend on what is not in the documents (models)


# --- RBAC -----------------------------------------------------------------------------

def _rule_allows(rule: Mapping[str, Any], call: ApiCall) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and call.verb not in verbs:
        return False
    if call.path:  # a non-resource URL
        for url in rule.get("nonResourceURLs") or []:
            if url in ("*", call.path) or (url.endswith("*") and call.path.startswith(url[:-1])):
                return True
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and call.group not in groups:
        return False
    combined = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
    resources = rule.get("resources") or []
    if not any(r in ("*", combined) or (call.subresource and r == f"*/{call.subresource}")
               for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or call.name in names


def _applies(subject: Mapping[str, Any], sa: tuple[str, str], binding_namespace: str) -> bool:
    namespace, name = sa
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        subject_namespace = subject.get("namespace") or binding_namespace
        return bool(subject_namespace) and (subject_namespace, subject.get("name")) == sa
    if kind == "User":
        return bool(subject.get("name") == f"system:serviceaccount:{namespace}:{name}")
    if kind == "Group":
        return subject.get("name") in ("system:authenticated", "system:serviceaccounts",
                                       f"system:serviceaccounts:{namespace}")
    return False


def allowed(roles: Iterable[Mapping[str, Any]], bindings: Iterable[Mapping[str, Any]],
            sa: tuple[str, str], call: ApiCall) -> bool:
    """Whether the account `sa` = (namespace, name) may make `call` (Kubernetes' RBAC)."""
    by_key = {(r.get("kind"), (r.get("metadata") or {}).get("namespace", ""),
               (r.get("metadata") or {}).get("name")): r for r in roles}
    for binding in bindings:
        meta = binding.get("metadata") or {}
        ref = binding.get("roleRef") or {}
        if binding.get("kind") == "ClusterRoleBinding":
            where = ""
            if ref.get("kind") != "ClusterRole":
                continue
        elif binding.get("kind") == "RoleBinding":
            where = meta.get("namespace", "")
            if not call.namespace or where != call.namespace:
                continue  # a RoleBinding grants only in its own namespace
        else:
            continue
        if not any(_applies(s, sa, where) for s in binding.get("subjects") or []):
            continue
        role_namespace = where if ref.get("kind") == "Role" else ""
        role = by_key.get((ref.get("kind"), role_namespace, ref.get("name")))
        if role and any(_rule_allows(rule, call) for rule in role.get("rules") or []):
            return True
    return False


# --- which token each pod holds -------------------------------------------------------

def _plural(kind: str) -> str:
    # Argo infers the resource the way kubectl does: lower case, English plural
    # (workflow/executor/resource.go inferObjectSelfLink).
    low = kind.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def kubectl_calls(template: Mapping[str, Any]) -> tuple[ApiCall, ...]:
    """The calls `argoexec resource` makes for a resource template (workflow/executor/resource.go:
    the action through kubectl, GETs while polling its success/failure conditions and for
    jsonPath/jqFilter outputs), besides reporting its outputs (EXECUTOR_API_CALLS)."""
    resource = template.get("resource") or {}
    manifest = yaml.safe_load(resource.get("manifest") or "") or {}
    meta = manifest.get("metadata") or {}
    base = ApiCall("get", _plural(manifest.get("kind", "")), _group(manifest.get("apiVersion", "")),
                   namespace=meta.get("namespace") or "{namespace}")
    name = meta.get("name", "")
    verbs = list(_KUBECTL_VERBS.get(resource.get("action", ""), (resource.get("action", ""),)))
    if resource.get("successCondition") or resource.get("failureCondition"):
        verbs.append("get")
    outputs = (template.get("outputs") or {}).get("parameters") or []
    if any((p.get("valueFrom") or {}).keys() & {"jsonPath", "jqFilter"} for p in outputs):
        verbs.append("get")
    calls = [dataclasses.replace(base, verb=v, name="" if v == "create" else name)
             for v in dict.fromkeys(verbs)]
    if resource.get("setOwnerReference"):
        calls.append(OWNER_REFERENCE_CALL)
    return (*KUBECTL_DISCOVERY, *calls)


class _Accounts:
    """The ServiceAccounts in the documents: their automount and token Secret names."""

    def __init__(self, documents: Sequence[Mapping[str, Any]]) -> None:
        self.accounts = {((d.get("metadata") or {}).get("namespace", ""), d["metadata"]["name"]): d
                         for d in documents if d.get("kind") == "ServiceAccount"}

    def automount(self, namespace: str, name: str, pod_field: Any) -> bool:
        if pod_field is not None:
            return bool(pod_field)
        account = self.accounts.get((namespace, name)) or {}
        value = account.get("automountServiceAccountToken")
        return True if value is None else bool(value)

    def token_secret(self, namespace: str, name: str) -> str:
        account = self.accounts.get((namespace, name)) or {}
        secrets = account.get("secrets") or []
        if secrets:
            return str(secrets[0].get("name", ""))
        named = ((account.get("metadata") or {}).get("annotations") or {}).get(
            "workflows.argoproj.io/service-account-token.name")
        return str(named or f"{name}.service-account-token")


def _bind(calls: Iterable[ApiCall], values: Mapping[str, str]) -> tuple[ApiCall, ...]:
    return tuple(c.bind(values) for c in calls)


def _workflow_pods(doc: Mapping[str, Any], accounts: _Accounts) -> list[PodIdentity]:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronWorkflow":
        spec = spec.get("workflowSpec") or {}
    namespace = meta.get("namespace", "")
    values = {"namespace": namespace, "node": "<node-id>",
              "workflow": meta.get("name") or meta.get("generateName") or "<workflow>"}
    found = []
    for tmpl in spec.get("templates") or []:
        kinds = {"container", "script", "containerSet", "resource", "data"} & tmpl.keys()
        if not kinds:
            continue  # dag, steps, suspend: no pod
        where = f"{doc['kind']} {namespace}/{meta.get('name')}: {tmpl['name']}"
        pod_sa = tmpl.get("serviceAccountName") or spec.get("serviceAccountName") or "default"
        automount = tmpl.get("automountServiceAccountToken")
        if automount is None:
            automount = spec.get("automountServiceAccountToken")
        pod_field = False if automount is False else None  # only `false` reaches the pod
        pod_token = accounts.automount(namespace, pod_sa, pod_field)
        executor = ((tmpl.get("executor") or {}).get("serviceAccountName")
                    or (spec.get("executor") or {}).get("serviceAccountName"))
        exec_sa, exec_token = (executor, True) if executor else (pod_sa, pod_token)
        secret = accounts.token_secret(namespace, executor) if executor else ""
        argoexec_calls = list(EXECUTOR_API_CALLS)
        if "resource" in kinds:
            argoexec_calls += kubectl_calls(tmpl)
        found.append(PodIdentity(f"{where} (argoexec)", namespace, exec_sa, exec_token,
                                 _bind(argoexec_calls, values), secret))
        if kinds & {"container", "script", "containerSet"}:
            # The model repo's and our own step code: `mlops step`, git, buildkit: no API,
            # but for the steps of STEP_API_CALLS (the push Workflow's submitter).
            container = tmpl.get("container") or {}
            argv = [*(container.get("command") or []), *(container.get("args") or [])]
            step = argv[2] if argv[:2] == ["mlops", "step"] and len(argv) > 2 else ""
            found.append(PodIdentity(f"{where} (main)", namespace, pod_sa, pod_token,
                                     _bind(STEP_API_CALLS.get(step, ()), values)))
        if "resource" in kinds:
            manifest = yaml.safe_load((tmpl["resource"] or {}).get("manifest") or "") or {}
            manifest.setdefault("metadata", {}).setdefault("namespace", namespace)
            found += _paddlejob_pods(manifest, accounts, where)
    return found


def _paddlejob_pods(doc: Mapping[str, Any], accounts: _Accounts, where: str = ""
                    ) -> list[PodIdentity]:
    if doc.get("kind") != "PaddleJob":
        return []
    namespace = (doc.get("metadata") or {}).get("namespace", "")
    found = []
    for role in ("worker", "ps"):
        pod = (((doc.get("spec") or {}).get(role) or {}).get("template") or {}).get("spec")
        if pod is None:
            continue
        sa = pod.get("serviceAccountName") or "default"
        found.append(PodIdentity(f"{where or 'PaddleJob'} (PaddleJob {role})", namespace, sa,
                                 accounts.automount(namespace, sa,
                                                    pod.get("automountServiceAccountToken"))))
    return found


def _arg(args: Sequence[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def _controller_calls(args: Sequence[str], models: Sequence[str]) -> tuple[ApiCall, ...]:
    """The promotion controller's calls, as its arguments switch them on
    (`mlops controller run`: `--argocd-namespace`, `--readiness kubernetes`)."""
    calls: list[ApiCall] = []
    for model in models:
        values = {"model": model, "version": "<version>",
                  "argocd_namespace": _arg(args, "--argocd-namespace") or "",
                  "models_namespace": _arg(args, "--readiness-namespace") or ""}
        if values["argocd_namespace"]:
            calls += _bind(argocd.API_CALLS, values)
        if _arg(args, "--readiness") == "kubernetes":
            calls += _bind(readiness.API_CALLS, values)
    return tuple(calls)


def _ui_calls(args: Sequence[str], models: Sequence[str]) -> tuple[ApiCall, ...]:
    """The web UI's calls: with actions, the rollback button's readiness check in
    `--readiness-namespace`; read-only, none."""
    namespace = _arg(args, "--readiness-namespace")
    if "--read-only" in args or not namespace:
        return ()
    return tuple(call for model in models for call in _bind(
        readiness.CHECK_API_CALLS,
        {"model": model, "version": "<version>", "models_namespace": namespace}))


#: The web UI's Deployment (`mlops.ui.manifests.NAME`; a name, since workflows sits below
#: mlops: the guide's manifests test renders it, so a rename fails there).
UI = "mlops-ui"
#: Deployments whose program calls the API: name -> (container args, models) -> its calls.
#: Any other Deployment (the model servers) calls none, so must hold no token.
DEPLOYMENT_CALLS: dict[str, Callable[[Sequence[str], Sequence[str]], tuple[ApiCall, ...]]] = {
    CONTROLLER: _controller_calls,
    UI: _ui_calls,
}


def _deployment_pods(doc: Mapping[str, Any], accounts: _Accounts,
                     models: Sequence[str]) -> list[PodIdentity]:
    meta = doc.get("metadata") or {}
    namespace = meta.get("namespace", "")
    pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    sa = pod.get("serviceAccountName") or "default"
    token = accounts.automount(namespace, sa, pod.get("automountServiceAccountToken"))
    found = []
    for container in pod.get("containers") or []:
        if any(m.get("mountPath") == TOKEN_PATH for m in container.get("volumeMounts") or []):
            continue  # its own mount there: not ours to judge
        known = DEPLOYMENT_CALLS.get(meta.get("name", ""))
        calls = known(container.get("args") or [], models) if known else ()
        found.append(PodIdentity(f"{doc['kind']} {namespace}/{meta.get('name')} "
                                 f"({container.get('name')})", namespace, sa, token, calls,
                                 checked=not known or bool(models)))
    return found


def _events_pod(doc: Mapping[str, Any], accounts: _Accounts) -> PodIdentity:
    meta = doc.get("metadata") or {}
    namespace = meta.get("namespace", "")
    spec = doc.get("spec") or {}
    sa = (spec.get("template") or {}).get("serviceAccountName") or "default"
    calls: tuple[ApiCall, ...] = ()
    if doc.get("kind") == "Sensor":
        for trigger in spec.get("triggers") or []:
            argo = (trigger.get("template") or {}).get("argoWorkflow") or {}
            workflow = (argo.get("source") or {}).get("resource") or {}
            ref = ((workflow.get("spec") or {}).get("workflowTemplateRef") or {}).get("name")
            calls += _bind(SENSOR_API_CALLS, {"namespace": namespace, "model": ref or ""})
    return PodIdentity(f"{doc['kind']} {namespace}/{meta.get('name')}", namespace, sa,
                       accounts.automount(namespace, sa, None), tuple(dict.fromkeys(calls)))


def _models(documents: Sequence[Mapping[str, Any]]) -> list[str]:
    """The models these documents run: their pipelines' and model servers' names."""
    names = [(d.get("metadata") or {}).get("name", "") for d in documents
             if d.get("kind") == "WorkflowTemplate"
             and PUSH_LABEL not in ((d.get("metadata") or {}).get("labels") or {})]
    names += [((d.get("metadata") or {}).get("labels") or {}).get("app", "") for d in documents
              if d.get("kind") == "Deployment"
              and "version" in ((d.get("metadata") or {}).get("labels") or {})]
    return [n for n in dict.fromkeys(names) if n]


def pod_identities(documents: Sequence[Mapping[str, Any]],
                   models: Sequence[str] | None = None) -> list[PodIdentity]:
    """Every pod-bearing thing in `documents`, with the token it holds and its calls.

    `models`: whose Applications and Deployments the controller is asked about
    (default: the pipelines' and model servers' in `documents`)."""
    accounts = _Accounts(documents)
    models = list(models) if models is not None else _models(documents)
    found: list[PodIdentity] = []
    for doc in documents:
        kind = doc.get("kind")
        if kind in _WORKFLOW_KINDS:
            found += _workflow_pods(doc, accounts)
        elif kind == "PaddleJob":
            found += _paddlejob_pods(doc, accounts)
        elif kind in _POD_TEMPLATE_KINDS:
            found += _deployment_pods(doc, accounts, models)
        elif kind in ("Sensor", "EventSource") and _group(doc.get("apiVersion", "")) == \
                "argoproj.io":
            found.append(_events_pod(doc, accounts))
    return found


def identity_problems(documents: Sequence[Mapping[str, Any]],
                      models: Sequence[str] | None = None) -> list[str]:
    """What is wrong with the identities of `documents` (empty: nothing).

    A call whose pod holds no token, or whose token's account may not make it;
    a component that makes no call but holds a token; an executor account
    whose token Secret is not among the documents."""
    roles = [*BOOTSTRAP, *(d for d in documents if d.get("kind") in ("Role", "ClusterRole"))]
    bindings = [*BOOTSTRAP, *(d for d in documents
                              if d.get("kind") in ("RoleBinding", "ClusterRoleBinding"))]
    secrets = {((d.get("metadata") or {}).get("namespace", ""), d["metadata"]["name"])
               for d in documents if d.get("kind") == "Secret"
               and d.get("type") == "kubernetes.io/service-account-token"}
    problems = []
    for pod in pod_identities(documents, models):
        if not pod.checked:
            continue
        sa = f"{pod.namespace}/{pod.service_account}"
        if not pod.calls:
            if pod.token_mounted:
                problems.append(f"{pod.component}: makes no API call but holds the token "
                                f"of {sa}: set automountServiceAccountToken: false")
            continue
        if not pod.token_mounted:
            problems.append(f"{pod.component}: calls the API ({pod.calls[0]}) but holds "
                            "no token")
            continue
        if pod.token_secret and (pod.namespace, pod.token_secret) not in secrets:
            problems.append(f"{pod.component}: Argo mounts the token Secret "
                            f"{pod.namespace}/{pod.token_secret} of {sa}; render it (Kubernetes "
                            ">= 1.24 makes none)")
        for call in pod.calls:
            if not allowed(roles, bindings, (pod.namespace, pod.service_account), call):
                problems.append(f"{pod.component}: {sa} may not {call}")
    return problems

