"""HAProxy runtime API client: one command per connection on the admin socket.

Only the handful of commands the sync needs, each a method, plus a parser of
``show servers state``. A command HAProxy rejects raises
:class:`RuntimeApiError` with HAProxy's answer; an unreachable socket raises
``OSError`` (the caller retries on its next tick).

Reference: HAProxy management guide, section "Unix Socket commands"
(``set weight``, ``set server ... addr``, ``add server``, ``del server``,
``enable``/``disable server``, ``enable health``, ``show servers state``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import socket

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
