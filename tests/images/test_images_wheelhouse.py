"""How the model repos' training images get the kit (mlops/images/wheelhouse.py), read statically.

The build itself (the wheel installed from the mounted wheelhouse, `import modelkit`
in the image) is exercised by tests/images/test_images.py's smoke PaddleJob, whose
train.py imports the kit in two worker containers.
"""

import pathlib
import shutil

import tomllib

from mlops.images.build import IMAGES, PIP_CONF_IN_BUILD, build_argv, pip_conf
from mlops.images.wheelhouse import KIT_LABEL, WHEELS_IN_BUILD, kit_digest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_digest_follows_what_a_training_image_imports_and_nothing_else(tmp_path):
    """A change to modelkit/ or contracts/ must reach the images (they are rebuilt); a change
    to the pipeline's rooms must not cost a rebuild of every training image."""
    for name in ("pyproject.toml", "modelkit", "contracts", "mlops"):
        source = ROOT / name
        if source.is_file():
            shutil.copy(source, tmp_path / name)
        else:
            shutil.copytree(source, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
    before = kit_digest(tmp_path)
    (tmp_path / "mlops" / "cli.py").write_text("changed = True\n")
    assert kit_digest(tmp_path) == before
    (tmp_path / "modelkit" / "loop.py").write_text("changed = True\n")
    after_kit = kit_digest(tmp_path)
    assert after_kit != before
    (tmp_path / "contracts" / "artifact.py").write_text("changed = True\n")
    assert kit_digest(tmp_path) != after_kit


def test_a_training_image_build_mounts_the_wheelhouse_and_carries_the_kit_label(tmp_path):
    spec = next(s for s in IMAGES if s.key == "shapes-detector")
    assert spec.kit and {s.key for s in IMAGES if s.kit} == {"shapes-detector",
                                                             "products-yolov3"}
    argv = build_argv(spec, ROOT, ca=None, pip_conf_path=tmp_path / "pip.conf",
                      wheelhouse=tmp_path / "wheels", kit="0123abcd", no_cache=True)
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
    assert volumes == [f"{tmp_path / 'pip.conf'}:{PIP_CONF_IN_BUILD}:ro",
                       f"{tmp_path / 'wheels'}:{WHEELS_IN_BUILD}:ro"]
    assert argv[argv.index("--label") + 1] == f"{KIT_LABEL}=0123abcd"
    assert "--no-cache" in argv and argv[-1] == str(ROOT / "examples" / "shapes-detector")
    plain = build_argv(spec, ROOT, ca=None, pip_conf_path=None)
    assert "--label" not in plain and "--no-cache" not in plain


def test_pip_finds_the_wheelhouse_with_or_without_a_ca_bundle():
    assert f"find-links = {WHEELS_IN_BUILD}" in pip_conf(cert=False).splitlines()
    assert "cert" not in pip_conf(cert=False)
    assert f"find-links = {WHEELS_IN_BUILD}" in pip_conf().splitlines()


def test_each_example_installs_the_kit_from_its_requirements():
    """The kit reaches a training image the way a team's repo names it, not by a COPY of
    the project (a Dockerfile builds from the model repo alone), at the project's version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for spec in (s for s in IMAGES if s.kit):
        lines = (ROOT / spec.context / "requirements.txt").read_text().splitlines()
        assert f"paddle-mlops[kit]=={version}" in lines, spec.context
