"""The project's own wheel, offered to the image builds as a pip `--find-links` directory.

A model repo's training image gets the model-repo kit the way a team gets it:
its `requirements.txt` says `paddle-mlops[kit]==<version>` and pip installs it
from the team's index. No index here has our distribution, so `mlops images
build` builds its wheel from this checkout into `<store>/wheelhouse/`, mounts
that directory read-only into every build (like the CA bundle: nothing of it
lands in a layer) and names it in the mounted pip.conf (`find-links`). The
Dockerfiles stay as a team writes them and build unchanged elsewhere.

Layer caching does not see a mounted directory (measured with podman 4.3:
a `RUN` that reads a changed mount is still taken from the cache), so the
wheel's digest travels as a label on each image that installs it, and an
image whose label differs is rebuilt without the cache (mlops/images/build.py).
The digest covers what a training image imports, the kit and contracts, and
pyproject.toml (its dependencies): a change elsewhere in the project does not
rebuild the training images.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Callable

from mlops.errors import UserError

__all__ = ["KIT_LABEL", "WHEELS_IN_BUILD", "ensure_wheelhouse", "kit_digest"]

KIT_LABEL = "org.paddle-mlops.kit"
WHEELS_IN_BUILD = "/mlops-wheels"
#: What a training image imports of ours (modelkit imports only contracts; .importlinter).
KIT_SOURCES = ("pyproject.toml", "modelkit", "contracts")
DIGEST_FILE = "SOURCE-DIGEST"


def kit_digest(root: pathlib.Path) -> str:
    """16 hex digits over the files of :data:`KIT_SOURCES` (paths and bytes, sorted)."""
    h = hashlib.sha256()
    for name in KIT_SOURCES:
        top = root / name
        files = [top] if top.is_file() else sorted(
            p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for path in files:
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _packages(root: pathlib.Path) -> list[pathlib.Path]:
    """The checkout's top-level packages (pyproject's `packages.find` picks among them)."""
    return sorted(p for p in root.iterdir() if (p / "__init__.py").is_file())


def ensure_wheelhouse(root: pathlib.Path, wheelhouse: pathlib.Path, *,
                      log: Callable[[str], None] = print) -> str:
    """Build the project's wheel into `wheelhouse` unless it holds one of the same digest;
    returns the digest. Built from a copy of the sources, so the checkout gets no `build/`
    or `*.egg-info`; pip fetches the build backend pyproject.toml names, as for any sdist."""
    digest = kit_digest(root)
    marker = wheelhouse / DIGEST_FILE
    if marker.is_file() and marker.read_text().strip() == digest and \
            any(wheelhouse.glob("paddle_mlops-*.whl")):
        return digest
    log(f"images: building the paddle-mlops wheel (kit {digest}) into {wheelhouse}")
    wheelhouse.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheelhouse.parent) as tmp:
        src, out = pathlib.Path(tmp) / "src", pathlib.Path(tmp) / "wheels"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(root / name, src / name)
        for package in _packages(root):
            shutil.copytree(package, src / package.name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # pyproject's build-system (setuptools, wheel) in pip's isolated build env
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                               "--wheel-dir", str(out), str(src)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise UserError(f"building the paddle-mlops wheel failed (pip exit "
                            f"{proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
        (out / DIGEST_FILE).write_text(digest + "\n")
        old = wheelhouse.with_name(wheelhouse.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if wheelhouse.exists():
            wheelhouse.rename(old)
        out.rename(wheelhouse)
        shutil.rmtree(old, ignore_errors=True)
    return digest
