"""Shared REST plumbing for hosted forges: auth header, pagination, rate limits.

Rate limits are answered, not hammered: a 429, or a 403 that says the limit is
exhausted (``Retry-After``, ``X-RateLimit-Remaining: 0``), waits for the time
the server names (``Retry-After`` seconds, or the ``X-RateLimit-Reset`` /
``RateLimit-Reset`` epoch) and retries, at most ``max_retries`` times and never
longer than ``max_wait`` seconds per wait -- beyond that we raise, naming when
to come back. ``sleep`` and ``clock`` are injectable so tests do not wait.
Pagination follows ``Link: <...>; rel="next"`` (GitHub, Gitea, GitLab) or
GitLab's ``X-Next-Page``. Tokens live in a header and never in messages.
:func:`open_or_adopt` is the one answer all hosted forges give to "a PR for
this branch already exists".
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any, Callable, Iterator

import requests

from gitops.errors import ForgeError, PullRequestNotFound
from gitops.forges.base import Forge, PullRequest

_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[?::1\]?)$")


def check_api_url(url: str, forge: str) -> None:
    """Refuse an API root the token must not travel to: anything but https.

    The token goes in a header of every call, so plain ``http://`` would send
    it in the clear to whoever is on the path. Loopback is the one exception
    (a forge or a tunnel on this machine, and the tests' stand-in servers).
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and _LOOPBACK.match(host):
        return
    raise ForgeError(
        f"{forge} API {url!r}: refusing to send the token there; the API root must be "
        "https://HOST/... (plain http only to a loopback address)"
    )


class Api:
    """A small JSON client for one forge."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        *,
        forge: str,
        token_env: str,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        max_retries: int = 5,
        max_wait: float = 60.0,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        check_api_url(base_url, forge)
        self.session = session or requests.Session()
        self.session.headers.update(headers)
        self.forge = forge
        self.token_env = token_env
        self.sleep = sleep
        self.clock = clock
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.timeout = timeout

    def _wait_for(self, resp: requests.Response) -> float | None:
        """Seconds to wait if ``resp`` is a rate-limit answer, else None."""
        headers = resp.headers
        limited = resp.status_code == 429 or (
            resp.status_code == 403
            and (
                "Retry-After" in headers
                or headers.get("X-RateLimit-Remaining") == "0"
                or headers.get("RateLimit-Remaining") == "0"
            )
        )
        if not limited:
            return None
        if "Retry-After" in headers:
            try:
                return max(0.0, float(headers["Retry-After"]))
            except ValueError:
                return 60.0
        reset = headers.get("X-RateLimit-Reset") or headers.get("RateLimit-Reset")
        if reset is not None:
            try:
                return max(0.0, float(reset) - self.clock())
            except ValueError:
                pass
        return 60.0

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One call, retried on rate limits and 502/503/504; errors become ForgeError."""
        url = path if path.startswith("http") else f"{self.base_url}{path}"
        short = path if not path.startswith("http") else path.replace(self.base_url, "")
        for attempt in range(self.max_retries + 1):
            try:
                resp = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except requests.RequestException as exc:
                raise ForgeError(
                    f"{self.forge}: {method} {short} failed: {type(exc).__name__}"
                ) from None
            wait = self._wait_for(resp)
            if wait is None and resp.status_code in (502, 503, 504):
                wait = min(self.max_wait, 2.0**attempt)
            if wait is None:
                break
            if attempt == self.max_retries or wait > self.max_wait:
                raise ForgeError(
                    f"{self.forge}: rate limited on {method} {short} "
                    f"(HTTP {resp.status_code}); retry in {wait:.0f} s"
                )
            self.sleep(wait)
        if resp.status_code == 401:
            raise ForgeError(
                f"{self.forge}: authentication failed on {method} {short}; "
                f"set {self.token_env} to a token with write access to the repository"
            )
        if resp.status_code == 404:
            raise PullRequestNotFound(f"{self.forge}: {method} {short}: not found (HTTP 404)")
        if resp.status_code >= 400:
            raise ForgeError(
                f"{self.forge}: {method} {short} refused (HTTP {resp.status_code}): "
                f"{_message(resp)}"
            )
        return resp

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self.request(method, path, **kwargs)
        return resp.json() if resp.content else None

    def paginate(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a paginated list endpoint."""
        url: str | None = path
        query = dict(params or {})
        while url is not None:
            resp = self.request("GET", url, params=query)
            yield from resp.json()
            match = _NEXT.search(resp.headers.get("Link", ""))
            if match:
                url, query = match.group(1), {}
            elif resp.headers.get("X-Next-Page"):
                query["page"] = resp.headers["X-Next-Page"]
            else:
                url = None


def _message(resp: requests.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(data, dict):
        msg = data.get("message") or data.get("error") or data
        errors = data.get("errors")
        return f"{msg} {errors}" if errors else str(msg)
    return str(data)[:200]


def open_or_adopt(
    forge: Forge,
    branch: str,
    create: Callable[[], PullRequest],
    conflict: tuple[str, ...] = ("already exists",),
) -> PullRequest:
    """The branch's open PR if it has one, else the one ``create()`` opens.

    Between our look and our create another proposer may open the same PR; the
    forge then refuses ours with an error containing one of ``conflict``
    (GitHub 422, GitLab and Gitea 409) and we adopt theirs, never a duplicate.
    """
    existing = forge.find_pr(branch)
    if existing is not None and existing.state == "open":
        return existing
    try:
        return create()
    except ForgeError as exc:
        if any(marker in str(exc) for marker in conflict):
            found = forge.find_pr(branch)
            if found is not None:
                return found
        raise
