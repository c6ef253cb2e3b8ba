"""Is the candidate deployed and ready? Asked before its canary gets any traffic.

One Protocol, one class per backend: :class:`KubernetesReadiness` (the Deployment's
generation observed, every replica updated and available, its pod template carrying
git's weights digest; :func:`deployment_ready` is the pure half; a pod whose server
exited `CANNOT_SERVE` on a retry, :func:`pods_lasting_failure`, is "never"), the local
platform's `local.platform.readiness.PlatformReadiness`, and :class:`AlwaysReady` for
tests. `Readiness.lasting` tells "not yet" (waited out) from "never" (ends the
rollout). Why: docs/inside-promotion.md, docs/cluster.md.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Protocol

from contracts.errors import ExitCode
from contracts.kubeapi import ApiCall
from contracts.traffic import weights_by_version
from serving.manifests import ANNOTATION_WEIGHTS_SHA256, deployment_name

__all__ = [
    "API_CALLS",
    "AlwaysReady",
    "CHECK_API_CALLS",
    "KubernetesReadiness",
    "Readiness",
    "ReadinessCheck",
    "deployment_ready",
    "pods_lasting_failure",
    "routing_applied",
]


#: Every Kubernetes API call :class:`KubernetesReadiness` makes (`workflows.identity` holds
#: them against the controller's Role; tests/promotion/test_promotion_api_calls.py records them).
CHECK_API_CALLS = (
    ApiCall("get", "deployments", "apps", name="{model}-{version}",
            namespace="{models_namespace}"),
    ApiCall("list", "pods", namespace="{models_namespace}"),
)
"""What :meth:`KubernetesReadiness.check` alone asks (the UI's rollback button)."""
API_CALLS = (
    *CHECK_API_CALLS,
    ApiCall("get", "destinationrules", "networking.istio.io", name="{model}",
            namespace="{models_namespace}"),
    ApiCall("get", "virtualservices", "networking.istio.io", name="{model}",
            namespace="{models_namespace}"),
)


@dataclasses.dataclass(frozen=True)
class Readiness:
    """The runtime's answer, with a reason a human reads in the log and the commit."""

    ready: bool
    reason: str
    lasting: bool = False
    """Not ready, and no wait will change that (Kopf's `PermanentError`, Kargo's
    `TerminalError`): the runtime gave up on the version, or the version itself says it
    cannot answer. A rollout ends at once instead of after `ready_timeout`; a rollback
    stops waiting. A transient "not ready" (applying, pulling, starting) is not lasting."""


class ReadinessCheck(Protocol):
    """Asks the runtime whether one version's Deployment is applied and ready, and whether
    the router has the traffic split git says."""

    def check(self, model: str, version: str, desired: Mapping[str, Any] | None) -> Readiness:
        """`desired` is the Deployment as committed on main (None if git has none)."""
        ...

    def routed(self, model: str, weights: Mapping[str, int]) -> Readiness:
        """Does the router send `weights` (percent per version, as committed) already?

        Every step is a commit the runtime applies after its own delay (Argo CD's
        poll); until then the canary gets the previous step's share, and judging
        it against the new weight would read "not shifted" as "down"."""
        ...


class AlwaysReady:
    """For runs without a runtime to ask: every version is ready."""

    def check(self, model: str, version: str, desired: Mapping[str, Any] | None) -> Readiness:
        return Readiness(True, "readiness not checked")

    def routed(self, model: str, weights: Mapping[str, int]) -> Readiness:
        return Readiness(True, "routing not checked")


def routing_applied(live_weights: Mapping[str, int] | None, weights: Mapping[str, int],
                    model: str) -> Readiness:
    """Whether the live split (percent per version) is git's (pure)."""
    if live_weights is None:
        return Readiness(False, f"{model}: no VirtualService/DestinationRule applied yet")
    want = {v: w for v, w in weights.items() if w}
    have = {v: w for v, w in live_weights.items() if w}
    if want != have:
        return Readiness(False, f"{model}: the router sends {_split(have)}, git says "
                                f"{_split(want)}: the step is not applied yet")
    return Readiness(True, f"{model}: the router sends {_split(want)}")


def _split(weights: Mapping[str, int]) -> str:
    return "/".join(f"{v} {w}%" for v, w in sorted(weights.items())) or "nothing"


def _digest(doc: Mapping[str, Any] | None) -> str | None:
    if not doc:
        return None
    template = ((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}
    value = (template.get("annotations") or {}).get(ANNOTATION_WEIGHTS_SHA256)
    return str(value) if value else None


def deployment_ready(live: Mapping[str, Any] | None, desired: Mapping[str, Any] | None,
                     name: str) -> Readiness:
    """Readiness of a Deployment as the API server returns it (pure)."""
    if live is None:
        return Readiness(False, f"deployment {name} not found: the merge is not applied yet")
    want = _digest(desired)
    have = _digest(live)
    if want is not None and have != want:
        return Readiness(False, f"deployment {name} runs weights {str(have)[:12]}, git says "
                                f"{want[:12]}: the merge is not applied yet")
    meta, spec, status = (live.get(k) or {} for k in ("metadata", "spec", "status"))
    if int(meta.get("generation", 0)) > int(status.get("observedGeneration", 0)):
        return Readiness(False, f"deployment {name}: generation not observed yet")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and \
                condition.get("reason") == "ProgressDeadlineExceeded":
            # Kubernetes' own verdict that the rollout failed (its pods never became
            # ready within progressDeadlineSeconds); Flagger fails the canary on it too.
            detail = condition.get("message")
            return Readiness(False, f"deployment {name} exceeded its progress deadline"
                                    + (f": {detail}" if detail else ""), lasting=True)
    wanted = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas", 0))
    available = int(status.get("availableReplicas", 0))
    if wanted == 0:
        return Readiness(False, f"deployment {name} is scaled to zero")
    if updated < wanted:
        return Readiness(False, f"deployment {name}: {updated} of {wanted} replicas updated")
    if int(status.get("replicas", 0)) > updated:
        return Readiness(False, f"deployment {name}: old replicas pending termination")
    if available < wanted:
        return Readiness(False, f"deployment {name}: {available} of {wanted} replicas ready")
    return Readiness(True, f"deployment {name}: {available}/{wanted} replicas ready")


def pods_lasting_failure(pods: Mapping[str, Any] | None, name: str,
                         digest: str | None = None) -> Readiness | None:
    """A lasting "not ready" when a pod of Deployment `name` (a PodList as the API server
    returns it; only pods carrying weights `digest`, when given) has a container whose
    latest run ended `ExitCode.CANNOT_SERVE` and was not its first (pure); else None.

    One such exit may be a fluke, so the kubelet's restart is its retry: at least two
    runs have ended, the latest with that code (`restartCount` counts the restarts, and
    a container not running now has ended one more). The reason is the server's own
    words, from its termination message."""
    for pod in (pods or {}).get("items") or []:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if digest is not None and \
                (meta.get("annotations") or {}).get(ANNOTATION_WEIGHTS_SHA256) != digest:
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            last = state.get("terminated") or (status.get("lastState") or {}).get("terminated")
            if not last or last.get("exitCode") != ExitCode.CANNOT_SERVE:
                continue
            ended = int(status.get("restartCount") or 0) + (0 if "running" in state else 1)
            if ended < 2:
                continue
            why = str(last.get("message") or "").strip() or \
                f"its server exited {int(ExitCode.CANNOT_SERVE)} (cannot serve)"
            return Readiness(False, f"deployment {name}: pod {meta.get('name')} cannot serve "
                                    f"({ended} runs): {why}", lasting=True)
    return None


class KubernetesReadiness:
    """Reads Deployments in `namespace` through the official Kubernetes client.

    In a pod it uses the service account (`load_incluster_config`); elsewhere
    the kubeconfig, unless an `api_client` is given (tests point one at a
    stand-in API server). Needs `get` on `deployments` and `list` on `pods` in the
    namespace.
    """

    def __init__(self, namespace: str, api_client: Any = None) -> None:
        # Here, not at the top: kubernetes is the controller extra's; API_CALLS are read
        # (workflows.identity) where it is not installed.
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self.namespace = namespace
        self.api = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def routed(self, model: str, weights: Mapping[str, int]) -> Readiness:
        """Reads the model's Istio DestinationRule and VirtualService (both named
        `<model>`); needs `get` on them in the namespace."""
        try:
            live = [self.custom.get_namespaced_custom_object(
                "networking.istio.io", "v1", self.namespace, plural, model)
                for plural in ("destinationrules", "virtualservices")]
        except Exception as exc:  # 404 before Argo CD applied the merge, or no API
            status = getattr(exc, "status", None)
            if status == 404:
                return routing_applied(None, weights, model)
            return Readiness(False, f"{model}: cannot read its routing ({type(exc).__name__} "
                                    f"{status or ''})".rstrip() + ")")
        return routing_applied(weights_by_version(live[0], live[1]), weights, model)

    def check(self, model: str, version: str, desired: Mapping[str, Any] | None) -> Readiness:
        from kubernetes.client.exceptions import ApiException  # optional, as above

        name = deployment_name(model, version)
        try:
            # _preload_content=False: the raw HTTP response (typed as the model by the client)
            response: Any = self.api.read_namespaced_deployment(name, self.namespace,
                                                                _preload_content=False)
            live = json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return deployment_ready(None, desired, name)
            return Readiness(False, f"deployment {name}: API error {exc.status} {exc.reason}")
        except Exception as exc:  # unreachable API server: not ready, said why
            return Readiness(False, f"deployment {name}: cannot ask the API server "
                                    f"({type(exc).__name__})")
        answer = deployment_ready(live, desired, name)
        if answer.ready or answer.lasting:
            return answer
        # Not ready yet: is it a server that said it never will be (its pods know)?
        spec = live.get("spec") or {}
        labels = (spec.get("selector") or {}).get("matchLabels") or \
            {"app": model, "version": version}
        try:
            response = self.core.list_namespaced_pod(
                self.namespace, label_selector=",".join(f"{k}={v}" for k, v in labels.items()),
                _preload_content=False)
            pods = json.loads(response.data)
        except ApiException as exc:  # e.g. a Role without `list` on pods: the wait stays
            return dataclasses.replace(answer, reason=f"{answer.reason} (its pods: API "
                                                      f"error {exc.status} {exc.reason})")
        except Exception as exc:
            return dataclasses.replace(answer, reason=f"{answer.reason} (its pods: "
                                                      f"{type(exc).__name__})")
        return pods_lasting_failure(pods, name, _digest(desired) or _digest(live)) or answer
