"""What a cluster must allow before the rendered manifests can run there (pure).

From the documents (and the model repo's config, when given): the Pod Security
Admission level each namespace must enforce, counting the containers Argo and
paddle-operator add; every container's resource requests and limits; every image and
which are mutable tags; the data pins the repo must hold. Owner references are checked
with the identities (`workflows.identity`). Why each matters: docs/inside-workflows.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

__all__ = ["Finding", "PodSpec", "data_lock_findings", "image_findings", "pod_specs",
           "psa_findings", "psa_violations", "resource_findings"]

LEVELS = ("restricted", "baseline", "privileged")
_BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                  "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
_SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                 "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                 "net.ipv4.ping_group_range"}
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                       "persistentVolumeClaim", "projected", "secret"}
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                  "container_engine_t"}
_WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
_POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}
ARGO_EXECUTOR = ("Argo's executor containers (init, wait; a resource template's main), "
                 "from the controller ConfigMap's `executor`")
#: paddle-operator v0.3.5 `main.go`: `--initImage`, default docker.io/library/alpine:3.10.
PADDLE_OPERATOR_INIT_IMAGE = "docker.io/library/alpine:3.10"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the report: `level` is `ok`, `note` or `warning`."""

    topic: str
    level: str
    text: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.level + ': ' if self.level != 'ok' else ''}{self.text}"


@dataclasses.dataclass(frozen=True)
class PodSpec:
    """A pod the documents make, as the cluster will see it (injected containers included)."""

    component: str
    namespace: str
    spec: Mapping[str, Any]  # pod-level fields: securityContext, volumes, host*
    containers: tuple[Mapping[str, Any], ...]  # every container, init and injected ones too
    #: containers whose fields come from outside the documents (name -> where from)
    injected: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _argoexec(name: str, executor: Mapping[str, Any] | None, resource: bool) -> dict[str, Any]:
    """Argo's argoexec container: the ConfigMap's executor securityContext and resources;
    a resource template's get Argo's minimal context when none is configured."""
    executor = executor or {}
    context = executor.get("securityContext")
    if context is None and resource:  # common.MinimalCtrSC (workflow/common/security_context.go)
        context = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    # the image is the controller's --executor-image: not named by the documents
    return {"name": name, "securityContext": context or {},
            "resources": executor.get("resources") or {}}


def pod_specs(documents: Sequence[Mapping[str, Any]], *,
              argo_executor: Mapping[str, Any] | None = None,
              paddle_init_image: str = PADDLE_OPERATOR_INIT_IMAGE) -> list[PodSpec]:
    """Every pod the documents make; `argo_executor`: the controller ConfigMap's `executor`
    (None: not configured); `paddle_init_image`: paddle-operator's `--initImage` ("" off)."""
    found: list[PodSpec] = []
    for doc in documents:
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        namespace = meta.get("namespace", "")
        where = f"{kind} {namespace}/{meta.get('name')}"
        if kind in _WORKFLOW_KINDS:
            spec = doc.get("spec") or {}
            if kind == "CronWorkflow":
                spec = spec.get("workflowSpec") or {}
            pod_level = {"securityContext": spec.get("securityContext") or {},
                         "volumes": spec.get("volumes") or []}
            for tmpl in spec.get("templates") or []:
                resource = "resource" in tmpl
                if not ({"container", "script"} & tmpl.keys()) and not resource:
                    continue
                main = [dict(tmpl.get("container") or tmpl.get("script"), name="main")] \
                    if not resource else [_argoexec("main", argo_executor, True)]
                init_wait = [_argoexec(n, argo_executor, resource) for n in ("init", "wait")]
                injected = {n: ARGO_EXECUTOR for n in ("init", "wait")}
                if resource:
                    injected["main"] = ARGO_EXECUTOR  # argoexec runs kubectl
                found.append(PodSpec(f"{where}: {tmpl['name']}", namespace, pod_level,
                                     (*init_wait, *main), injected))
                if resource:
                    manifest = yaml.safe_load(tmpl["resource"].get("manifest") or "") or {}
                    found += _paddlejob(manifest, namespace or "", f"{where}: {tmpl['name']}",
                                        paddle_init_image)
        elif kind in _POD_TEMPLATE_KINDS:
            pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            found.append(PodSpec(where, namespace, pod, (*(pod.get("initContainers") or []),
                                                         *(pod.get("containers") or []))))
        elif kind == "PaddleJob":
            found += _paddlejob(doc, namespace, where, paddle_init_image)
    return found


def _paddlejob(doc: Mapping[str, Any], namespace: str, where: str,
               init_image: str) -> list[PodSpec]:
    if doc.get("kind") != "PaddleJob":
        return []
    out = []
    for role in ("worker", "ps"):
        pod = ((((doc.get("spec") or {}).get(role) or {}).get("template") or {})
               .get("spec"))
        if pod is None:
            continue
        containers = list(pod.get("containers") or [])
        injected = {}
        if init_image:
            containers.insert(0, {"name": "coord-paddle", "image": init_image,
                                  "resources": {"requests": {"cpu": "10m", "memory": "10m"}}})
            injected["coord-paddle"] = "paddle-operator's init container (--initImage)"
        out.append(PodSpec(f"{where} (PaddleJob {role})", namespace, pod, tuple(containers),
                           injected))
    return out


def _ctx(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def psa_violations(pod: PodSpec) -> dict[str, list[str]]:
    """What keeps `pod` out of each level: {"baseline": [...], "restricted": [...]}, after
    kubernetes/pod-security-admission `policy/check_*.go`; restricted includes baseline's."""
    spec, psc = pod.spec, pod.spec.get("securityContext") or {}
    base: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            base.append(f"{field}: true")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            base.append(f"volume {v.get('name')}: hostPath")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            base.append(f"sysctl {sysctl.get('name')}")
    for level, profile in (("pod", psc.get("seccompProfile")),
                           *((c.get("name"), _ctx(c).get("seccompProfile"))
                             for c in pod.containers)):
        if (profile or {}).get("type") == "Unconfined":
            base.append(f"{level}: seccompProfile Unconfined")
    for level, profile in (("pod", psc.get("appArmorProfile")),
                           *((c.get("name"), _ctx(c).get("appArmorProfile"))
                             for c in pod.containers)):
        if (profile or {}).get("type") == "Unconfined":
            base.append(f"{level}: appArmorProfile Unconfined")
    for c in pod.containers:
        ctx, name = _ctx(c), c.get("name")
        if ctx.get("privileged"):
            base.append(f"{name}: privileged")
        extra = set((ctx.get("capabilities") or {}).get("add") or []) - _BASELINE_CAPS
        if extra:
            base.append(f"{name}: adds capabilities {', '.join(sorted(extra))}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            base.append(f"{name}: hostPort")
        if ctx.get("procMount") not in (None, "Default"):
            base.append(f"{name}: procMount {ctx.get('procMount')}")
        se = ctx.get("seLinuxOptions") or {}
        if se.get("type", "") not in _SELINUX_TYPES or se.get("user") or se.get("role"):
            base.append(f"{name}: seLinuxOptions")
    restricted = list(base)
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if kinds and not kinds & _RESTRICTED_VOLUMES:
            restricted.append(f"volume {v.get('name')}: {', '.join(sorted(kinds))}")
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    if psc.get("runAsNonRoot") is False:
        restricted.append("pod: runAsNonRoot false")
    if psc.get("runAsUser") == 0:
        restricted.append("pod: runAsUser 0")
    for c in pod.containers:
        ctx, name = _ctx(c), c.get("name")
        if ctx.get("allowPrivilegeEscalation") is not False:
            restricted.append(f"{name}: allowPrivilegeEscalation not false")
        if ctx.get("runAsNonRoot") is False or (ctx.get("runAsNonRoot") is None
                                                and not pod_non_root):
            restricted.append(f"{name}: runAsNonRoot not true")
        if ctx.get("runAsUser") == 0:
            restricted.append(f"{name}: runAsUser 0")
        profile = (ctx.get("seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost") and not (profile is None
                                                                   and pod_seccomp):
            restricted.append(f"{name}: no RuntimeDefault seccompProfile")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            restricted.append(f"{name}: capabilities not dropped (ALL)")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            restricted.append(f"{name}: adds capabilities")
    return {"baseline": base, "restricted": restricted}


def _level(pod: PodSpec) -> tuple[str, list[str]]:
    found = psa_violations(pod)
    if found["baseline"]:
        return "privileged", found["baseline"]
    if found["restricted"]:
        return "baseline", found["restricted"]
    return "restricted", []


def _split(pod: PodSpec, reasons: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """`reasons` as (the documents' own, {origin of an injected container: its reasons})."""
    own: list[str] = []
    injected: dict[str, list[str]] = {}
    for reason in reasons:
        name = reason.split(":", 1)[0]
        if name in pod.injected:
            injected.setdefault(pod.injected[name], []).append(reason.split(": ", 1)[-1])
        else:
            own.append(reason)
    return own, injected


def psa_findings(pods: Iterable[PodSpec]) -> list[Finding]:
    """Per namespace: the Pod Security level it must enforce (at most), the pods of the
    documents that need more than `restricted` and why, and the containers other programs
    inject (Argo's executor, paddle-operator's init) with what they lack, once each."""
    by_ns: dict[str, list[PodSpec]] = {}
    for pod in pods:
        by_ns.setdefault(pod.namespace or "(the namespace applied to)", []).append(pod)
    out = []
    for namespace, members in sorted(by_ns.items()):
        levels = [_level(pod) for pod in members]
        level = max((lv for lv, _ in levels), key=LEVELS.index)
        out.append(Finding("pod security", "ok" if level == "restricted" else "note",
                           f"namespace {namespace}: enforce={level} or looser"))
        origins: dict[str, set[str]] = {}
        for pod, (pod_level, why) in zip(members, levels):
            own, injected = _split(pod, why)
            if own:
                out.append(Finding("pod security", "note",
                                   f"  {pod.component} is {pod_level}: {'; '.join(own)}"))
            for origin, reasons in injected.items():
                origins.setdefault(origin, set()).update(reasons)
        for origin, lacking in sorted(origins.items()):
            out.append(Finding("pod security", "note",
                               f"  {origin}: {'; '.join(sorted(lacking))} (keeps the "
                               "namespace from restricted; docs/cluster.md section 1)"))
    return out


def resource_findings(pods: Iterable[PodSpec]) -> list[Finding]:
    """Containers without CPU and memory requests and limits: the documents' own by name,
    the injected ones once per origin."""
    own: list[str] = []
    injected: dict[str, set[str]] = {}
    for pod in pods:
        for c in pod.containers:
            res = c.get("resources") or {}
            lacks = [f"{kind}.{what}" for kind in ("requests", "limits")
                     for what in ("cpu", "memory") if what not in (res.get(kind) or {})]
            if not lacks:
                continue
            origin = pod.injected.get(c.get("name", ""))
            if origin:
                injected.setdefault(origin, set()).update(lacks)
            else:
                own.append(f"{pod.component} container {c.get('name')} lacks "
                           f"{', '.join(lacks)}")
    out = [Finding("resources", "warning", f"  {line}") for line in own]
    out += [Finding("resources", "note", f"  {origin} lacks {', '.join(sorted(lacks))}")
            for origin, lacks in sorted(injected.items())]
    head = (Finding("resources", "ok", "every container of the documents requests and limits "
                    "CPU and memory") if not own else
            Finding("resources", "warning", "a namespace with a compute ResourceQuota and no "
                    "LimitRange refuses pods whose containers lack requests or limits:"))
    return [head, *out]


def _registry(image: str) -> str:
    first = image.split("/", 1)[0]
    if "/" not in image or not ("." in first or ":" in first or first == "localhost"):
        return "docker.io"
    return first


def image_findings(pods: Iterable[PodSpec], extra: Mapping[str, str] = {}) -> list[Finding]:
    """Every image by name (placeholders Argo fills at run time left out): its registry, and
    whether the name is a mutable tag. `extra`: images named elsewhere (image -> what for)."""
    images: dict[str, set[str]] = {}
    for pod in pods:
        for c in pod.containers:
            image = str(c.get("image") or "")
            if image and "{{" not in image:
                images.setdefault(image, set()).add(pod.component.split(":")[0])
    for image, what in extra.items():
        images.setdefault(image, set()).add(what)
    out = []
    for image, users in sorted(images.items()):
        pinned = "@sha256:" in image
        registry = _registry(image)
        note = [f"from {registry}"]
        if not pinned:
            note.append("a tag: pin a digest (name@sha256:...) or never reuse it")
        if registry == "docker.io":
            note.append("Docker Hub: mirror it where nodes cannot reach it or hit rate limits")
        out.append(Finding("images", "ok" if pinned and registry != "docker.io" else "note",
                           f"{image} ({'; '.join(note)}) for {', '.join(sorted(users))}"))
    return out


def data_lock_findings(repo: pathlib.Path, locks: Mapping[str, str]) -> list[Finding]:
    """Each lock `data:` names (split -> path in the repo) must be in the model repo."""
    by_lock: dict[str, list[str]] = {}
    for split, lock in locks.items():
        by_lock.setdefault(lock, []).append(f"data.{split}")
    out = []
    for lock, splits in by_lock.items():
        if not (repo / lock).is_file():
            out.append(Finding(
                "data", "warning",
                f"{', '.join(splits)} name {lock}, which is not in {repo}: prepare-data fails "
                "on every run; pin the data first, on storage the pipeline's pods read "
                f"(mlops data snapshot SOURCE --out {lock}), and commit the lock"))
    if not out and locks:
        out.append(Finding("data", "ok", f"every lock data: names is in {repo}"))
    return out
