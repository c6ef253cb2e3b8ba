"""The options several commands share: one name per concept, the old names as hidden
aliases, and the one way an option falls back to an environment variable.

* `--gitops` is the GitOps repository everywhere (`--repo`: a hidden alias);
  `--forge`, `--forge-repo` and `--forge-api` name a hosted forge (`--forge-url`: a
  hidden alias); `--insecure` skips a TLS check (`--argo-insecure`: a hidden alias).
* An option given as None takes its variable from `ENVIRONMENT` when the command is
  run (`environment_defaults`), never when the parser is built: `--help` reads the
  same whatever the environment holds. The settings models (`ControllerSettings`,
  `UiSettings`) take theirs through the same function, `cogs.options.from_environment`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Mapping

from cogs.options import from_environment
from gitops.forges.registry import DEFAULT_FORGE
from mlops.errors import UserError

__all__ = ["DEFAULT_FORGE", "ENVIRONMENT", "FORGES", "alias", "environment_defaults",
           "forge_options", "from_env", "gitops_option", "require_gitops"]

#: {option's dest: the variable it falls back to} for the commands' own options.
ENVIRONMENT = {"gitops": "MLOPS_GITOPS_REPO", "forge": "MLOPS_FORGE",
               "forge_repo": "MLOPS_FORGE_REPO", "forge_api": "MLOPS_FORGE_API",
               "models_root": "MLOPS_MODELS", "platform_workdir": "MLOPS_WORKDIR",
               "cache": "MLOPS_DATA_CACHE", "image_build": "MLOPS_IMAGE_BUILD"}
#: The forges a PR may live on; `local` is a branch in the bare GitOps repo.
FORGES = ("local", "github", "gitlab", "gitea")
_KEY = "_environment"


def alias(parser: argparse.ArgumentParser, old: str, dest: str, **kwargs: Any) -> None:
    """`old` as a hidden alias of the option stored in `dest` (kept for a release)."""
    parser.add_argument(old, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                        **kwargs)


def from_env(parser: argparse.ArgumentParser, *dests: str) -> None:
    """Let `dests` fall back to their `ENVIRONMENT` variable when the command runs."""
    table = dict(parser.get_default(_KEY) or {})
    table.update({dest: ENVIRONMENT[dest] for dest in dests})
    parser.set_defaults(**{_KEY: table})


def environment_defaults(args: argparse.Namespace,
                         environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """`args` with each option its parser lets fall back (`from_env`) and that was not
    given set from the environment."""
    table = getattr(args, _KEY, None) or {}
    given = {dest: getattr(args, dest, None) for dest in table}
    filled = from_environment({k: v for k, v in given.items() if v is not None}, table,
                              os.environ if environ is None else environ)
    for dest, value in filled.items():
        setattr(args, dest, value)
    return args


def gitops_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """`--gitops` (default `$MLOPS_GITOPS_REPO`), and `--repo` as its hidden alias."""
    parser.add_argument("--gitops", metavar="REPO", help=help or (
        "GitOps repository: path of the bare repo or its URL (default: $MLOPS_GITOPS_REPO)"))
    alias(parser, "--repo", "gitops")
    from_env(parser, "gitops")


def require_gitops(args: argparse.Namespace) -> str:
    """The GitOps repository the options name; a user error when none does."""
    if not getattr(args, "gitops", None):
        raise UserError("no GitOps repo given: pass --gitops PATH_OR_URL or set "
                        "MLOPS_GITOPS_REPO")
    return str(args.gitops)


def forge_options(parser: argparse.ArgumentParser, *, env: bool = True,
                  choices: tuple[str, ...] | None = None, help: str | None = None) -> None:
    """`--forge`, `--forge-repo`, `--forge-api` (and `--forge-url`, its hidden alias).
    `env`: each falls back to its variable (not for manifests rendered for a cluster)."""
    names = ", ".join(choices or FORGES)  # None: the forge registry refuses a name it lacks
    parser.add_argument("--forge", choices=choices, help=help or (
        f"where the pull requests are: {names} (default: $MLOPS_FORGE, else local)"))
    parser.add_argument("--forge-repo", help="owner/name (GitHub, Gitea) or group/name "
                                             "(GitLab) of the GitOps repo (default: from "
                                             "--gitops)")
    parser.add_argument("--forge-api", help="API root of the forge (default: from --gitops; "
                                            "a self-hosted forge's own)")
    alias(parser, "--forge-url", "forge_api")
    if env:
        from_env(parser, "forge", "forge_repo", "forge_api")
