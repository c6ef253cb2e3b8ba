"""A rendered pod's container as a `podman run` command line (pure: nothing runs).

What the kubelet does with container `c` of a pod spec, translated: command and args
(`$(VAR)` expanded by the kubelet's rule), env and Secrets the caller passes, the
security context, `emptyDir` and claim volumes, ports; resource limits are not applied.
The image tier (`tests/images/test_images.py`) and `mlops.images.runner` run the result
for real. Errors name the source and the field (:class:`PodRunError`). Each translation:
docs/guides/images.md.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any, Mapping, Sequence

from cogs.containers import ContainerSpecError, container_env, expand_refs
from mlops.errors import UserError

__all__ = ["PodRunError", "container_of", "podman_run_argv", "tmpfs_size"]

_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")


class PodRunError(UserError):
    """The container cannot be run as written; the message names the source and field."""


def container_of(pod: Mapping[str, Any], name: str | None, source: str) -> Mapping[str, Any]:
    """Container `name` of the pod spec (the first when `name` is None)."""
    containers = pod.get("containers") or []
    for container in containers:
        if name is None or container.get("name") == name:
            return dict(container)
    raise PodRunError(f"{source}: containers has no {name or 'container'!r}")


def tmpfs_size(quantity: str, source: str) -> str:
    """A Kubernetes quantity (`1Gi`, `512Mi`, `1G`) as a tmpfs size in bytes."""
    match = _QUANTITY.match(str(quantity))
    if not match:
        raise PodRunError(f"{source}: sizeLimit {quantity!r} is not a quantity this runner "
                          "reads (use e.g. 512Mi or 1Gi)")
    factor = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10,
              "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[match.group(2)]
    return str(int(match.group(1)) * factor)


def _security(pod: Mapping[str, Any], container: Mapping[str, Any],
              source: str) -> list[str]:
    pod_sc = pod.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    merged = {**pod_sc, **sc}  # the container's settings win (Kubernetes' rule)
    argv: list[str] = []
    user, group = merged.get("runAsUser"), merged.get("runAsGroup")
    if merged.get("runAsNonRoot") and user == 0:
        raise PodRunError(f"{source}: securityContext.runAsNonRoot is true but runAsUser is 0")
    if user is not None:
        argv += ["--user", f"{user}:{group}" if group is not None else str(user)]
    elif group is not None:
        raise PodRunError(f"{source}: securityContext.runAsGroup without runAsUser is not "
                          "translated (podman sets a group only with a user)")
    if pod_sc.get("fsGroup") is not None:
        argv += ["--group-add", str(pod_sc["fsGroup"])]
    for gid in pod_sc.get("supplementalGroups") or []:
        argv += ["--group-add", str(gid)]
    if sc.get("privileged"):
        raise PodRunError(f"{source}: securityContext.privileged is not run here")
    if sc.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    caps = sc.get("capabilities") or {}
    argv += [f"--cap-drop={c.lower()}" for c in caps.get("drop") or []]
    argv += [f"--cap-add={c.lower()}" for c in caps.get("add") or []]
    seccomp = (merged.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        argv += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise PodRunError(f"{source}: securityContext.seccompProfile.type {seccomp!r}: only "
                          "RuntimeDefault and Unconfined run here")
    return argv


def _volumes(pod: Mapping[str, Any], container: Mapping[str, Any], claims: Mapping[str, str],
             source: str) -> list[str]:
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    argv: list[str] = []
    for i, mount in enumerate(container.get("volumeMounts") or []):
        field = f"{source}: volumeMounts[{i}]"
        volume = volumes.get(mount.get("name"))
        if volume is None:
            raise PodRunError(f"{field}: volume {mount.get('name')!r} is not in the pod's "
                              "volumes")
        path = str(mount["mountPath"])
        if "emptyDir" in volume:
            size = (volume.get("emptyDir") or {}).get("sizeLimit")
            # an emptyDir is world-writable (0777) and not noexec, as the kubelet makes it
            options = ["rw", "exec", "nosuid", "nodev", "mode=1777"]
            if size:
                options.append(f"size={tmpfs_size(size, field)}")
            argv += ["--tmpfs", f"{path}:{','.join(options)}"]
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
            if claim not in claims:
                raise PodRunError(f"{field}: claim {claim!r} (volume {mount.get('name')!r}) "
                                  "has no directory here; map it with claims=")
            host = claims[claim].rstrip("/")
            if mount.get("subPath"):
                host = f"{host}/{mount['subPath']}"
                _make_sub_path(pathlib.Path(host))
            read_only = bool(mount.get("readOnly") or volume["persistentVolumeClaim"].get(
                "readOnly"))
            argv += ["--volume", f"{host}:{path}:{'ro' if read_only else 'rw'}"]
        else:
            kinds = ", ".join(k for k in volume if k != "name")
            raise PodRunError(f"{field}: volume {mount.get('name')!r} is a {kinds}; only "
                              "emptyDir and persistentVolumeClaim are run here")
    return argv


def _make_sub_path(path: pathlib.Path) -> None:
    """A subPath that does not exist yet is made, as the kubelet makes one (kubernetes:
    pkg/volume/util/subpath/subpath_linux.go, doSafeMakeDir); podman refuses a missing
    source ("statfs ...: no such file or directory"). It is as writable as the folder it
    is in (the pipeline's checkout makes the pod's own output folders so in a cluster)."""
    if path.exists():
        return
    path.mkdir(parents=True)
    path.chmod(path.parent.stat().st_mode & 0o7777)


def podman_run_argv(
    pod: Mapping[str, Any],
    *,
    image: str,
    name: str,
    source: str,
    container_name: str | None = None,
    claims: Mapping[str, str] | None = None,
    network: str = "none",
    publish: Mapping[int, int] | None = None,
    secrets: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    extra_volumes: Sequence[str] = (),
) -> list[str]:
    """`podman run` arguments (after `podman`) for one container of `pod` (a pod spec).

    `env`, when given, is the whole environment (the PaddleJob runner passes
    the container's env plus the operator's); else the container's own env.
    `extra_args` are appended to the container's args (a local run's
    `--once`); `extra_volumes` are `--volume` values for what a cluster
    reaches over the network (a GitOps repo's URL here is a mounted path).
    """
    container = container_of(pod, container_name, source)
    field = f"{source}: container {container.get('name')!r}"
    try:  # the container's env as the kubelet builds it (cogs.containers, the one translator)
        environment = dict(env) if env is not None else container_env(
            container, source=field, secrets=secrets or {})
    except ContainerSpecError as exc:
        raise PodRunError(str(exc)) from None
    command = [expand_refs(str(c), environment) for c in container.get("command") or []]
    args = [expand_refs(str(a), environment) for a in container.get("args") or []]
    argv = ["run", "--rm", "--pull=never", "--name", name, f"--network={network}",
            *_security(pod, container, field)]
    argv += _volumes(pod, container, claims or {}, field)
    argv += [a for v in extra_volumes for a in ("--volume", v)]
    for key, value in environment.items():
        argv += ["--env", f"{key}={value}"]
    if container.get("workingDir"):
        argv += ["--workdir", str(container["workingDir"])]
    if network != "host":
        declared = {int(p["containerPort"]) for p in container.get("ports") or []}
        for container_port, host_port in (publish or {}).items():
            if container_port not in declared:
                raise PodRunError(f"{field}: port {container_port} is not among its "
                                  f"containerPorts {sorted(declared)}")
            argv += ["--publish", f"127.0.0.1:{host_port}:{container_port}"]
    if command:
        argv += ["--entrypoint", json.dumps(command)]
    return [*argv, image, *args, *extra_args]
