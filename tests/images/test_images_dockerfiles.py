"""The Dockerfiles we ship, read statically (no podman): cheap guards beside the image tier."""

import pathlib
import re

import tomllib

from mlops.images.build import (
    CA_IN_BUILD,
    IMAGES,
    PIP_CONF_IN_BUILD,
    TRAINING_BASE,
    build_after,
    build_arg_values,
    build_argv,
    pip_conf,
    select,
)
from tests.rooms import ROOMS
from workflows.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILES = sorted([ROOT / "Dockerfile", *ROOT.glob("examples/*/Dockerfile")])


def _instructions(path):
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def _installs_paddle(path):
    """Whether the image gets paddlepaddle: named in a RUN, in a requirements file the
    Dockerfile copies, or through one of the project's extras that require it."""
    lines = _instructions(path)
    if any("paddlepaddle" in line for line in lines if line.startswith("RUN")):
        return True
    for line in lines:
        if line.startswith("COPY"):
            for name in line.split()[1:-1]:
                source = path.parent / name
                if source.is_file() and source.suffix == ".txt" and \
                        "paddlepaddle" in source.read_text():
                    return True
    if any(re.search(r"pip install .*\.\[", line) for line in lines):
        extras = tomllib.loads((path.parent / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]
        return any(dep.startswith("paddlepaddle") for deps in extras.values() for dep in deps)
    return False


def test_every_dockerfile_that_installs_paddlepaddle_installs_libgomp1():
    """paddlepaddle 3.3.1's libcommon.so and libdnnl.so.3 link libgomp.so.1 (GNU OpenMP),
    which python:3.11-slim does not have: `import paddle` then fails with `ImportError:
    libgomp.so.1`, and every training worker and model server built FROM it crash-loops
    (issue 25, defect 2). tests/images/test_images.py imports paddle in the built images; this
    catches a new Dockerfile without the package before any build. The model repos' images
    get both from the training base they start FROM (next test)."""
    with_paddle = [p for p in DOCKERFILES if _installs_paddle(p)]
    assert with_paddle == [ROOT / "Dockerfile"], with_paddle
    for path in with_paddle:
        assert any(re.search(r"apt-get install .*\blibgomp1\b", line)
                   for line in _instructions(path)), f"{path}: installs paddlepaddle without " \
                                                    "libgomp1"


def test_the_model_repos_start_from_the_training_base_the_pipeline_passes():
    """Issue 42, A1: both examples pinned `paddle-mlops[kit]==0.1.0`, which is on no public
    index, and the cluster's build-image gives BuildKit the repo's context and BASE_IMAGE
    only, so every push failed there. Now the kit comes in the training base image (the
    project's Dockerfile, `--target training-base`, EXTRA=kit), the examples start FROM
    `${BASE_IMAGE}` whose default is the templates' name for it, and their requirements
    name only public packages."""
    for path in DOCKERFILES:
        if path.parent == ROOT:
            continue
        lines = _instructions(path)
        assert lines[:2] == [f"ARG BASE_IMAGE={TRAINING_BASE}", "FROM ${BASE_IMAGE}"], path
        requirements = [line.split("#")[0].strip().lower() for line in
                        (path.parent / "requirements.txt").read_text().splitlines()]
        named = {re.split(r"[\[=<>~! ]", line)[0] for line in requirements if line}
        assert named and not named & {"paddle-mlops", "paddlepaddle"}, (path, named)
    for template in ("training-small", "training-medium"):
        assert load_template(template).image == TRAINING_BASE
    base = next(s for s in IMAGES if s.key == "training-base")
    assert base.target == "training-base" and dict(base.build_args)["EXTRA"] == "kit"
    assert TRAINING_BASE in base.tags
    stages = [line for line in _instructions(ROOT / "Dockerfile") if line.startswith("FROM")]
    assert stages == ["FROM python:3.11-slim AS training-base", "FROM training-base"]


def test_mlops_images_build_builds_every_dockerfile_we_ship():
    built = {(ROOT / spec.context / spec.dockerfile).resolve() for spec in IMAGES}
    assert built == {p.resolve() for p in DOCKERFILES}
    extras = {dict(spec.build_args).get("EXTRA") for spec in IMAGES if spec.context == "."}
    assert extras == {"train", "serve", "controller,ui", "kit"}
    # a model repo's image is built after the base it starts FROM, with its cluster name
    assert [s.key for s in select(["shapes-detector"])] == ["training-base", "shapes-detector"]
    assert build_arg_values(next(s for s in IMAGES if s.key == "shapes-detector")) == \
        {"BASE_IMAGE": TRAINING_BASE}


def test_the_ca_bundle_and_pip_conf_are_mounted_read_only_and_never_copied(tmp_path):
    spec = next(s for s in IMAGES if s.key == "serve")
    argv = build_argv(spec, ROOT, ca=pathlib.Path("/host/ca.crt"), pip_conf_path=tmp_path / "p")
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
    assert volumes == [f"/host/ca.crt:{CA_IN_BUILD}:ro", f"{tmp_path / 'p'}:{PIP_CONF_IN_BUILD}:ro"]
    assert "--pull=never" in argv and argv[-1] == str(ROOT)
    assert pip_conf().splitlines()[-1] == f"cert = {CA_IN_BUILD}"
    for path in DOCKERFILES:
        copied = " ".join(line for line in _instructions(path) if line.startswith(("COPY", "ADD")))
        assert "pip.conf" not in copied and ".crt" not in copied and "ssl" not in copied, path


def test_the_project_dockerfile_copies_every_package_the_distribution_ships():
    """The tool images are built from the source the Dockerfile COPYs: a room added to
    pyproject.toml's packages but not to the Dockerfile is missing from every image, and
    `mlops` (whose CLI imports every command module) fails to start there. The image
    tier found exactly that when `datapins/` was added. The distribution ships every room
    (tests/test_architecture.py checks pyproject's packages.find against them)."""
    packages = set(ROOMS)
    copied = {line.split()[1] for line in _instructions(ROOT / "Dockerfile")
              if line.startswith("COPY") and len(line.split()) == 3}
    assert packages <= copied, f"not copied into the images: {sorted(packages - copied)}"


def test_two_builds_side_by_side_never_build_a_shared_layer_twice():
    """`mlops images build` runs two builds at once; an image waits for the image it is built
    FROM, else for the first of its family, whose layers it reuses."""
    assert build_after(IMAGES) == {"train": None, "serve": "train", "controller": "train",
                                   "training-base": "train",
                                   "shapes-detector": "training-base",
                                   "products-yolov3": "training-base"}
    heads = {tuple(_instructions(ROOT / s.context / s.dockerfile)[:4]) for s in IMAGES if s.base}
    assert len(heads) == 1, heads
