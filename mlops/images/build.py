"""Build every image we ship, with podman, from the Dockerfiles a cluster user builds.

The images (:data:`IMAGES`): the tool images of `./Dockerfile`, one per extra; the
training base image (`--target training-base`, also tagged :data:`TRAINING_BASE`); each
example model repo's own `Dockerfile` FROM that base (`BASE_IMAGE`). The host's CA
bundle is mounted into each `RUN` for pip behind a TLS-intercepting proxy, never into a
layer; an image whose input digest (`mlops.images.context`) matches its label is not
built again. Why: docs/guides/images.md.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pathlib
import threading
import time
from typing import Callable, Sequence

from mlops.errors import UserError
from mlops.images.base import PYTHON_SLIM, ensure_base
from mlops.images.context import DIGEST_LABEL, KIT_LABEL, context_digest, paths_digest
from mlops.images.podman import Store, output_tail, require_tools

__all__ = ["IMAGES", "TRAINING_BASE", "ImageSpec", "build_after", "build_all", "build_argv",
           "select"]

#: Where the host keeps its CA bundle (Debian's ca-certificates), and where builds see it.
HOST_CA = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
#: Mounted over the base image's own bundle: Debian's (and the official python image's)
#: ca-certificates keep it there, so the mount adds no path to any layer.
CA_IN_BUILD = "/etc/ssl/certs/ca-certificates.crt"
PIP_CONF_IN_BUILD = "/etc/pip.conf"
TAG = "local"
#: The training base image as the resource templates name it (workflows/templates,
#: `image:`; the pipeline passes it to the build as BASE_IMAGE). The local build tags
#: its image with this name too, so a model repo builds here FROM what a cluster pulls.
TRAINING_BASE = "registry.example.com/mlops/training-base:0.1.0-cpu"


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
    target: str = ""              #: the Dockerfile's stage to build (`--target`)
    tags: tuple[str, ...] = ()    #: more names for the same image
    #: The key of the image this one is built FROM (passed as BASE_IMAGE): built first.
    base: str = ""
    #: Files (relative to the context) whose digest is labelled `KIT_LABEL`: what the images
    #: built FROM this one use of it (a change elsewhere leaves them valid).
    kit: tuple[str, ...] = ()


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
    ImageSpec("training-base", f"localhost/mlops/training-base:{TAG}", ".",
              build_args=(("PADDLE", "1"), ("EXTRA", "kit")), target="training-base",
              tags=(TRAINING_BASE,),
              # modelkit imports contracts and cogs (.importlinter); pyproject and the lock
              # its dependencies; the Dockerfile how they are installed
              kit=("Dockerfile", "pyproject.toml", "requirements.lock", "modelkit",
                   "contracts", "cogs"),
              role="training base image: PaddlePaddle and the kit (BASE_IMAGE of model repos)"),
    ImageSpec("shapes-detector", f"localhost/mlops/shapes-detector:{TAG}",
              "examples/shapes-detector", base="training-base",
              role="example training image (PaddleJob workers)"),
    ImageSpec("products-yolov3", f"localhost/mlops/products-yolov3:{TAG}",
              "examples/products-yolov3", base="training-base",
              role="example training image (PaddleJob workers)"),
)


def select(keys: Sequence[str]) -> list[ImageSpec]:
    """The images named by `keys` (all when empty), each after the base it is built FROM;
    an unknown key names the choices."""
    known = {spec.key: spec for spec in IMAGES}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise UserError(f"unknown image {', '.join(unknown)}: choose from "
                        f"{', '.join(known)}")
    wanted: dict[str, None] = {}

    def add(key: str) -> None:
        if known[key].base:
            add(known[key].base)
        wanted.setdefault(key)

    for key in keys or known:
        add(key)
    return [spec for spec in IMAGES if spec.key in wanted]


def build_arg_values(spec: ImageSpec) -> dict[str, str]:
    """The build arguments of `spec`, BASE_IMAGE included (its base's cluster name)."""
    args = dict(spec.build_args)
    if spec.base:
        base = next(s for s in IMAGES if s.key == spec.base)
        args["BASE_IMAGE"] = base.tags[0] if base.tags else base.name
    return args


def pip_conf(*, cert: bool = True) -> str:
    """The pip.conf mounted into builds: with `cert`, the mounted CA bundle (see the
    docstring); nothing else (no index, no wheels)."""
    return ("# Mounted by mlops images build, never copied into a layer.\n[global]\n"
            + (f"cert = {CA_IN_BUILD}\n" if cert else ""))


def podman_build_argv(context: pathlib.Path, dockerfile: pathlib.Path,
                      build_args: dict[str, str], names: Sequence[str], *,
                      ca: pathlib.Path | None, pip_conf_path: pathlib.Path | None,
                      digest: str = "", target: str = "", kit: str = "") -> list[str]:
    """`podman build` arguments (pure: nothing runs): the Dockerfile and context, the build
    arguments, the names, and this network's CA bundle with its pip.conf, read-only."""
    argv = ["build", "--pull=never", "--layers", "--network=host", "--format=oci",
            "--file", str(dockerfile)]
    for name in names:
        argv += ["--tag", name]
    if target:
        argv += ["--target", target]
    for name, value in build_args.items():
        argv += ["--build-arg", f"{name}={value}"]
    if ca is not None:
        argv += ["--volume", f"{ca}:{CA_IN_BUILD}:ro"]
    if pip_conf_path is not None:
        argv += ["--volume", f"{pip_conf_path}:{PIP_CONF_IN_BUILD}:ro"]
    if digest:
        argv += ["--label", f"{DIGEST_LABEL}={digest}"]
    if kit:
        argv += ["--label", f"{KIT_LABEL}={kit}"]
    return [*argv, str(context)]


def build_argv(spec: ImageSpec, root: pathlib.Path, *, ca: pathlib.Path | None,
               pip_conf_path: pathlib.Path | None, digest: str = "") -> list[str]:
    """`podman build` arguments for `spec` (pure: nothing runs); `digest` is labelled."""
    context = (root / spec.context).resolve()
    return podman_build_argv(context, context / spec.dockerfile, build_arg_values(spec),
                             [spec.name, *spec.tags], ca=ca, pip_conf_path=pip_conf_path,
                             digest=digest, target=spec.target, kit=kit_key(root, spec))


def kit_key(root: pathlib.Path, spec: ImageSpec) -> str:
    """The digest labelled `KIT_LABEL` on `spec`'s image ("" for an image without `kit`)."""
    if not spec.kit:
        return ""
    args = ",".join(f"{k}={v}" for k, v in sorted(build_arg_values(spec).items()))
    return paths_digest((root / spec.context).resolve(), spec.kit,
                        extra=f"target={spec.target};{args}")


def prepare_store(store: Store, ca: pathlib.Path | None,
                  log: Callable[[str], None]) -> tuple[pathlib.Path | None, pathlib.Path]:
    """The store's directories and its pip.conf; the CA bundle to mount (None if absent)."""
    require_tools("podman", "runc", "mmdebstrap")
    store.prepare()
    if ca is not None and not ca.is_file():
        log(f"images: no CA bundle at {ca}; builds use the base image's own certificates")
        ca = None
    conf = store.root / "pip.conf"
    if not conf.is_file() or conf.read_text() != pip_conf(cert=ca is not None):
        conf.write_text(pip_conf(cert=ca is not None))
    return ca, conf


def build_all(
    root: pathlib.Path,
    specs: Sequence[ImageSpec] = IMAGES,
    *,
    store: Store | None = None,
    ca: pathlib.Path | None = HOST_CA,
    log: Callable[[str], None] = print,
) -> dict[str, float]:
    """Make the base, then build `specs`, two at a time (`build_after` says in which order);
    returns seconds per image (and `base`). An image whose inputs did not change is not
    built again (0 s)."""
    store = store or Store()
    ca, conf = prepare_store(store, ca, log)
    for spec in specs:
        dockerfile = root / spec.context / spec.dockerfile
        if not dockerfile.is_file():
            raise UserError(f"{dockerfile}: no such Dockerfile (image {spec.key})")
    with open(store.root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per store (two test sessions)
        return _build(root, specs, store, ca, conf, log)


def build_after(specs: Sequence[ImageSpec]) -> dict[str, str | None]:
    """Which image each must wait for (pure): the image it is built FROM, else the first of
    its family, whose layers it reuses, else None. A family is the images of one Dockerfile
    (the project's: the git+libgomp1, dependency and paddlepaddle layers). `mlops images
    build` runs two builds side by side: the first of each family at once, the rest after
    it, so a shared layer is built once and the other build's downloads and layer commits
    fill the waits."""
    first: dict[object, str] = {}
    after: dict[str, str | None] = {}
    keys = {spec.key for spec in specs}
    for spec in specs:
        family = (spec.context, spec.dockerfile)
        after[spec.key] = spec.base if spec.base in keys else first.get(family)
        first.setdefault(family, spec.key)
    return after


def _from_image(spec: ImageSpec) -> str:
    """The image `spec`'s Dockerfile starts FROM: its base's, else the python base."""
    return build_arg_values(spec).get("BASE_IMAGE", PYTHON_SLIM.name)


def _digest(root: pathlib.Path, spec: ImageSpec, store: Store) -> str | None:
    """The digest of `spec`'s inputs; None while the image it starts FROM is missing."""
    base_id = store.image_id(_from_image(spec))
    if base_id is None:
        return None
    context = (root / spec.context).resolve()
    return context_digest(context, context / spec.dockerfile, build_arg_values(spec),
                          base_id=base_id, extra=f"target={spec.target}")


def _build(root: pathlib.Path, specs: Sequence[ImageSpec], store: Store,
           ca: pathlib.Path | None, conf: pathlib.Path,
           log: Callable[[str], None]) -> dict[str, float]:
    timings: dict[str, float] = {}
    after = build_after(specs)
    ready = threading.Condition()
    started: set[str] = set()
    done: set[str] = set()
    failed: list[BaseException] = []

    start = time.monotonic()
    made = ensure_base(store, log=log)
    timings["base"] = round(time.monotonic() - start, 1)
    log(f"images: base {PYTHON_SLIM.name} {'made' if made else 'up to date'} "
        f"({timings['base']} s)")

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
                timings[spec.key] = _build_one(root, spec, store, ca, conf, log)
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
    if any(timings[s.key] for s in specs):
        # The images a rebuild replaced (untagged, no child): ~1.4 GB for each source change
        # otherwise. The layers the current images are built on are their parents and stay.
        store.podman("image", "prune", "--force", check=False)
    return {key: timings[key] for key in ["base", *(s.key for s in specs)]}


def _build_one(root: pathlib.Path, spec: ImageSpec, store: Store, ca: pathlib.Path | None,
               conf: pathlib.Path, log: Callable[[str], None]) -> float:
    """Build one image unless its inputs did not change; its seconds (0 when not built)."""
    start = time.monotonic()
    digest = _digest(root, spec, store)
    if digest is None:
        raise UserError(f"image {spec.key}: {_from_image(spec)}, which it is built FROM, "
                        "is not in the store")
    labels = store.image_labels(spec.name)
    if labels is not None and labels.get(DIGEST_LABEL) == digest and \
            all(store.image_id(tag) == store.image_id(spec.name) for tag in spec.tags):
        log(f"images: {spec.name} up to date (inputs {digest[:12]})")
        return 0.0
    argv = build_argv(spec, root, ca=ca, pip_conf_path=conf, digest=digest)
    log(f"images: building {spec.name} from {os.path.join(spec.context, spec.dockerfile)}"
        + (f" --target {spec.target}" if spec.target else "")
        + "".join(f" --build-arg {k}={v}" for k, v in build_arg_values(spec).items()))
    proc = store.podman(*argv, check=False)
    if proc.returncode != 0:
        tail = output_tail(proc)
        raise UserError(f"building {spec.name} from {spec.context}/{spec.dockerfile} "
                        f"failed (podman exit {proc.returncode}):\n{tail}")
    seconds = round(time.monotonic() - start, 1)
    log(f"images: {spec.name} built ({seconds} s)")
    return max(seconds, 0.1)
