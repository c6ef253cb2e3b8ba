"""Find the real programs the platform runs, or say exactly what to install."""

from __future__ import annotations

import os
import shutil

from local.errors import LocalError

#: program -> Debian package that provides it.
REQUIRED = {"prometheus": "prometheus", "haproxy": "haproxy", "git": "git"}
# Debian installs haproxy in /usr/sbin, which is not on every user's PATH.
_EXTRA_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


class MissingBinaryError(LocalError):
    """A program the platform needs is not installed."""


def which(program: str, path: str | None = None) -> str | None:
    """Path of ``program`` on ``path`` (default $PATH) plus the sbin dirs."""
    search = path if path is not None else os.environ.get("PATH", "")
    found = shutil.which(program, path=search)
    if found:
        return found
    if path is None:
        return shutil.which(program, path=os.pathsep.join(_EXTRA_DIRS))
    return None


def require(path: str | None = None) -> dict[str, str]:
    """Resolve every required program; raise one error naming all missing ones.

    With ``path`` given, only that search path is used (tests simulate a
    machine without the packages this way).
    """
    found: dict[str, str] = {}
    missing: list[str] = []
    for program in REQUIRED:
        where = which(program, path)
        if where is None:
            missing.append(program)
        else:
            found[program] = where
    if missing:
        packages = " ".join(sorted({REQUIRED[p] for p in missing}))
        raise MissingBinaryError(
            f"{', '.join(missing)} not found on PATH; the local platform runs the real "
            f"programs. Install them with: sudo apt-get install {packages} "
            f"(all at once: sudo apt-get install prometheus haproxy git)"
        )
    return found
