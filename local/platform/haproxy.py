"""HAProxy for the local platform: the config, the command line, the start, and the
runtime API client (the admin socket) the sync sets weights and servers through.

HAProxy stands in for Istio's VirtualService: one frontend per model, one backend named
after the model, one server per live version; weights and servers change through the
runtime API without a reload, a new model's frontend by a SIGUSR2 reload. It also keeps
a latency histogram per server (`router_latency.lua`) and routes the canary probes'
`x-mlops-version` header to their version. Why: docs/inside-local.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
import socket
from typing import Mapping

from cogs.files import atomic_write_json, atomic_write_text, read_json
from cogs.ports import free_port, port_free
from contracts.traffic import VERSION_HEADER
from local.platform import procs, services
from local.platform.workdir import PlatformConfig, Workdir

#: Per-server response-time histograms (HAProxy 2.6's exporter has none): the Lua
#: script, and the stats port's path that serves them to Prometheus.
LATENCY_LUA = pathlib.Path(__file__).with_name("router_latency.lua")
LATENCY_PATH = "/router-latency"

#: Health-check parameters for every server, static or added at run time
#: (dynamic servers do not inherit ``default-server``).
SERVER_OPTIONS = "check inter 1s fastinter 500ms fall 2 rise 1"


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


# -- the runtime API (the admin socket) ---------------------------------------
# One command per connection. Only the handful of commands the sync needs, each
# a method, plus a parser of ``show servers state``. A command HAProxy rejects
# raises RuntimeApiError with HAProxy's answer; an unreachable socket raises
# OSError (the caller retries on its next tick). Reference: HAProxy management
# guide, section "Unix Socket commands" (``set weight``, ``set server ... addr``,
# ``add server``, ``del server``, ``enable``/``disable server``, ``enable
# health``, ``show servers state``).

# srv_admin_state bits (HAProxy's SRV_ADMF_*): any maintenance flag set means
# the server takes no traffic whatever its weight.
_ADMF_MAINT = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_OK_REPLIES = ("", "New server registered.", "Server deleted.")


class RuntimeApiError(RuntimeError):
    """HAProxy answered a command with an error."""


@dataclasses.dataclass(frozen=True)
class ServerState:
    """One line of ``show servers state``."""

    backend: str
    name: str
    addr: str
    port: int
    weight: int
    #: 0 stopped, 1 starting, 2 running, 3 stopping (srv_op_state).
    op_state: int
    admin_state: int

    @property
    def enabled(self) -> bool:
        return not (self.admin_state & _ADMF_MAINT)

    @property
    def up(self) -> bool:
        return self.op_state == 2


def parse_servers_state(text: str) -> list[ServerState]:
    """Parse the output of ``show servers state`` (format version 1)."""
    out = []
    header: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line == "1":
            continue
        if line.startswith("#"):
            header = line.lstrip("# ").split()
            continue
        if header is None:
            continue
        row = dict(zip(header, line.split()))
        out.append(
            ServerState(
                backend=row["be_name"],
                name=row["srv_name"],
                addr=row["srv_addr"],
                port=int(row["srv_port"]),
                weight=int(row["srv_uweight"]),
                op_state=int(row["srv_op_state"]),
                admin_state=int(row["srv_admin_state"]),
            )
        )
    return out


class RuntimeApi:
    """Client for HAProxy's admin socket at ``path``."""

    def __init__(self, path: pathlib.Path | str, timeout: float = 2.0) -> None:
        self.path = str(path)
        self.timeout = timeout

    def command(self, line: str) -> str:
        """Send one command, return HAProxy's full answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")

    def _checked(self, line: str) -> str:
        answer = self.command(line).strip()
        if answer not in _OK_REPLIES and not answer.startswith("New server registered"):
            raise RuntimeApiError(f"haproxy refused {line!r}: {answer}")
        return answer

    def backends(self) -> list[str]:
        lines = self.command("show backend").splitlines()
        return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]

    def servers_state(self) -> list[ServerState]:
        return parse_servers_state(self.command("show servers state"))

    def get_weight(self, backend: str, server: str) -> int:
        answer = self.command(f"get weight {backend}/{server}").strip()
        try:
            return int(answer.split()[0])
        except (IndexError, ValueError):
            raise RuntimeApiError(f"haproxy: get weight {backend}/{server}: {answer}") from None

    def set_weight(self, backend: str, server: str, weight: int) -> None:
        self._checked(f"set weight {backend}/{server} {int(weight)}")

    def set_addr(self, backend: str, server: str, port: int) -> None:
        answer = self.command(
            f"set server {backend}/{server} addr 127.0.0.1 port {int(port)}"
        ).strip()
        if answer and "changed" not in answer and "no need to change" not in answer:
            raise RuntimeApiError(f"haproxy: set addr of {backend}/{server}: {answer}")

    def add_server(self, backend: str, server: str, args: str) -> None:
        self._checked(f"add server {backend}/{server} {args}")
        self._checked(f"enable health {backend}/{server}")
        self._checked(f"enable server {backend}/{server}")

    def enable_server(self, backend: str, server: str) -> None:
        self._checked(f"enable server {backend}/{server}")

    def disable_server(self, backend: str, server: str) -> None:
        self._checked(f"disable server {backend}/{server}")

    def del_server(self, backend: str, server: str) -> None:
        self._checked(f"del server {backend}/{server}")

    def info(self) -> str:
        return self.command("show info")
