"""Choose a forge by name; an unknown name is an error that lists the choices.

Explicit names only (``local``, ``github``, ``gitlab``, ``gitea``): silently
falling back to some default would open PRs in the wrong place. Backends are
imported lazily so ``local`` needs nothing beyond git. Registering a name twice
is refused.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable
from urllib.parse import urlsplit

from gitops.errors import ForgeSetupError, UnknownForgeError
from gitops.forges.base import Forge

_FACTORIES: dict[str, Callable[..., Forge]] = {}


def register(name: str, factory: Callable[..., Forge]) -> None:
    """Add a backend under ``name`` (once)."""
    if name in _FACTORIES:
        raise ValueError(f"forge {name!r} is already registered")
    _FACTORIES[name] = factory


def _lazy(module: str, cls: str) -> Callable[..., Forge]:
    def factory(*args: Any, **kwargs: Any) -> Forge:
        return getattr(importlib.import_module(module), cls)(*args, **kwargs)

    return factory


register("local", _lazy("gitops.forges.local", "LocalForge"))
#: The forge when none is named: the GitOps repo's own PR branches.
DEFAULT_FORGE = "local"
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


# The hosted services' API roots; a self-hosted forge serves its API under
# the host of its clone URLs, at the path each product documents.
_HOSTED_API = {"github.com": "https://api.github.com", "gitlab.com": "https://gitlab.com/api/v4"}
_API_PATH = {"github": "/api/v3", "gitlab": "/api/v4", "gitea": "/api/v1"}


def forge_api_url(name: str, gitops: str) -> str | None:
    """The API root of the forge that hosts `gitops` (an http(s) URL), or None.

    The pipeline's `propose` step and the controller get only the GitOps
    repo's URL, so a self-hosted Gitea or GitLab must be found from it.
    """

    parts = urlsplit(gitops)
    if parts.scheme not in ("http", "https") or not parts.hostname or name not in _API_PATH:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return _HOSTED_API.get(host) or f"{parts.scheme}://{host}{_API_PATH[name]}"


#: Where each forge lists a repository's pull (merge) requests, below the repo's web page.
_PULLS_PAGE = {"github": "/pulls", "gitea": "/pulls", "gitlab": "/-/merge_requests"}


def repo_page(url: str) -> str | None:
    """The web page of a repository from its http(s) clone URL (no `.git`, no
    credentials), or None for anything else (ssh, a local path, empty)."""

    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    path = path[:-4] if path.endswith(".git") else path
    if parts.scheme not in ("http", "https") or not parts.hostname or not path.strip("/"):
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{host}{path}"


def pulls_page(name: str, url: str) -> str | None:
    """The web page listing the pull requests of the repo cloned from `url` on forge
    `name` (GitHub and Gitea `/pulls`, GitLab `/-/merge_requests`), or None."""
    page = repo_page(url)
    return page + _PULLS_PAGE[name] if page and name in _PULLS_PAGE else None


def for_gitops(name: str, gitops: str, api_url: str | None = None,
               forge_repo: str | None = None, api_flag: str = "--forge-url") -> Forge:
    """The forge called `name` that hosts the GitOps repo `gitops` (local: the repo itself).

    Without `api_url` the API root comes from `$MLOPS_FORGE_API`, else from
    the GitOps repo's URL (`forge_api_url`).
    """

    if name == "local":
        return create("local", gitops)
    if not forge_repo and "://" in gitops:
        # https://github.com/owner/name.git -> owner/name (GitLab groups keep their path)
        path = urlsplit(gitops).path.strip("/")
        forge_repo = path[:-4] if path.endswith(".git") else path
    if not forge_repo:
        raise ForgeSetupError(f"--forge {name} needs --forge-repo (owner/name on the forge)")
    api_url = api_url or os.environ.get("MLOPS_FORGE_API") or forge_api_url(name, gitops)
    if name == "gitea" and not api_url:
        raise ForgeSetupError(
            f"--forge gitea needs {api_flag} https://HOST/api/v1 (or MLOPS_FORGE_API)")
    kwargs: dict[str, Any] = {}
    if api_url:
        kwargs["api_url"] = api_url
    return create(name, forge_repo, **kwargs)
