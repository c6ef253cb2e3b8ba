"""The Runs page in a cluster: pipeline runs from the Argo Server's API.

`GET /api/v1/workflows/{namespace}` lists the Workflows with their nodes; each
Pod node is a step (its phase, start and finish, output parameters). A step's
log is `GET /api/v1/workflows/{namespace}/{name}/log` for its pod (pod names
as Argo 3.4+ makes them: `<workflow>-<template>-<hash of the node id>`). The
views have the shape of :func:`mlops.ui.runs.runs_view`, so the page is the same.

An Argo Server as installed answers only with a Kubernetes bearer token
(`--auth-mode client` is its default): the token is the one `mlops workflows
submit` uses (`$ARGO_TOKEN`, with or without its `Bearer ` prefix). It serves
TLS (`--secure` defaults to true) with a certificate it makes itself at each
start unless given one (`--tls-certificate-secret-name`): give the CA of the
certificate it serves (`ca`, a PEM file), or ask by name not to check it
(`insecure`); the system's CAs are the default, and a refusal says which.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from typing import Any

import requests
import urllib3

from contracts.errors import ExitCode, MlopsError
from mlops.errors import UserError
from mlops.ui.runs import gate_view

TOKEN_ENV = "ARGO_TOKEN"  # = workflows.submit.TOKEN_ENV (that module needs Hera)


class ArgoServerError(MlopsError):
    """The Argo Server did not answer as its API says."""

    exit_code = ExitCode.UNAVAILABLE


def _time(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pod_name(workflow: str, node: dict[str, Any]) -> str:
    """The pod of a Pod node (POD_NAMES=v2, Argo's default since 3.4)."""
    node_id = str(node.get("id", ""))
    template = node.get("templateName") or ""
    prefix = f"{workflow}-"
    if template and node_id.startswith(prefix):
        return f"{workflow}-{template}-{node_id[len(prefix):]}"
    return node_id


def run_view(wf: dict[str, Any], now: float) -> dict[str, Any]:
    """One Workflow as the Runs page shows a run (pure)."""
    meta, status = wf.get("metadata") or {}, wf.get("status") or {}
    name = str(meta.get("name", "?"))
    steps, outputs = [], {}
    nodes = sorted((n for n in (status.get("nodes") or {}).values() if n.get("type") == "Pod"),
                   key=lambda n: n.get("startedAt") or "")
    for node in nodes:
        start, end = _time(node.get("startedAt")), _time(node.get("finishedAt"))
        params = {p["name"]: str(p.get("value", "")) for p in
                  ((node.get("outputs") or {}).get("parameters") or []) if "name" in p}
        outputs.update(params)
        steps.append({
            "task": node.get("displayName") or node.get("name"), "state": node.get("phase", ""),
            "started_at": start, "message": node.get("message", ""), "outputs": params,
            "seconds": None if start is None else round((end or now) - start, 1),
            "log": f"argo:{name}/{pod_name(name, node)}"})
    start, end = _time(status.get("startedAt")), _time(status.get("finishedAt"))
    failed = next((s for s in steps if s["state"] in ("Failed", "Error")), None)
    running = next((s for s in steps if s["state"] == "Running"), None)
    view = {
        "name": name, "out": f"argo:{name}", "status": status.get("phase") or "Pending",
        "started_at": start, "seconds": None if start is None else round((end or now) - start, 1),
        "task": (failed or running or {}).get("task", ""),
        "message": status.get("message", "") if failed else "",
        "version": outputs.get("version", ""),
        "gate": {"true": "passed", "false": "refused"}.get(outputs.get("passed", ""), ""),
        "steps": steps,
    }
    view["gate_view"] = gate_view(view)
    return view


class ArgoRuns:
    """Workflows of one namespace on an Argo Server."""

    def __init__(self, server: str, namespace: str, token: str | None = None,
                 timeout: float = 5.0, session: requests.Session | None = None, *,
                 ca: str | None = None, insecure: bool = False) -> None:
        self.server = server.rstrip("/")
        self.namespace = namespace
        token = (token if token is not None else os.environ.get(TOKEN_ENV, "")).strip()
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = \
                token if token.startswith("Bearer ") else f"Bearer {token}"
        if ca and insecure:
            raise UserError("--argo-ca and --argo-insecure: choose one")
        if ca:
            if not os.path.isfile(ca):
                raise UserError(f"--argo-ca {ca}: no such file (a PEM CA bundle)")
            self.verify: bool | str = ca
        elif insecure:
            # Asked for by name (`--argo-insecure`); the warning would repeat per request.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            self.verify = False
        else:
            self.verify = True
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> requests.Response:
        url = f"{self.server}/api/v1/workflows/{self.namespace}{path}"
        try:
            # `verify` per request: a session's is overridden by $REQUESTS_CA_BUNDLE.
            res = self.session.get(url, params=params, timeout=self.timeout, verify=self.verify)
        except requests.exceptions.SSLError as exc:
            raise ArgoServerError(
                f"Argo Server at {self.server}: its TLS certificate is not trusted ({exc}); "
                "give the CA that signed it with --argo-ca FILE, or --argo-insecure (its "
                "default certificate is self-signed and new at each start)") from None
        except requests.RequestException as exc:
            raise ArgoServerError(f"Argo Server at {self.server} unreachable: {exc}") from None
        if res.status_code == 401:
            sent = "the token" if "Authorization" in self.session.headers else "no token"
            raise ArgoServerError(
                f"Argo Server at {self.server} refused {sent} (HTTP 401): it wants a "
                f"Kubernetes ServiceAccount token in ${TOKEN_ENV} (`--auth-mode client`, "
                "its default)")
        if res.status_code == 403:
            raise ArgoServerError(
                f"Argo Server at {self.server}: the token in ${TOKEN_ENV} may not read "
                f"Workflows in namespace {self.namespace!r} (HTTP 403): {res.text[:200]}")
        if res.status_code != 200:
            raise ArgoServerError(f"Argo Server answered HTTP {res.status_code} for {url}: "
                                  f"{res.text[:200]}")
        return res

    def runs(self, limit: int = 20, now: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` Workflows, newest first."""

        body = self._get("", {"listOptions.limit": str(limit)}).json()
        items = body.get("items") or []
        items.sort(key=lambda wf: (wf.get("metadata") or {}).get("creationTimestamp", ""),
                   reverse=True)
        now = time.time() if now is None else now
        return [run_view(wf, now) for wf in items]

    def workflow(self, name: str) -> dict[str, Any]:
        """One Workflow's JSON (for the Compare view)."""
        if not name or "/" in name:
            raise UserError(f"argo:{name}: not a workflow name")
        doc = self._get(f"/{name}", {}).json()
        return doc if isinstance(doc, dict) else {}

    def train_log(self, wf: dict[str, Any]) -> str:
        """The log of the Workflow's train step ('' when it has none, or when its pod's log
        is gone: a comparison without the loss curve beats none)."""
        name = str((wf.get("metadata") or {}).get("name", ""))
        for node in ((wf.get("status") or {}).get("nodes") or {}).values():
            if node.get("type") == "Pod" and node.get("displayName") == "train":
                try:
                    return self.log(f"argo:{name}/{pod_name(name, node)}")
                except ArgoServerError:
                    return ""
        return ""

    def log(self, ref: str) -> str:
        """The log of `argo:<workflow>/<pod>` (the step's main container)."""
        workflow, _, pod = ref.removeprefix("argo:").partition("/")
        if not workflow or not pod or "/" in pod:
            raise UserError(f"{ref}: not a step of a workflow")
        res = self._get(f"/{workflow}/log", {"podName": pod, "logOptions.container": "main"})
        lines = []
        for line in res.text.splitlines():  # a stream of {"result": {"content": ...}}
            try:
                lines.append(json.loads(line)["result"]["content"])
            except (ValueError, KeyError, TypeError):
                continue
        return "\n".join(lines)
