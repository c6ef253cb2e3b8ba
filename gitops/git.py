"""Thin runner for the git CLI: environment, credentials, redaction.

The real ``git`` binary (2.38+ for ``merge-tree --write-tree``), through ``subprocess``.
A token travels only in the child's environment (``MLOPS_GIT_TOKEN``, split from a
``user:token@`` URL or given directly), read at run time by an inline credential helper
passed with ``-c``, so neither disk, argv nor logs hold it; every message raised goes
through :func:`redact`. Why: docs/inside-foundations.md.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gitops.errors import GitError, MessageError

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")

# Reads the token from the environment when git asks; only answers "get", only when
# a token is set (else git goes on as if there were no helper), and only for a server
# named in MLOPS_GIT_HOSTS (space-separated `scheme://host[:port]`): git writes the
# request's `protocol=` and `host=` (host[:port]) lines on the helper's stdin
# (gitcredentials(7), "Custom helpers"; git-credential(1), "INPUT/OUTPUT FORMAT"). It
# once answered any host, and a pushed mlops.yaml that named its own GitOps URL
# received the token. Public: the pipeline's checkout pod gives
# the same helper to plain `git` through GIT_CONFIG_COUNT/KEY/VALUE env (see
# `credential_config_env`).
CREDENTIAL_HELPER = (
    '!f() { test "$1" = get || exit 0; test -n "${MLOPS_GIT_TOKEN:-}" || exit 0; '
    'p=; h=; while IFS= read -r l; do case "$l" in protocol=*) p="${l#protocol=}";; '
    'host=*) h="${l#host=}";; esac; done; '
    'case " ${MLOPS_GIT_HOSTS:-} " in *" $p://$h "*) ;; *) exit 0;; esac; '
    'echo "username=${MLOPS_GIT_USERNAME:-x-access-token}"; '
    'echo "password=${MLOPS_GIT_TOKEN}"; }; f'
)
TOKEN_ENV = "MLOPS_GIT_TOKEN"
USERNAME_ENV = "MLOPS_GIT_USERNAME"
HOSTS_ENV = "MLOPS_GIT_HOSTS"


def origin(url: str) -> str | None:
    """`scheme://host[:port]` of a network URL (host lower-cased, no credentials), as the
    credential helper compares it; None for a local path or an scp-like address."""
    if "://" not in url:
        return None
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    host = parts.hostname.lower()
    return f"{parts.scheme.lower()}://{host}{f':{parts.port}' if parts.port else ''}"


def credential_config_env() -> dict[str, str]:
    """Env that makes any git (2.31+) use `CREDENTIAL_HELPER`: no argv, no config file."""
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "credential.helper",
            "GIT_CONFIG_VALUE_0": CREDENTIAL_HELPER}


_REPO_LOCATING = {
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_NAMESPACE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_PUSH_OPTION_COUNT",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_REFLOG_ACTION",
}


def redact(text: str) -> str:
    """Replace ``scheme://user:secret@`` with ``scheme://***@`` everywhere in text."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


@dataclass(frozen=True)
class Identity:
    """Author and committer of our commits; the workflows room filters on it."""

    name: str = "mlops-bot"
    email: str = "mlops-bot@localhost"


#: The bot, defined once: every write-back commit carries it, and the triggers
#: (the Sensor's filter, the local post-receive hook) skip commits whose
#: author email is exactly its email, so its commits never start training.
BOT_IDENTITY = Identity()
DEFAULT_IDENTITY = BOT_IDENTITY


@dataclass(frozen=True)
class Remote:
    """A repository address split into a clean URL and its credential environment."""

    url: str
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def display(self) -> str:
        return redact(self.url)


def remote(url_or_path: str | os.PathLike[str]) -> Remote:
    """Split credentials out of a URL; local paths become absolute paths.

    Where the token may go (`MLOPS_GIT_HOSTS`, read by `CREDENTIAL_HELPER`): a token
    written in the URL goes to that URL's server only. Otherwise the environment's
    scope holds where it is set (the pipeline's pods: the platform's servers, whatever
    URL a step is given); where nobody set one, the server of this URL, which whoever
    runs the command named (the operator's `--gitops https://...` with
    `MLOPS_GIT_TOKEN` exported)."""
    text = os.fspath(url_or_path)
    if "://" not in text and not re.match(r"^[\w.-]+@[\w.-]+:", text):
        return Remote(str(pathlib.Path(text).expanduser().resolve()))
    env: dict[str, str] = {}
    parts = urllib.parse.urlsplit(text)
    scope = origin(text)
    if scope and HOSTS_ENV not in os.environ:
        env[HOSTS_ENV] = scope
    if parts.password is not None or parts.username is not None:
        if scope:
            env[HOSTS_ENV] = scope
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        if parts.password is not None:
            env["MLOPS_GIT_TOKEN"] = urllib.parse.unquote(parts.password)
            if parts.username:
                env["MLOPS_GIT_USERNAME"] = urllib.parse.unquote(parts.username)
        else:  # a bare token as user name (GitHub style https://TOKEN@github.com)
            env["MLOPS_GIT_TOKEN"] = urllib.parse.unquote(parts.username or "")
        text = urllib.parse.urlunsplit(
            (parts.scheme, host, parts.path, parts.query, parts.fragment)
        )
    return Remote(text, env)


class Git:
    """Run git in one directory with a fixed identity and credentials from the env."""

    def __init__(
        self,
        cwd: pathlib.Path,
        *,
        identity: Identity = DEFAULT_IDENTITY,
        credentials: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.cwd = pathlib.Path(cwd)
        self.timeout = timeout
        self.identity = identity
        # Drop variables that point git at *another* repository: inside a git
        # hook (the model repo's post-receive runs the pipeline) GIT_DIR & co.
        # are set and would silently redirect every command we run.
        env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCATING}
        env.update(credentials or {})
        env.update(
            {
                "GIT_TERMINAL_PROMPT": "0",
                "LC_ALL": "C",
                "LANGUAGE": "C",
                "GIT_AUTHOR_NAME": identity.name,
                "GIT_AUTHOR_EMAIL": identity.email,
                "GIT_COMMITTER_NAME": identity.name,
                "GIT_COMMITTER_EMAIL": identity.email,
            }
        )
        self.env = env
        self._config: list[str] = [
            "-c",
            "commit.gpgsign=false",
            "-c",
            "advice.detachedHead=false",
            "-c",
            "core.autocrlf=false",
            "-c",
            "init.defaultBranch=main",
        ]
        if env.get("MLOPS_GIT_TOKEN"):
            self._config += [
                "-c",
                "credential.helper=",
                "-c",
                f"credential.helper={CREDENTIAL_HELPER}",
            ]

    def run(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        cwd: pathlib.Path | None = None,
        exact: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``git args``; on failure (with check) raise GitError with redacted output.

        ``exact``: the output as git wrote it. Text mode otherwise turns every CR into
        a line break, so a CR inside a commit trailer read back as a second trailer.
        """
        try:
            if exact:
                raw = subprocess.run(
                    ["git", *self._config, *args],
                    cwd=cwd or self.cwd,
                    env=self.env,
                    input=None if input is None else input.encode(),
                    capture_output=True,
                    timeout=self.timeout,
                )
                proc = subprocess.CompletedProcess(
                    raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
                    raw.stderr.decode(errors="replace"))
            else:
                proc = subprocess.run(
                    ["git", *self._config, *args],
                    cwd=cwd or self.cwd,
                    env=self.env,
                    input=input,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout,
                )
        except subprocess.TimeoutExpired:
            # A hung network or credential prompt must not hang the controller.
            raise GitError(
                f"git {' '.join(args[:3])} did not finish within {self.timeout:.0f} s"
            ) from None
        if check and proc.returncode != 0:
            raise GitError(
                redact(
                    f"git {' '.join(args[:3])} failed (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()}"
                )
            )
        return proc

    def argv(self, *args: str) -> list[str]:
        """The full command line for ``git args`` (the credential helper config included;
        no secret: the helper reads the token from the environment, ``self.env``)."""
        return ["git", *self._config, *args]

    def out(self, *args: str, input: str | None = None) -> str:
        """Stdout of a successful git command, stripped."""
        return self.run(*args, input=input).stdout.strip()

    def ok(self, *args: str) -> bool:
        """True when the command exits 0 (for questions such as is-ancestor)."""
        return self.run(*args, check=False).returncode == 0


def line_problem(text: str) -> str | None:
    """Why `text` cannot be one line of a commit message (None: it can).

    Every control character (Unicode Cc: CR, tab, NUL, VT, FF, NEL, ...) and the
    Unicode line and paragraph separators are refused, not only LF: git keeps a
    CR inside a trailer line, but a reader that splits lines as Python's
    `str.splitlines` does (CR, VT, FF, FS, GS, RS, NEL, U+2028/9) sees a second
    trailer there, so `by = "eve\\rMlops-Decision: rollback/controller"` forged
    a controller decision.
    """
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is None:
        return None
    return (f"contains the control character {bad!r} (U+{ord(bad):04X}): "
            "one line of printable text only")


def format_message(
    git: Git, subject: str, body: str = "", trailers: Sequence[tuple[str, str]] = ()
) -> str:
    """Commit message text with ``Key: value`` trailers (via git interpret-trailers).

    Raises :class:`MessageError` (bad input, a 4xx in the UI) for a trailer key
    that is not letters, digits and '-', a trailer value or subject that is not
    one line of printable text (see :func:`line_problem`).
    """
    for key, value in trailers:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", key):
            raise MessageError(f"commit trailer key {key!r} must be letters, digits and '-'")
        problem = line_problem(str(value))
        if problem:
            raise MessageError(f"commit trailer {key}: {str(value)!r} {problem}")
    problem = line_problem(subject.strip())
    if not subject.strip() or problem:
        raise MessageError(f"commit subject {subject!r} {problem or 'is empty'}")
    text = subject.strip() + "\n"
    if body.strip():
        text += "\n" + body.strip() + "\n"
    if not trailers:
        return text
    args = ["interpret-trailers", "--no-divider"]
    for key, value in trailers:
        args += ["--trailer", f"{key}: {value}"]
    return git.run(*args, input=text).stdout


def parse_trailers(text: str) -> dict[str, str]:
    """`Key: value` lines (as `%(trailers:only,unfold)` prints them) -> {key: value}.

    Lines end at LF only, as git writes them (never `str.splitlines`, which also
    breaks at CR and friends; read the text with `Git.run(..., exact=True)`, as
    text mode turns a CR into a line break too); a key given twice keeps its
    FIRST value, so a trailer appended after ours cannot override
    `Mlops-Decision` and the like.
    """
    parsed: dict[str, str] = {}
    for line in text.split("\n"):
        key, _, value = line.partition(":")
        if value and key.strip() not in parsed:
            parsed[key.strip()] = value.strip()
    return parsed
