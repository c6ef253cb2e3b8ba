"""Choose a forge by name; an unknown name is an error that lists the choices.

Explicit names only (``local``, ``github``, ``gitlab``, ``gitea``): silently
falling back to some default would open PRs in the wrong place. Backends are
imported lazily so ``local`` needs nothing beyond git. Registering a name twice
is refused.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from gitops.errors import UnknownForgeError
from gitops.forges.base import Forge

_FACTORIES: dict[str, Callable[..., Forge]] = {}


def register(name: str, factory: Callable[..., Forge]) -> None:
    """Add a backend under ``name`` (once)."""
    if name in _FACTORIES:
        raise ValueError(f"forge {name!r} is already registered")
    _FACTORIES[name] = factory


def _lazy(module: str, cls: str) -> Callable[..., Forge]:
    def factory(*args: Any, **kwargs: Any) -> Forge:
        return getattr(importlib.import_module(module), cls)(*args, **kwargs)  # type: ignore[no-any-return]

    return factory


register("local", _lazy("gitops.forges.local", "LocalForge"))
register("github", _lazy("gitops.forges.github", "GitHubForge"))
register("gitlab", _lazy("gitops.forges.gitlab", "GitLabForge"))
register("gitea", _lazy("gitops.forges.gitea", "GiteaForge"))


def names() -> list[str]:
    """Registered forge names, sorted."""
    return sorted(_FACTORIES)


def create(name: str, *args: Any, **kwargs: Any) -> Forge:
    """Instantiate forge ``name``: ``create("local", repo_path)``,
    ``create("github", "owner/name", api_url=...)``."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownForgeError(
            f"unknown forge {name!r}; choose one of: {', '.join(names())}"
        ) from None
    return factory(*args, **kwargs)
