"""Build every image we ship, with podman, from the Dockerfiles a cluster user builds.

The images (:data:`IMAGES`): the project's tool images from `./Dockerfile`,
one per `EXTRA` (train, serve, controller+ui), and each example model repo's
training image from its own `Dockerfile`, all unchanged. The base they name
is made locally first (`mlops.images.base`).

Behind a TLS-intercepting proxy (common in companies, and the case on the
machines this was written on) pip in a `RUN` step needs the host's CA bundle.
It is mounted, read-only, into each `RUN` over the image's own bundle, with
a pip.conf of our own whose `cert =` points at it (`podman build --volume`;
pip from PyPI reads certifi's bundle, not the system's): neither file's
content ever lands in a layer (buildah 1.28 leaves an empty `/etc/pip.conf`,
the mount point, in the first `RUN`'s layer). The pip.conf is written clean
(only `cert`), not copied from the host: a host's pip config may name local
wheel dirs and constraint files that mean nothing inside an image and would
make the build depend on this machine.

The model repos' training images install the model-repo kit
(`paddle-mlops[kit]` in their requirements.txt) from the project's own wheel,
which `mlops.images.wheelhouse` builds and this module mounts the same way,
read-only, with `find-links` in that pip.conf (the why and the cache rule
are in that module).

Layers are cached in the store (`--layers`), so a rebuild with nothing
changed takes seconds; a source change rebuilds only the layers after the
source `COPY`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import os
import pathlib
import threading
import time
from typing import Callable, Sequence

from mlops.errors import UserError
from mlops.images.base import PYTHON_SLIM, ensure_base
from mlops.images.podman import Store, require_tools
from mlops.images.wheelhouse import KIT_LABEL, WHEELS_IN_BUILD, ensure_wheelhouse

__all__ = ["IMAGES", "ImageSpec", "build_after", "build_all", "build_argv", "select"]

#: Where the host keeps its CA bundle (Debian's ca-certificates), and where builds see it.
HOST_CA = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
#: Mounted over the base image's own bundle: Debian's (and the official python image's)
#: ca-certificates keep it there, so the mount adds no path to any layer.
CA_IN_BUILD = "/etc/ssl/certs/ca-certificates.crt"
PIP_CONF_IN_BUILD = "/etc/pip.conf"
TAG = "local"


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """One image: its name, and the Dockerfile and context it is built from."""

    key: str                      #: short name (`mlops images build --only KEY`)
    name: str                     #: full image name with tag
    context: str                  #: build context, relative to the project root
    dockerfile: str = "Dockerfile"  # relative to the context
    build_args: tuple[tuple[str, str], ...] = ()
    #: What runs in it in a cluster (shown by `mlops images list`).
    role: str = ""
    #: Installs `paddle-mlops[kit]` (a model repo's training image): gets the wheelhouse.
    kit: bool = False


IMAGES: tuple[ImageSpec, ...] = (
    # PADDLE=1: PaddlePaddle in a layer of its own, shared by train and serve (./Dockerfile)
    ImageSpec("train", f"localhost/mlops/train:{TAG}", ".",
              build_args=(("PADDLE", "1"), ("EXTRA", "train")),
              role="pipeline tool steps: evaluate, gate, publish-model, propose"),
    ImageSpec("serve", f"localhost/mlops/serve:{TAG}", ".",
              build_args=(("PADDLE", "1"), ("EXTRA", "serve")),
              role="model servers (mlops serve), the serving Deployments"),
    ImageSpec("controller", f"localhost/mlops/controller:{TAG}", ".",
              build_args=(("EXTRA", "controller,ui"),),
              role="promotion controller and web UI (mlops controller run, mlops ui)"),
    ImageSpec("shapes-detector", f"localhost/mlops/shapes-detector:{TAG}",
              "examples/shapes-detector", role="example training image (PaddleJob workers)",
              kit=True),
    ImageSpec("products-yolov3", f"localhost/mlops/products-yolov3:{TAG}",
              "examples/products-yolov3", role="example training image (PaddleJob workers)",
              kit=True),
)


def select(keys: Sequence[str]) -> list[ImageSpec]:
    """The images named by `keys` (all when empty); an unknown key names the choices."""
    if not keys:
        return list(IMAGES)
    known = {spec.key: spec for spec in IMAGES}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise UserError(f"unknown image {', '.join(unknown)}: choose from "
                        f"{', '.join(known)}")
    return [known[k] for k in dict.fromkeys(keys)]


def pip_conf(*, cert: bool = True) -> str:
    """The pip.conf mounted into builds: the mounted wheelhouse and, with `cert`, the mounted
    CA bundle (see the docstring)."""
    return ("# Mounted by mlops images build, never copied into a layer.\n"
            f"[global]\nfind-links = {WHEELS_IN_BUILD}\n"
            + (f"cert = {CA_IN_BUILD}\n" if cert else ""))


def build_argv(spec: ImageSpec, root: pathlib.Path, *, ca: pathlib.Path | None,
               pip_conf_path: pathlib.Path | None, wheelhouse: pathlib.Path | None = None,
               kit: str = "", no_cache: bool = False) -> list[str]:
    """`podman build` arguments for `spec` (pure: nothing runs); `kit` is the wheel's digest,
    labelled on an image that installs it."""
    context = (root / spec.context).resolve()
    argv = ["build", "--pull=never", "--layers", "--network=host", "--format=oci",
            "--file", str(context / spec.dockerfile), "--tag", spec.name]
    for name, value in spec.build_args:
        argv += ["--build-arg", f"{name}={value}"]
    if ca is not None:
        argv += ["--volume", f"{ca}:{CA_IN_BUILD}:ro"]
    if pip_conf_path is not None:
        argv += ["--volume", f"{pip_conf_path}:{PIP_CONF_IN_BUILD}:ro"]
    if wheelhouse is not None:
        argv += ["--volume", f"{wheelhouse}:{WHEELS_IN_BUILD}:ro"]
    if kit:
        argv += ["--label", f"{KIT_LABEL}={kit}"]
    if no_cache:
        argv.append("--no-cache")
    return [*argv, str(context)]


def build_all(
    root: pathlib.Path,
    specs: Sequence[ImageSpec] = IMAGES,
    *,
    store: Store | None = None,
    ca: pathlib.Path | None = HOST_CA,
    log: Callable[[str], None] = print,
) -> dict[str, float]:
    """Make the base, then build `specs`, two at a time (`build_after` says in which order);
    returns seconds per image (and `base`)."""
    require_tools("podman", "runc", "mmdebstrap")
    store = store or Store()
    store.prepare()
    for spec in specs:
        dockerfile = root / spec.context / spec.dockerfile
        if not dockerfile.is_file():
            raise UserError(f"{dockerfile}: no such Dockerfile (image {spec.key})")
    if ca is not None and not ca.is_file():
        log(f"images: no CA bundle at {ca}; builds use the base image's own certificates")
        ca = None
    conf = store.root / "pip.conf"
    if not conf.is_file() or conf.read_text() != pip_conf(cert=ca is not None):
        conf.write_text(pip_conf(cert=ca is not None))
    with open(store.root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per store (two test sessions)
        return _build(root, specs, store, ca, conf, log)


def build_after(specs: Sequence[ImageSpec]) -> dict[str, str | None]:
    """Which image each must wait for (pure): the first of its family, whose layers it
    reuses, else None. A family is the images of one Dockerfile (the project's: the
    git+libgomp1, dependency and paddlepaddle layers) or the model repos' images (their
    libgomp1 layer, the same instruction on the same base). `mlops images build` runs
    two builds side by side: the first of each family at once, the rest after it, so a
    shared layer is built once and the other build's downloads and layer commits fill the
    waits."""
    first: dict[object, str] = {}
    after: dict[str, str | None] = {}
    for spec in specs:
        family = "kit" if spec.kit else (spec.context, spec.dockerfile)
        after[spec.key] = first.get(family)
        first.setdefault(family, spec.key)
    return after


def _build(root: pathlib.Path, specs: Sequence[ImageSpec], store: Store,
           ca: pathlib.Path | None, conf: pathlib.Path,
           log: Callable[[str], None]) -> dict[str, float]:
    timings: dict[str, float] = {}
    wheelhouse = store.root / "wheelhouse"
    after = build_after(specs)
    ready = threading.Condition()
    started: set[str] = set()
    done: set[str] = set()
    failed: list[BaseException] = []

    # the wheel (~20 s when the kit changed) while the base is made or checked
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        wheel = (pool.submit(ensure_wheelhouse, root, wheelhouse, log=log)
                 if any(s.kit for s in specs) else None)
        start = time.monotonic()
        made = ensure_base(store, log=log)
        timings["base"] = round(time.monotonic() - start, 1)
        log(f"images: base {PYTHON_SLIM.name} {'made' if made else 'up to date'} "
            f"({timings['base']} s)")
        kit = wheel.result() if wheel is not None else ""

    def next_spec() -> ImageSpec | None:
        with ready:
            while not failed and len(started) < len(specs):
                spec = next((s for s in specs if s.key not in started
                             and after[s.key] in (None, *done)), None)
                if spec is not None:
                    started.add(spec.key)
                    return spec
                ready.wait()
            return None

    def worker() -> None:
        while (spec := next_spec()) is not None:
            try:
                timings[spec.key] = _build_one(root, spec, store, ca, conf, wheelhouse,
                                               kit if spec.kit else "", log)
            except BaseException as exc:
                with ready:
                    failed.append(exc)
                    ready.notify_all()
                return
            with ready:
                done.add(spec.key)
                ready.notify_all()

    threads = [threading.Thread(target=worker, name=f"images-build-{i}") for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    # The images a rebuild replaced (untagged, no child): ~1.4 GB for each source change
    # otherwise. The layers the current images are built on are their parents and stay.
    store.podman("image", "prune", "--force", check=False)
    return {key: timings[key] for key in ["base", *(s.key for s in specs)]}


def _build_one(root: pathlib.Path, spec: ImageSpec, store: Store, ca: pathlib.Path | None,
               conf: pathlib.Path, wheelhouse: pathlib.Path, kit: str,
               log: Callable[[str], None]) -> float:
    """Build one image; its seconds."""
    start = time.monotonic()
    stale = spec.kit and _kit_label(store, spec) not in (None, kit)
    if stale:
        log(f"images: {spec.name} holds another paddle-mlops wheel; rebuilding it "
            "without the layer cache (a cached RUN cannot see the mounted wheel change)")
    argv = build_argv(spec, root, ca=ca, pip_conf_path=conf, wheelhouse=wheelhouse,
                      kit=kit if spec.kit else "", no_cache=stale)
    log(f"images: building {spec.name} from {os.path.join(spec.context, spec.dockerfile)}"
        + "".join(f" --build-arg {k}={v}" for k, v in spec.build_args))
    proc = store.podman(*argv, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise UserError(f"building {spec.name} from {spec.context}/{spec.dockerfile} "
                        f"failed (podman exit {proc.returncode}):\n{tail}")
    seconds = round(time.monotonic() - start, 1)
    log(f"images: {spec.name} built ({seconds} s)")
    return seconds


def _kit_label(store: Store, spec: ImageSpec) -> str | None:
    """The kit digest `spec`'s image was built with ("" if none); None when there is no image."""
    labels = store.image_labels(spec.name)
    return None if labels is None else labels.get(KIT_LABEL, "")
