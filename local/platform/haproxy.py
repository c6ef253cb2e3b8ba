"""HAProxy for the local platform: the config and the command line.

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

Pinned requests: a request with the ``x-mlops-version`` header goes to that
version's server whatever its weight (``use-server`` with a log-format name,
resolved per request, so the servers added at run time are found too; an
unknown name falls back to the weights, and the probe asks the versioned URL
so a wrong server answers 404). These are the canary analysis' own probes
(`promotion/metrics/probe.py`): they are left out of the latency histogram, which is
what clients see.
"""

from __future__ import annotations

import pathlib
from typing import Mapping

from contracts.traffic import VERSION_HEADER
from local.platform.workdir import Workdir

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
    pinned = f"{{ req.hdr({VERSION_HEADER}) -m found }}"
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
            f"  use-server %[req.hdr({VERSION_HEADER})] if {pinned}",
            f"  http-request lua.mlops_start unless {pinned}",
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
