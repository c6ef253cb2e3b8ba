"""HAProxy for the local platform: the config, the command line, the start (its
runtime API client is :mod:`runtime`).

HAProxy is our stand-in for Istio's VirtualService. One frontend per model on
its own loopback port, one backend per model named after the model, one
server per live version named after the version -- so HAProxy's exporter
series (``haproxy_server_http_responses_total{proxy="<model>",server="<version>"}``)
and the stats page read in our words.

Weights change through the runtime API (``set weight``), servers come and go
with ``add server`` / ``del server`` (dynamic servers, HAProxy >= 2.4): no
reload, no dropped connection. Only a *new model* needs a new frontend and
so a reload; the sync then renders this config with every server it has
(the same names, ports and weights), and reloads the master-worker process
with SIGUSR2, which keeps the listening sockets (``expose-fd listeners``).

Balance is ``roundrobin``: weights are dynamic with it, and weighted
round-robin gives the exact split per request (weights map percentages
one-to-one; HAProxy accepts 0-256). ``option httpchk`` on the server's
readiness route takes a server out of rotation within ~2 s if it stops
answering, before the sync notices the crash.

Latency where clients see it: HAProxy 2.6's exporter has no response-time
histogram (an average of the last 1024 requests and a maximum since start),
so `router_latency.lua` keeps one per server (``mlops_router_response_seconds``,
labelled ``proxy``/``server`` like the exporter's series) and the stats port
serves it on ``/router-latency``; the ``haproxy`` metrics preset reads it.
"""

from __future__ import annotations

import pathlib
from typing import Mapping

from cogs.files import atomic_write_json, atomic_write_text, read_json
from cogs.ports import free_port, port_free
from local.platform import procs, services
from local.platform.runtime import RuntimeApi
from local.platform.workdir import PlatformConfig, Workdir

#: Per-server response-time histograms (HAProxy 2.6's exporter has none): the Lua
#: script, and the stats port's path that serves them to Prometheus.
LATENCY_LUA = pathlib.Path(__file__).with_name("router_latency.lua")
LATENCY_PATH = "/router-latency"

#: Health-check parameters for every server, static or added at run time
#: (dynamic servers do not inherit ``default-server``).
SERVER_OPTIONS = "check inter 1s fastinter 500ms fall 2 rise 1"
CHECK_PATH = "/v2/health/ready"


def server_line_args(port: int, weight: int) -> str:
    return f"127.0.0.1:{port} weight {weight} {SERVER_OPTIONS}"


def render_config(
    workdir: Workdir,
    *,
    stats_port: int,
    frontends: Mapping[str, int],
    servers: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
) -> str:
    """haproxy.cfg text (pure). ``servers``: model -> version -> (port, weight)."""
    servers = servers or {}
    socket = workdir.admin_socket()
    lines = [
        "# Rendered by the mlops local platform; edits are overwritten.",
        "global",
        f"  stats socket {socket} mode 600 level admin expose-fd listeners",
        "  stats timeout 30s",
        f"  lua-load {LATENCY_LUA}",
        "  log stderr format short local0 notice",
        "",
        "defaults",
        "  mode http",
        "  log global",
        "  option dontlognull",
        "  timeout connect 2s",
        "  timeout client 60s",
        "  timeout server 60s",
        "  timeout http-keep-alive 10s",
        "  retries 2",
        "  option redispatch",
        "",
        "frontend stats",
        f"  bind 127.0.0.1:{stats_port}",
        f"  http-request use-service lua.mlops_latency if {{ path {LATENCY_PATH} }}",
        "  http-request use-service prometheus-exporter if { path /metrics }",
        "  stats enable",
        "  stats uri /stats",
        "  stats refresh 2s",
        "  stats show-legends",
    ]
    for model in sorted(frontends):
        lines += [
            "",
            f"frontend fe_{model}",
            f"  bind 127.0.0.1:{frontends[model]}",
            f"  default_backend {model}",
            "",
            f"backend {model}",
            "  balance roundrobin",
            f"  option httpchk GET {CHECK_PATH}",
            "  http-request lua.mlops_start",
            "  http-response lua.mlops_observe",
        ]
        for version, (port, weight) in sorted(servers.get(model, {}).items()):
            lines.append(f"  server {version} {server_line_args(port, weight)}")
    return "\n".join(lines) + "\n"


def command(binary: str, workdir: Workdir) -> list[str]:
    """Master-worker mode in the foreground: the pid we record is the master."""
    return [binary, "-W", "-db", "-f", str(workdir.haproxy_cfg)]


def check_command(binary: str, workdir: Workdir) -> list[str]:
    return [binary, "-c", "-q", "-f", str(workdir.haproxy_cfg)]


def start(workdir: Workdir, config: PlatformConfig, binary: str) -> services.Started:
    """Start HAProxy with every known model frontend and empty backends.

    The sync adds the servers through the runtime API on its next tick.
    Frontend ports taken by someone else meanwhile are moved (and saved).
    """
    frontends: dict[str, int] = {
        str(k): int(v) for k, v in (read_json(workdir.frontends, {}) or {}).items()
    }
    moved = [m for m, p in frontends.items() if not port_free(p)]
    for model in moved:
        frontends[model] = free_port()
    if moved:
        atomic_write_json(workdir.frontends, frontends)
    atomic_write_text(workdir.haproxy_cfg, render_config(
        workdir, stats_port=config.haproxy_stats_port, frontends=frontends))
    socket_path = workdir.admin_socket()
    socket_path.unlink(missing_ok=True)
    log = workdir.logs / "haproxy.log"
    popen, record = procs.spawn(
        "haproxy", command(binary, workdir), log, env=procs.marked_env(str(workdir.root)),
    )
    procs.write_record(workdir.pidfile("haproxy"), record)
    api = RuntimeApi(socket_path, timeout=1.0)

    def ready() -> bool:
        try:
            return "Name: HAProxy" in api.info()
        except OSError:
            return False

    services.wait_ready(ready, "haproxy", log, record, popen)
    return popen, record
