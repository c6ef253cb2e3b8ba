"""The local platform runs what the Deployment says, and can be as slow as a cluster.

Real parts: a bare GitOps repo, `mlops up` (Prometheus, HAProxy, the sync),
`mlops serve` processes on the model the ``trained_model`` fixture trained.
The sync starts each server from its Deployment's container (command, args,
env, readiness probe), routes it only once that probe passes, and in
cluster-latency mode applies a commit only after the sync delay and probes
a new server only after the start delay.
"""

from __future__ import annotations

import pathlib
import shutil
import time

import pytest
import yaml

from gitops import layout
from gitops.writeback import Message, WriteBack
from local.platform.sync import probe_ready
from local.platform.workdir import Workdir
from tests.fixtures.platform import (
    FAST,
    converged,
    model_documents,
    status_doc,
    versions_of,
    wait_for,
    write_model,
)

pytestmark = pytest.mark.slow

MODEL = "shapes"
SERVER_READY = 180


def _versions(base: pathlib.Path, trained_model, *names: str) -> dict[str, pathlib.Path]:
    out = {}
    for name in names:
        out[name] = base / "models" / MODEL / name
        shutil.copytree(trained_model.model_dir, out[name])
    return out


def _commit(repo, docs, subject):
    result = WriteBack(repo, backoff=FAST).commit(
        "main", lambda root: layout.write_model(root, MODEL, docs), Message(subject))
    assert result.commit
    return result.commit


def _container(docs, version):
    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["labels"]["version"] == version)
    return deployment["spec"]["template"]["spec"]["containers"][0]


def _cmdline(pid: int) -> list[str]:
    return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_servers_start_from_their_deployment_and_a_bad_probe_gets_no_traffic(
        tmp_path, trained_model, platform_gitops, platform_factory):
    versions = _versions(tmp_path, trained_model, "v-1", "v-2")
    write_model(platform_gitops, MODEL, {"v-1": versions["v-1"]}, stable="v-1")
    wd = platform_factory(platform_gitops)
    wait_for(lambda: converged(wd, MODEL, {"v-1": 100}), SERVER_READY, "v-1 at 100 %")
    first = versions_of(wd, MODEL)["v-1"]
    assert first["ready"] is True and first["ready_since"]
    assert "--max-in-flight" not in _cmdline(first["pid"])

    # An arg changed in the Deployment: a new pod, started with it.
    docs = model_documents(MODEL, {"v-1": versions["v-1"]}, stable="v-1")
    _container(docs, "v-1")["args"] += ["--max-in-flight", "7"]
    _commit(platform_gitops, docs, "serve v-1 with 7 requests in flight")

    def restarted():
        v = versions_of(wd, MODEL).get("v-1", {})
        return v.get("pid") not in (None, first["pid"]) and v.get("ready") and v
    second = wait_for(restarted, SERVER_READY, "v-1 restarted from the new Deployment")
    argv = _cmdline(second["pid"])
    assert argv[argv.index("--max-in-flight") + 1] == "7"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # 0.0.0.0 in the pod

    # A canary whose readiness probe asks the wrong path: it runs, never gets traffic.
    docs = model_documents(MODEL, versions, stable="v-1", canary="v-2", canary_weight=10)
    # v-1's Deployment as committed above: without its arg the sync would restart v-1 once
    # more, and the check of its 90 % below would race that restart (seen 08:00 UTC)
    _container(docs, "v-1")["args"] += ["--max-in-flight", "7"]
    _container(docs, "v-2")["readinessProbe"]["httpGet"]["path"] = "/no-such-path"
    # Probed every second until its first success (the startup probe's period; 2 s by
    # default): the three probes below that never pass cost 3 s of waiting, not 6.
    _container(docs, "v-2")["startupProbe"]["periodSeconds"] = 1
    _commit(platform_gitops, docs, "canary v-2 with a wrong probe path")
    port = wait_for(lambda: versions_of(wd, MODEL).get("v-2", {}).get("port"), SERVER_READY,
                    "v-2's server started")
    # Up and ready by its own account (the right path answers 200), then three of the
    # sync's probe periods for a starting server (the startup probe's): never ready.
    wait_for(lambda: probe_ready(port), SERVER_READY, "v-2's /v2/health/ready to answer 200")
    time.sleep(3 * _container(docs, "v-2")["startupProbe"]["periodSeconds"])
    canary = versions_of(wd, MODEL)["v-2"]
    assert canary["ready"] is False and canary["phase"] == "starting"
    assert canary["desired_weight"] == 10 and not canary["haproxy_weight"]
    assert versions_of(wd, MODEL)["v-1"]["haproxy_weight"] == 90


def test_cluster_latency_mode_delays_the_apply_and_the_readiness(
        tmp_path, trained_model, platform_gitops, platform_factory):
    versions = _versions(tmp_path, trained_model, "v-1")
    # The start delay above a server's own start-up (~7 s here), or it would not show.
    sync_delay, start_delay = 3.0, 8.0
    wd: Workdir = platform_factory(platform_gitops, sync_delay=sync_delay, start_delay=start_delay)
    config = yaml.safe_load(wd.config.read_text())
    assert (config["sync_delay"], config["start_delay"]) == (sync_delay, start_delay)
    committed_at = time.time()
    sha = write_model(platform_gitops, MODEL, {"v-1": versions["v-1"]}, stable="v-1")
    time.sleep(sync_delay / 2)
    assert status_doc(wd).get("applied_commit") != sha  # Argo CD has not polled yet
    wait_for(lambda: status_doc(wd).get("applied_commit") == sha, 60, "the commit applied")
    applied_at = status_doc(wd)["applied_at"]
    assert applied_at - committed_at >= sync_delay
    wait_for(lambda: converged(wd, MODEL, {"v-1": 100}), SERVER_READY, "v-1 ready and routed")
    ready_since = versions_of(wd, MODEL)["v-1"]["ready_since"]
    # Not probed before the "image pull" (the start is timed from the tick that read the
    # commit, which begins a moment before `applied_at` is taken: one tick of slack).
    assert ready_since - applied_at >= start_delay - 1.0
