"""`mlops ui` under many event streams: is `/api/info` still quick? (issue 41, finding 14)

    python benchmarks/ui_streams.py [--streams 400] [--max-streams 32] [--per-client 8]

Serves the UI (uvicorn on loopback, a real GitOps repo with one model and one PR,
`tests/fixtures/ui.py`) and opens `--streams` raw `GET /api/events?page=models`
connections, spread over 127.0.0.1..127.0.0.50 as separate clients, and keeps them
open. After a settling pause it times 20 `GET /api/info` requests. Run once with the
defaults (the caps) and once with `--max-streams 100000 --per-client 100000` (no cap;
builds are still shared between streams). The review measured 0.003 s -> 5.5 s for
400 streams before either. Results go to benchmarks/results/ui_streams.json (one entry
per cap setting).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import pathlib
import socket
import sys
import tempfile
import time

import requests
from _platform import ROOT, machine, summary  # first: it puts the repo root on sys.path

from mlops.ui.app import UiConfig
from tests.fixtures.ui import Served, make_ui_repo


def open_stream(port: int, source: str) -> tuple[socket.socket, int]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60,
                                    source_address=(source, 0))
    sock.sendall(b"GET /api/events?page=models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            return sock, 0
        head += chunk
    return sock, int(head.split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--max-streams", type=int, default=UiConfig.max_streams)
    parser.add_argument("--per-client", type=int, default=UiConfig.max_streams_per_client)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui-streams-") as tmp:
        repo = make_ui_repo(pathlib.Path(tmp))
        config = UiConfig(gitops=str(repo.gitops), user="bench", max_streams=args.max_streams,
                          max_streams_per_client=args.per_client)
        with Served(config) as app:
            idle = []
            for _ in range(20):
                started = time.perf_counter()
                requests.get(f"{app.url}api/info", timeout=60).raise_for_status()
                idle.append(time.perf_counter() - started)
            sockets, statuses = [], collections.Counter()
            for i in range(args.streams):
                sock, status = open_stream(app.port, f"127.0.0.{1 + i % 50}")
                statuses[status] += 1
                (sockets.append(sock) if status == 200 else sock.close())
            time.sleep(args.settle)
            busy = []
            for _ in range(20):
                started = time.perf_counter()
                requests.get(f"{app.url}api/info", timeout=120).raise_for_status()
                busy.append(time.perf_counter() - started)
            for sock in sockets:
                sock.close()
    entry = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "streams_asked": args.streams,
        "max_streams": args.max_streams, "per_client": args.per_client,
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "api_info_seconds_idle": summary(idle), "api_info_seconds_with_streams": summary(busy),
    }
    out = ROOT / "benchmarks" / "results" / "ui_streams.json"
    runs = json.loads(out.read_text()) if out.exists() else []
    runs = [r for r in runs if (r["max_streams"], r["per_client"]) !=
            (args.max_streams, args.per_client)] + [entry]
    out.write_text(json.dumps(runs, indent=2) + "\n")
    print(json.dumps(entry, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
