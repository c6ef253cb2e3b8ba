"""A Kubernetes API call as RBAC sees it, declared next to the code that makes it.

Each component that talks to the API server lists its calls as data
(`API_CALLS` in `promotion/cluster/argocd.py`, `promotion/cluster/readiness.py`,
`workflows/argo_events.py`; Argo's executor in `workflows/identity.py`), so a test
can hold every call against the Roles we render (`workflows.identity`), and a
recording stand-in API server can prove the list is what the code really asks.

An `ApiCall` holds the attributes Kubernetes' RBAC authorizer matches on
(`plugin/pkg/auth/authorizer/rbac/rbac.go` RuleAllows, kubernetes/kubernetes):
verb, API group, resource and subresource, the object's name and the
namespace. `namespace` and `name` may hold `{placeholders}` (`{namespace}`:
the pod's own; `{model}`, ...) that the check fills in per deployment.

:func:`request_call` turns an HTTP request into those attributes the way the
API server does (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`
NewRequestInfo: `/api/v1/...` is the core group, `/apis/GROUP/VERSION/...`
a named one; `namespaces/NS/RESOURCE[/NAME[/SUBRESOURCE]]`; GET of a
collection is `list`, of a name `get`; POST `create`, PUT `update`, PATCH
`patch`, DELETE `delete`; any other path is a non-resource URL).
"""

import dataclasses
import re
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

#: The pod's own namespace, filled in by the check.
OWN_NAMESPACE = "{namespace}"

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_FIELD = re.compile(r"\{(\w+)\}")


@dataclasses.dataclass(frozen=True, order=True)
class ApiCall:
    """One request's RBAC attributes; `path` instead of a resource for non-resource URLs."""

    verb: str
    resource: str = ""
    group: str = ""  # "" is the core group (pods, secrets, ...)
    subresource: str = ""
    name: str = ""  # "" for create and list: RBAC sees no name on a collection
    namespace: str = OWN_NAMESPACE  # "" for cluster-scoped resources
    path: str = ""  # a non-resource URL (`/apis`), then resource is ""

    def bind(self, values: Mapping[str, str]) -> "ApiCall":
        """The call with its `{placeholders}` filled in; a missing value is an error."""

        def fill(text: str) -> str:
            def one(match: re.Match[str]) -> str:
                key = match.group(1)
                if key not in values:
                    raise KeyError(f"{self}: no value for {{{key}}}")
                return values[key]
            return _FIELD.sub(one, text)

        return dataclasses.replace(self, name=fill(self.name), namespace=fill(self.namespace))

    def __str__(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        if self.subresource:
            what += f"/{self.subresource}"
        if self.name:
            what += f" {self.name!r}"
        where = f"in namespace {self.namespace!r}" if self.namespace else "cluster-wide"
        return f"{self.verb} {what} {where}"


def request_call(method: str, url: str) -> ApiCall:
    """The RBAC attributes of one HTTP request to the API server (pure)."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    method = method.upper()
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        rest = []
        group = ""
    if not rest:
        return ApiCall(verb=method.lower(), path=split.path or "/", namespace="")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, subresource = rest[0], "", ""
    if len(rest) >= 2:
        name = rest[1]
    if len(rest) >= 3:
        subresource = rest[2]
    if method == "GET":
        watching = parse_qs(split.query).get("watch", ["false"])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = _VERBS.get(method, method.lower())
    return ApiCall(verb=verb, resource=resource, group=group, subresource=subresource,
                   name=name, namespace=namespace)
