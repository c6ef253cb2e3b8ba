"""The pipeline's build-image step on one machine: the model repo's Dockerfile, built with podman.

The same inputs as the cluster's BuildKit step (`workflows.pipeline.BUILD_SCRIPT`), read
from the rendered step: the repo's `Dockerfile` and context and its build arguments
(`BASE_IMAGE`). The image stays in the local store; `BASE_IMAGE` comes from the store,
the project's training base built or found current first (`_ensure_base`); an image
whose inputs (`mlops.images.context`) are unchanged is used again. Why, and what
differs from the cluster: docs/guides/images.md.
"""

from __future__ import annotations

import pathlib
import re
import time
from typing import Callable, Mapping

from mlops.errors import UserError
from mlops.images.build import (
    HOST_CA,
    IMAGES,
    build_all,
    kit_key,
    podman_build_argv,
    prepare_store,
)
from mlops.images.context import KIT_LABEL, context_digest
from mlops.images.podman import Store, output_tail

__all__ = ["MODES", "MODE_ENV", "StepBuild", "build_args_of", "build_for_step",
           "step_builder"]

#: Where the project checkout is (to build the training base): this installation's.
ROOT = pathlib.Path(__file__).resolve().parents[2]
_BUILD_ARG = re.compile(r'--opt build-arg:([A-Za-z_][A-Za-z0-9_]*)="\$([A-Za-z_][A-Za-z0-9_]*)"')
_CONTEXT = re.compile(r'--local (context|dockerfile)="\$([A-Za-z_][A-Za-z0-9_]*)"')


class StepBuild:
    """What one build produced: the local image's name and whether it was built now."""

    def __init__(self, image: str, built: bool, digest: str, seconds: float) -> None:
        self.image, self.built, self.digest, self.seconds = image, built, digest, seconds


def build_args_of(script: str, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(build arguments, the env name of the context) the cluster's build script passes
    (pure). The context and the Dockerfile's directory must be the same env path, as in
    `workflows.pipeline.BUILD_SCRIPT`; a script this stand-in cannot read is an error."""
    locals_ = dict(_CONTEXT.findall(script))
    if set(locals_) != {"context", "dockerfile"} or len(set(locals_.values())) != 1:
        raise UserError("build-image: the step's script does not build `--local context` "
                        "and `--local dockerfile` from one checkout; the local build cannot "
                        "act it out")
    args = {}
    for name, var in _BUILD_ARG.findall(script):
        if var not in env:
            raise UserError(f"build-image: build argument {name} reads ${var}, which the "
                            "step's env does not set")
        args[name] = env[var]
    return args, locals_["context"]


def _local_name(env: Mapping[str, str], digest: str) -> str:
    """The local image's name: the repository the cluster pushes to (`$IMAGE`, its last
    part) under `localhost/`, tagged with the inputs' digest."""
    repository = env.get("IMAGE", "model-train").rsplit("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    last = last.rsplit(":", 1)[0] if ":" in last else last
    return f"localhost/mlops/{last}:{digest[:16]}"


def _ensure_base(name: str, store: Store, log: Callable[[str], None]) -> str:
    """What the model image's digest keys its base on. The project's training base: built
    unless the store's carries the current kit (`KIT_LABEL`: the kit, what it imports, the
    dependencies; a change to serving or the controller leaves a training image valid), and
    keyed on that kit digest, so its rebuild for another reason (`mlops images build`, the
    image tier) does not rebuild every model image. Another base must already be in the
    store, keyed on its ID."""
    ours = [spec for spec in IMAGES if name in (spec.name, *spec.tags)]
    if ours and (ROOT / "Dockerfile").is_file():
        spec = ours[0]
        kit = kit_key(ROOT, spec)
        labels = store.image_labels(name) or {}
        if not kit or labels.get(KIT_LABEL) != kit:
            log(f"build-image: making the training base {name} (mlops images build "
                f"--only {spec.key})")
            build_all(ROOT, [spec], store=store, log=log)
        if kit:
            return f"kit:{kit}"
    image_id = store.image_id(name)
    if image_id is None:
        raise UserError(
            f"build-image: the base image {name} (BASE_IMAGE) is not in the local store, and "
            "no registry is pulled from here; build it (mlops images build --only "
            "training-base, for the project's training base) or load it with podman")
    return image_id


def build_for_step(env: Mapping[str, str], script: str, *, store: Store | None = None,
                   log: Callable[[str], None] = print) -> StepBuild:
    """Build the image the step `script` builds in the cluster, with podman, from `env`'s
    checkout (the step's env, its paths mapped to this machine's); see the docstring."""
    args, context_var = build_args_of(script, env)
    context = pathlib.Path(env[context_var])
    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        raise UserError(f"build-image: {context} has no Dockerfile at its root; the cluster's "
                        "build (BuildKit on the checkout) fails the same way")
    store = store or Store()
    ca, conf = prepare_store(store, HOST_CA, log)
    start = time.monotonic()
    base_id = _ensure_base(args["BASE_IMAGE"], store, log) if "BASE_IMAGE" in args else ""
    digest = context_digest(context, dockerfile, args, base_id=base_id)
    name = _local_name(env, digest)
    if store.image_id(name) is not None:
        log(f"build-image: {name} is built from these very inputs already (Dockerfile, "
            f"build arguments, base, context as .dockerignore leaves it): not built again")
        return StepBuild(name, False, digest, round(time.monotonic() - start, 2))
    log("build-image: podman build " + " ".join(
        [f"--build-arg {k}={v}" for k, v in args.items()] + [f"--file {dockerfile}",
                                                             str(context)]))
    argv = podman_build_argv(context, dockerfile, args, [name], ca=ca, pip_conf_path=conf,
                             digest=digest)
    proc = store.podman(*argv, check=False)
    if proc.returncode != 0:
        tail = output_tail(proc)
        raise UserError(f"build-image: building {dockerfile} failed (podman exit "
                        f"{proc.returncode}), as it would in the cluster:\n{tail}")
    seconds = round(time.monotonic() - start, 2)
    log(f"build-image: built {name} ({seconds} s)")
    _prune(store, name)
    return StepBuild(name, True, digest, seconds)


#: The images of one model repo the store keeps (each another set of build inputs).
KEEP = 5


def _prune(store: Store, name: str) -> None:
    """Untag all but the newest KEEP images of `name`'s repository (podman's own prune then
    frees their layers): each change of a repo's Dockerfile, requirements or code makes one."""
    repository = name.rsplit(":", 1)[0]
    proc = store.podman("images", "--filter", f"reference={repository}", "--sort", "created",
                        "--format", "{{.Repository}}:{{.Tag}}", check=False)
    names = [line for line in proc.stdout.split() if line and line != name]
    # newest first (`--sort created` lists the newest first)
    stale = names[KEEP - 1:]
    if stale:
        store.podman("rmi", "--force", *stale, check=False)


#: `mlops run`'s choice (`--image-build`, else this variable): `auto` builds with podman when
#: it is installed, `podman` requires it, `record` keeps the stand-in (an environment digest).
MODE_ENV = "MLOPS_IMAGE_BUILD"
MODES = ("auto", "podman", "record")


Builder = Callable[[Mapping[str, str], str, Callable[[str], None]], str]


def step_builder(mode: str) -> Builder | None:
    """The local runner's image builder for `mode` (see :data:`MODE_ENV`); None: the stand-in."""
    from mlops.images.podman import PodmanMissing, require_tools

    if mode not in MODES:
        raise UserError(f"{MODE_ENV}={mode!r}: choose one of {', '.join(MODES)}")
    if mode == "record":
        return None
    try:
        require_tools("podman", "runc", "mmdebstrap")
    except PodmanMissing:
        if mode == "podman":
            raise
        return None

    def build(env: Mapping[str, str], script: str, log: Callable[[str], None]) -> str:
        return build_for_step(env, script, log=log).image

    return build
