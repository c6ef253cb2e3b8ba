"""A version whose warm-up fails: with `--termination-log` the server says why and exits.

Real `mlops serve` processes on the tiny export with a 32x32 resize in its
`infer_cfg.yml` (the graph takes 128x128 only: Paddle's reshape fails on every try).
In a pod the kubelet mounts a file at the container's `terminationMessagePath`,
reads it once the container ended, and shows its text as
`status.containerStatuses[].lastState.terminated.message` next to the exit code
(kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go,
`getTerminationMessage`; kubernetes/website content/en/docs/tasks/debug/
debug-application/determine-reason-pod-failure.md). Here a temporary file stands in
for that mount. Without the flag (the local platform) the server stays live and
never ready, its readiness probe saying why.
"""

import shutil
import subprocess
import sys
import time

import pytest
import requests
import yaml

from contracts.errors import ExitCode
from tests.fixtures.common import free_port
from tests.fixtures.serving import ROOT, server_env


@pytest.fixture(scope="module")
def unservable(tiny_model_dir, tmp_path_factory):
    """The tiny export resized to 32x32 by its config: every warm-up inference fails."""
    model = tmp_path_factory.mktemp("unservable") / "model"
    shutil.copytree(tiny_model_dir, model)
    cfg = yaml.safe_load((model / "infer_cfg.yml").read_text())
    cfg["input"]["size"] = [32, 32]
    (model / "infer_cfg.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return model


def _serve(model, port, *args, log):
    return subprocess.Popen(
        [sys.executable, "-m", "mlops", "serve", str(model), "--port", str(port), *args],
        stdout=log, stderr=subprocess.STDOUT, env=server_env(), cwd=ROOT)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_with_the_flag_the_reason_is_written_and_the_server_exits(unservable, tmp_path,
                                                                  workers):
    message = tmp_path / "termination-log"
    message.write_bytes(b"")  # the kubelet creates the file before the container starts
    with (tmp_path / "server.log").open("wb") as log:
        process = _serve(unservable, free_port(), "--workers", workers,
                         "--termination-log", str(message), log=log)
    try:
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    printed = (tmp_path / "server.log").read_text(errors="replace")
    assert code == ExitCode.CANNOT_SERVE == 9, printed
    text = message.read_text()
    assert text.startswith("warm-up inference failed: "), text
    assert "reshape" in text.lower(), text  # Paddle's own words on what is wrong
    assert len(message.read_bytes()) <= 4096  # what the kubelet keeps of it
    assert f"exiting with code 9: {text}" in printed


def test_without_the_flag_the_server_stays_live_and_never_ready(unservable, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "server.log").open("wb") as log:
        process = _serve(unservable, port, log=log)
    try:
        deadline = time.monotonic() + 300
        reason = None
        while reason is None and process.poll() is None and time.monotonic() < deadline:
            try:
                ready = requests.get(f"{url}/v2/health/ready", timeout=2)
                reason = ready.json().get("reason") if ready.status_code == 503 else None
            except requests.RequestException:
                pass
            time.sleep(0.2)
        assert process.poll() is None, (tmp_path / "server.log").read_text()
        assert reason and reason.startswith("warm-up inference failed"), reason
        assert requests.get(f"{url}/v2/health/live", timeout=5).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=60)
