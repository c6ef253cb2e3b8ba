"""The base image our Dockerfiles name (`python:3.11-slim`), made here from Debian packages.

No registry is reachable from the machines this runs on, so `FROM
python:3.11-slim` must resolve to an image already in the store. We make one
with `mmdebstrap` from Debian bookworm (whose `python3` is 3.11, as the
official image's) using the mirrors this machine's apt already uses, import
it and tag it `docker.io/library/python:3.11-slim`, the name a short `FROM
python:3.11-slim` resolves to. Like the official image, `pip install`
works system-wide (Debian's `EXTERNALLY-MANAGED` marker is removed) and the
image's command is `python3`; like it, it lacks `libgomp1`, which is why the
Dockerfiles that install paddlepaddle install that package themselves.

The image carries a label with the digest of what made it (suite, package
list, apt sources); an unchanged digest skips the ~1 minute rebuild.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import subprocess
from typing import Callable

from mlops.errors import UserError
from mlops.images.podman import Store

__all__ = ["BaseImage", "PYTHON_SLIM", "ensure_base"]

KEY_LABEL = "org.paddle-mlops.base-key"
APT_SOURCES = pathlib.Path("/etc/apt/sources.list.d/debian.sources")


@dataclasses.dataclass(frozen=True)
class BaseImage:
    """What to bootstrap and which name to give it."""

    name: str
    suite: str
    packages: tuple[str, ...]
    #: The official image's settings, as `podman import --change` instructions.
    changes: tuple[str, ...]

    def key(self, sources: str) -> str:
        """Digest of everything that decides the rootfs."""
        text = "\n".join([self.name, self.suite, *self.packages, *self.changes, sources])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


PYTHON_SLIM = BaseImage(
    name="docker.io/library/python:3.11-slim",
    suite="bookworm",
    packages=("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates"),
    changes=("ENV LANG=C.UTF-8", "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin"
             ":/sbin:/bin", 'CMD ["python3"]'),
)


def apt_sources(path: pathlib.Path = APT_SOURCES) -> str:
    """This machine's Debian sources (deb822), which mmdebstrap reads from stdin."""
    try:
        return path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read the Debian mirrors from {path}: {exc}; the base image "
                        "is made from the mirrors this machine's apt uses") from None


def ensure_base(store: Store, image: BaseImage = PYTHON_SLIM, *,
                log: Callable[[str], None] = print) -> bool:
    """Make `image` unless the store has it with the same key; True when it was (re)made."""
    sources = apt_sources()
    key = image.key(sources)
    labels = store.image_labels(image.name)
    if labels is not None and labels.get(KEY_LABEL) == key:
        return False
    tar = store.root / "base" / f"{image.suite}-{key}.tar"
    log(f"images: making {image.name} from Debian {image.suite} "
        f"({', '.join(image.packages)}) with mmdebstrap")
    partial = tar.with_suffix(".partial.tar")
    cmd = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(image.packages)}",
           # pip installs system-wide, as in the official image
           "--customize-hook=rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED",
           "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
           image.suite, str(partial), "-"]
    proc = subprocess.run(cmd, input=sources, text=True, capture_output=True, env=store.env())
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise UserError(f"mmdebstrap failed (exit {proc.returncode}): "
                        f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    partial.replace(tar)
    changes = [arg for change in (*image.changes, f"LABEL {KEY_LABEL}={key}")
               for arg in ("--change", change)]
    store.podman("import", *changes, str(tar), image.name)
    for old in tar.parent.glob("*.tar"):
        if old != tar:
            old.unlink()
    return True
