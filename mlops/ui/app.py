"""The Starlette app: JSON for each page, POST for each action, the static page itself.

Reads go through :class:`mlops.ui.source.GitopsSource` and the page builders; actions
through :class:`mlops.ui.actions.Actions`, each a POST with the header `X-Mlops-UI: 1`
and, when configured, the token or the auth proxy's one user header (only from a request
that proves it came through the proxy). The person who acts is never what a request
says. A refusal is `{"error": ...}` with a 4xx, never a traceback; no answer carries a
URL's credentials, and every answer carries `mlops.ui.guard`'s headers. Why:
docs/security.md, boundary 6.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import pathlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from contracts.errors import ExitCode, MlopsError
from gitops.forges import registry
from gitops.git import line_problem, redact
from local.platform import lifecycle
from local.platform.workdir import Workdir
from mlops.errors import UserError
from mlops.ui import live as live_charts
from mlops.ui import models as model_pages
from mlops.ui import proposals as proposal_pages
from mlops.ui import runs as run_pages
from mlops.ui.actions import Actions, Pending, Runtime, http_status
from mlops.ui.argo import ArgoRuns
from mlops.ui.guard import SecurityHeaders, StreamSlots
from mlops.ui.live import live_rates
from mlops.ui.settings import PROXY_USER_HEADER, readiness_for
from mlops.ui.source import GitopsSource
from mlops.ui.stream import Shared, page_events
from promotion.gitrepo.rollback import DEFAULT_WAIT
from promotion.metrics.live import RUNTIME_PRESETS

STATIC = pathlib.Path(__file__).with_name("static")
log = logging.getLogger("mlops.ui")

#: The header a proxy that is not beside the UI on loopback proves itself with.
PROXY_SECRET_HEADER = "X-Mlops-Proxy-Secret"


@dataclass
class UiConfig:
    """What `mlops ui` was started with."""

    gitops: str
    branch: str = "main"
    prometheus: str | None = None
    runtime: str | None = None
    """Where the models run (`local`, `kubernetes`, `none`): the preset a policy that names
    none reads with, as the controller picks it (`RUNTIME_PRESETS`). None: `local` with a
    platform work dir, else `none`."""
    runs: list[pathlib.Path] = field(default_factory=list)
    reports: pathlib.Path | None = None
    models_root: pathlib.Path | None = None
    actions: bool = True
    token: str | None = None
    user: str = "human"
    """Who acts: with a token, the token's identity (a request cannot name another)."""
    proxy_user: bool = False
    """Take the person from the auth proxy's header (in a cluster)."""
    proxy_header: str = PROXY_USER_HEADER
    """The one header read for the person (never a list: a client could set another)."""
    proxy_secret: str | None = None
    """What the proxy sends in `X-Mlops-Proxy-Secret`; None: only loopback reaches us."""
    forge: Callable[[], Any] | None = None
    workdir: pathlib.Path | None = None
    """The local platform's work dir: HAProxy's live weights and the servers' phases."""
    argo_server: str | None = None
    """In a cluster: runs from this Argo Server (namespace `argo_namespace`)."""
    argo_namespace: str = "mlops"
    """The pipeline's namespace (`PipelineSettings.namespace`), where its Workflows run."""
    argo_ca: str | None = None
    """CA bundle (PEM file) the Argo Server's certificate is checked against."""
    argo_insecure: bool = False
    """Do not check the Argo Server's certificate at all (asked for by name)."""
    allowed_hosts: list[str] | None = None
    """`Host` headers answered (None: any). On loopback, `mlops ui` allows only loopback
    names, so a page whose domain is re-pointed at 127.0.0.1 (DNS rebinding) gets 400."""
    max_streams: int = 32
    """Event streams open at once, all clients (beyond: 503, the page polls)."""
    max_streams_per_client: int = 8
    """Event streams open at once from one client address (or signed-in person behind
    the proxy); beyond: 429."""
    readiness: Any = None
    """Who tells the rollback button whether a version is ready (a
    `promotion.cluster.readiness.ReadinessCheck`); None: the runtime's, as `mlops rollback`
    picks it (`mlops.ui.settings.readiness_for`)."""
    rollback_wait: float = DEFAULT_WAIT
    """How long a rollback waits for its version to be ready before it stops with the
    traffic where it was (seconds)."""
    readiness_namespace: str | None = None
    """Where the Kubernetes readiness check reads Deployments (None: the GitOps repo's
    namespace, as the controller reads it)."""


_AT_ONCE = ("the version rolled back to took the traffic in the commit that brought it "
            "back, before it was ready")


class UiError(UserError):
    """A request the UI cannot answer as asked (a 400 naming the parameter)."""


class ModelNotFound(UserError):
    """A model the request names has no folder in the GitOps repo (a 404)."""

    exit_code = ExitCode.NOT_FOUND


def _fail(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": redact(message)}, status_code=status, headers=headers)


class Refused(Exception):
    """An action refused before it runs: its HTTP status and the one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class UiEndpoints:
    """The routes' handlers for one GitOps repo: reads through the source and the page
    builders, actions through :class:`Actions`, event streams through the shared builds."""

    def __init__(self, config: UiConfig, source: GitopsSource | None = None) -> None:
        self.config = config
        self.src = source or GitopsSource(config.gitops, config.branch)
        #: The preset a policy that names none is read with: the runtime's router view,
        #: from the table the controller picks its default from.
        self.runtime = config.runtime or ("local" if config.workdir is not None else "none")
        if self.runtime not in RUNTIME_PRESETS:
            raise UiError(f"runtime {self.runtime!r}: choose one of "
                          f"{', '.join(RUNTIME_PRESETS)}")
        self.actions = Actions(config.gitops, self.forge, config.branch, config.models_root,
                               runtime=self.readiness, wait=config.rollback_wait)
        self.default_preset = RUNTIME_PRESETS[self.runtime]
        self.argo = None
        if config.argo_server:
            self.argo = ArgoRuns(config.argo_server, config.argo_namespace, ca=config.argo_ca,
                                 insecure=config.argo_insecure)
        # One build per tick for every open stream of a page (ten tabs cost what one costs).
        self.pages: dict[str, Shared[dict[str, Any]]] = {
            "models": Shared(self.models), "proposals": Shared(lambda: self.proposals(None)),
            "runs": Shared(lambda: self.runs(None))}
        self.shared_charts = Shared(self.all_charts)
        self.slots = StreamSlots(config.max_streams, config.max_streams_per_client)
        self.stopping = threading.Event()  # set on shutdown: open event streams end

    def forge(self) -> Any:
        """The forge the proposals are on (the GitOps repo's own PR records by default)."""
        if self.config.forge is not None:
            return self.config.forge()
        return registry.create("local", self.config.gitops)

    @staticmethod
    def guarded(fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        """Errors meant for a person as their message; the rest logged, one line out."""
        async def endpoint(request: Request) -> Response:
            try:
                result = await run_in_threadpool(fn, request)
            except MlopsError as exc:
                return _fail(http_status(exc), str(exc))
            except Exception as exc:  # a bug: the log has the traceback, the page a line
                log.exception("%s %s failed", request.method, request.url.path)
                return _fail(500, f"internal error ({type(exc).__name__}): {exc}")
            return result if isinstance(result, Response) else JSONResponse(result)
        return endpoint

    def readiness(self) -> Runtime:
        """Who the rollback button asks whether a version is ready, as `mlops rollback`
        would for this UI's runtime: the local platform's status, or the Kubernetes API in
        the models' namespace (the GitOps repo's `mlops-gitops.yaml`). Nobody, with a note
        the answer carries, when the runtime is `none` or cannot be asked."""
        config = self.config
        if config.readiness is not None:
            return Runtime(config.readiness, self.runtime)
        if self.runtime == "none":
            return Runtime(None, "none", f"readiness not checked (runtime none): {_AT_ONCE}; "
                           "start `mlops ui` with a platform's --workdir or --runtime "
                           "kubernetes to bring it up first")
        namespace = config.readiness_namespace or "models"
        if self.runtime == "kubernetes" and not config.readiness_namespace:
            repo = self.src.snapshot().config
            namespace = repo.namespace if repo is not None else namespace
        try:
            return Runtime(readiness_for(self.runtime, namespace, config.workdir),
                           self.runtime)
        except Exception as exc:  # no kubeconfig or service account: say so, roll back
            log.warning("rollback: readiness not asked (%s runtime): %s: %s", self.runtime,
                        type(exc).__name__, exc)
            return Runtime(None, "none", f"readiness not checked: the {self.runtime} runtime "
                           f"could not be asked ({type(exc).__name__}: {exc}); {_AT_ONCE}")

    # -- who acts -------------------------------------------------------------------------

    def proxied(self, request: Request) -> bool:
        """The request came through the auth proxy (its secret, or loopback beside it)."""
        if self.config.proxy_secret is None:
            return True
        given = request.headers.get(PROXY_SECRET_HEADER, "")
        return hmac.compare_digest(given.encode(), self.config.proxy_secret.encode())

    def who(self, request: Request, body: dict[str, Any]) -> str:
        """The person an action signs as: the proxy's user, the token's identity, or (on a
        UI with neither) the name the page sends."""
        config = self.config
        if config.proxy_user:
            if not self.proxied(request):
                raise Refused(401, f"this request did not come through the auth proxy "
                                   f"(no valid {PROXY_SECRET_HEADER})")
            name = request.headers.get(config.proxy_header, "").strip()
            if not name:
                raise Refused(401, f"no signed-in user from the auth proxy "
                                   f"({config.proxy_header})")
            return name
        named = str(body.get("by") or "").strip()
        if config.token:
            # A shared token says who holds it, not who they are: it acts as its identity.
            if named and named != config.user:
                raise Refused(403, f"who acts (\"by\"): {named!r} -- this UI's token acts as "
                                   f"{config.user!r} (its identity, `mlops ui --by`); a "
                                   "request cannot sign as someone else. For one name per "
                                   "person, sign in through the auth proxy (--proxy-user)")
            return config.user
        return named or config.user

    async def action(self, request: Request, run: Callable[[str], str | Pending]) -> Response:
        """Run an action for the person the request proves, or refuse it (4xx, one line)."""
        config = self.config
        if not config.actions:
            return _fail(403, "actions are disabled on this UI (read-only); use the CLI or "
                              "start it with actions enabled")
        if request.headers.get("x-mlops-ui") != "1":
            return _fail(403, "actions need the X-Mlops-UI header (sent by the page)")
        if config.token:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), config.token.encode()):
                return _fail(401, "this UI's actions need its token (enter it at the top)")
        try:
            body = await request.json()
        except ValueError:
            body = {}
        try:
            person = self.who(request, body if isinstance(body, dict) else {})
        except Refused as exc:
            return _fail(exc.status, str(exc))
        problem = line_problem(person)
        if problem:
            where = config.proxy_header if config.proxy_user else '"by"'
            return _fail(400, f"who acts ({where}): {person!r} {problem}")

        def respond(_request: Request) -> Any:
            answer = run(person)
            if isinstance(answer, Pending):  # under way in this process (a rollback)
                return JSONResponse({"message": answer.message, "pending": True},
                                    status_code=202)
            return {"message": answer}

        return await self.guarded(respond)(request)

    async def approve(self, request: Request) -> Response:
        number = int(request.path_params["number"])
        return await self.action(request, lambda by: self.actions.approve(number, by))

    async def canary(self, request: Request) -> Response:
        model, verb = request.path_params["model"], request.path_params["action"]
        if verb == "rollback":
            return await self.action(request, lambda by: self.actions.rollback(model, by))
        return await self.action(request, lambda by: self.actions.canary(model, verb, by))

    # -- pages ----------------------------------------------------------------------------

    def info(self, request: Request) -> dict[str, Any]:
        """What the page shows in its header. No token needed to read this: every URL
        without its credentials."""
        config = self.config
        return {"gitops": redact(config.gitops), "branch": config.branch,
                "actions": config.actions, "token": bool(config.token), "user": config.user,
                "identity": config.user if config.token and not config.proxy_user else None,
                "proxy_user": config.proxy_user,
                "prometheus": redact(config.prometheus) if config.prometheus else None,
                "runtime": self.runtime, "preset": self.default_preset,
                "runs": [str(r) for r in config.runs] +
                ([f"{redact(config.argo_server or '')} ({config.argo_namespace})"]
                 if self.argo else [])}

    def platform(self) -> tuple[dict[str, Any], str | None]:
        """The local platform's models (their servers' phases), and its fault if any."""
        if self.config.workdir is None:
            return {}, None
        try:
            return lifecycle.status(Workdir(self.config.workdir)).get("models", {}), None
        except MlopsError as exc:
            return {}, str(exc)

    def models(self, request: Request | None = None) -> dict[str, Any]:
        config = self.config
        snap = self.src.snapshot()
        served, problem = self.platform()
        views = []
        for name, current in sorted(snap.models.items()):
            live = None
            if config.prometheus:
                live = live_rates(config.prometheus, current, config=snap.config,
                                  default=self.default_preset)
            versions = (served.get(name) or {}).get("versions") if config.workdir else None
            view = model_pages.model_view(current, self.src.history(name), live,
                                          config.reports, versions or
                                          ({} if config.workdir else None))
            job = self.actions.rollbacks.get(name)
            view["rollback"] = job.view() if job is not None else None
            views.append(view)
        return {"tip": snap.tip, "models": views, "platform_error": problem}

    def model_charts(self, name: str, minutes: float = 15.0,
                     fetch: bool = True) -> dict[str, Any]:
        snap = self.src.snapshot(fetch=fetch)
        current = snap.models.get(name)
        if current is None:
            raise ModelNotFound(f"no model {name!r} in apps/ of {self.config.gitops}")
        state, _ = model_pages.canary_state(current)
        started = state.started_at.timestamp() if state and state.started_at else None
        now = time.time()
        history = self.src.weight_history(name, since=now - live_charts.MAX_SPAN)
        return live_charts.charts(self.config.prometheus, current, history,
                                  model_pages.timeline(self.src.history(name)), started, now,
                                  minutes=minutes, config=snap.config,
                                  default=self.default_preset)

    def charts(self, request: Request) -> dict[str, Any]:
        text = request.query_params.get("minutes", "15")
        try:
            minutes = float(text)
        except ValueError:
            minutes = -1
        if not 0 < minutes <= 360:
            raise UiError(f"charts: minutes={text!r} must be a number of minutes, 1 to 360")
        return self.model_charts(request.path_params["model"], minutes)

    def all_charts(self) -> list[dict[str, Any]]:
        snap = self.src.snapshot(fetch=False)
        return [self.model_charts(m, fetch=False) for m in sorted(snap.models)]

    def proposals(self, request: Request | None) -> dict[str, Any]:
        return {"proposals": proposal_pages.proposals_view(self.forge())}

    def runs(self, request: Request | None) -> dict[str, Any]:
        found = run_pages.runs_view(self.config.runs)
        return {"runs": (self.argo.runs() if self.argo else []) + found}

    def compare(self, request: Request) -> dict[str, Any]:
        return run_pages.compare_view(self.config.runs, request.query_params.getlist("run"),
                                      self.argo)

    def run_log(self, request: Request) -> Response:
        path = request.query_params.get("path", "")
        text = self.argo.log(path) if self.argo and path.startswith("argo:") else \
            run_pages.read_log(self.config.runs, path)
        return Response(text, media_type="text/plain; charset=utf-8")

    def report(self, request: Request) -> Response:
        p = request.path_params
        reports = self.config.reports
        if reports is None or p["file"] not in model_pages.REPORT_FILES:
            return _fail(404, "no canary reports here (start `mlops ui` with --reports)")
        path = reports / "rollouts" / p["model"] / p["candidate"] / p["file"]
        if not path.resolve().is_relative_to(reports.resolve()) or not path.is_file():
            return _fail(404, f"no {p['file']} for {p['model']} {p['candidate']}")
        return FileResponse(path)

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    # -- pushed updates -------------------------------------------------------------------

    def client_of(self, request: Request) -> str:
        """Whose streams count together: the signed-in person behind the auth proxy (every
        request comes from the proxy's address there), else the client's address."""
        if self.config.proxy_user and self.proxied(request):
            person = request.headers.get(self.config.proxy_header, "").strip()
            if person:
                return f"user:{person}"
        return f"addr:{request.client.host if request.client else '?'}"

    async def events(self, request: Request) -> Response:
        """Server-sent events: the page's document when it changes (`event: page`), and on
        the Models page each model's charts (`event: charts`); the page polls if this fails
        (or is refused: beyond the caps of `slots`)."""
        name = request.query_params.get("page", "models")
        if name not in self.pages:
            return _fail(400, f"events: page={name!r}: choose one of {', '.join(self.pages)}")
        client = self.client_of(request)
        refused = self.slots.take(client)
        if refused is not None:
            return _fail(refused[0], refused[1], {"Retry-After": "10"})
        return page_events(request, self.pages[name],
                           self.shared_charts if name == "models" else None,
                           self.stopping, release=lambda: self.slots.give(client))

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """On shutdown: open event streams end, the source lets go of its mirror."""
        yield
        self.stopping.set()
        self.actions.stop()
        self.src.close()

    def routes(self) -> list[BaseRoute]:
        """Every route of the app: JSON reads (guarded), the two actions, the stream, the
        page and its static files."""
        guarded = self.guarded
        return [
            Route("/", self.index),
            Route("/api/info", guarded(self.info)),
            Route("/api/models", guarded(self.models)),
            Route("/api/proposals", guarded(self.proposals)),
            Route("/api/runs", guarded(self.runs)),
            Route("/api/log", guarded(self.run_log)),
            Route("/api/compare", guarded(self.compare)),
            Route("/api/models/{model}/charts", guarded(self.charts)),
            Route("/api/events", self.events),
            Route("/reports/{model}/{candidate}/{file}", guarded(self.report)),
            Route("/api/proposals/{number:int}/approve", self.approve, methods=["POST"]),
            Route("/api/models/{model}/{action}", self.canary, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]


def create_app(config: UiConfig, source: GitopsSource | None = None) -> Starlette:
    """The app for one GitOps repo (tests pass their own source)."""
    endpoints = UiEndpoints(config, source)
    app = Starlette(routes=endpoints.routes(), lifespan=endpoints.lifespan)
    app.state.stopping = endpoints.stopping
    app.state.streams = endpoints.slots
    app.state.actions = endpoints.actions
    if config.allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=config.allowed_hosts)
    app.add_middleware(SecurityHeaders)  # added last: outermost, on every answer
    return app
