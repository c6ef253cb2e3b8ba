"""Run rendered pods in the images we built: the kubelet's part, with podman (thin I/O).

What to run comes from the rendered manifests, translated by
`mlops.images.podrun` (pure). What is left here is what the kubelet does
around it: give a writable claim to the pod's `fsGroup` (it chowns the
volume to that group, group-writable, setgid on directories:
kubernetes/kubernetes `pkg/volume/volume_linux.go`, `SetVolumeOwnership`),
start the container, probe it, stop it. A PaddleJob's workers are started by
the same executor as the local stand-in's (`workflows.paddlejob_local`), each
worker a `podman run` of its container with paddle-operator's env.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import time
import urllib.error
import urllib.request
from typing import IO, Any, Mapping, Sequence

from cogs.ports import free_port
from mlops.images.podman import Store
from mlops.images.podrun import podman_run_argv
from workflows import paddlejob_local

__all__ = ["Running", "give_to_fs_group", "paddlejob_workers", "run_paddlejob_in_containers",
           "start"]


def give_to_fs_group(path: pathlib.Path, gid: int) -> None:
    """What the kubelet does to a writable volume of a pod with `fsGroup: gid`."""
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            _own(pathlib.Path(root) / name, gid)
    _own(path, gid)


def _own(path: pathlib.Path, gid: int) -> None:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return
    os.chown(path, -1, gid)
    mode = st.st_mode | stat.S_IRGRP | stat.S_IWGRP
    if stat.S_ISDIR(st.st_mode):
        mode |= stat.S_IXGRP | stat.S_ISGID
    os.chmod(path, stat.S_IMODE(mode))


def paddlejob_workers(
    manifest: Mapping[str, Any], *, image: str, workspace: pathlib.Path, store: Store,
    name: str,
) -> list[paddlejob_local.WorkerSpec]:
    """One `podman run` per worker of a rendered PaddleJob, on the host network.

    The env of each is the container's plus the operator's
    (`paddlejob_local.worker_specs`, nothing from this machine's env); its
    workspace claim is `workspace`. Pod IPs are loopback addresses as in the
    stand-in: with `--network=host` the containers share the host's loopback.
    """
    specs = paddlejob_local.worker_specs(manifest, port=free_port(),
                                         base_env={})
    pod = manifest["spec"]["worker"]["template"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes") or []
                 if "persistentVolumeClaim" in v)
    out = []
    for spec in specs:
        argv = podman_run_argv(pod, image=image, name=f"{name}-worker-{spec.index}",
                               source=f"PaddleJob {name} worker {spec.index}",
                               claims={claim: str(workspace)}, network="host", env=spec.env)
        out.append(paddlejob_local.WorkerSpec(index=spec.index, argv=["podman", *argv],
                                              env=store.env(), cwd=str(store.root)))
    return out


def run_paddlejob_in_containers(workers: Sequence[paddlejob_local.WorkerSpec], log: IO[bytes],
                                *, store: Store, name: str, timeout: float) -> float:
    """Run the workers with the stand-in's executor; containers left behind are removed."""
    names = [w.argv[w.argv.index("--name") + 1] for w in workers]
    store.remove_containers(names)
    try:
        return paddlejob_local.run_paddlejob(workers, log, name=name, timeout=timeout)
    finally:
        store.remove_containers(names)


class Running:
    """A container started in the background (`podman run --rm`), stopped by `stop()`."""

    def __init__(self, store: Store, argv: Sequence[str], log: pathlib.Path) -> None:
        self.store = store
        self.name = argv[argv.index("--name") + 1]
        store.remove_containers([self.name])
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(["podman", *argv], env=store.env(), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_http(self, url: str, *, timeout: float, period: float = 0.5) -> int:
        """Poll `url` (a readiness probe) until it answers 2xx; its status, or an error."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"container {self.name} exited with {self.proc.returncode} "
                                   f"before {url} answered:\n{self.output()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if 200 <= resp.status < 300:
                        return int(resp.status)
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(period)
        raise TimeoutError(f"{url} not ready after {timeout:.0f} s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        """What the container printed so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        """SIGTERM (the pod's termination), then remove; returns the exit code."""
        if self.proc.poll() is None:
            self.store.podman("stop", "--time", "10", self.name, check=False)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.store.remove_containers([self.name])
        self._log.close()
        return self.proc.returncode


def start(store: Store, argv: Sequence[str], log: pathlib.Path) -> Running:
    """Start `podman ARGV` (a `run`) in the background."""
    return Running(store, argv, log)
