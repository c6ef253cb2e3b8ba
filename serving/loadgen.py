"""Open-loop load generator: requests at a fixed rate, whatever the server does.

Send times are scheduled up front; a request due while every sender is busy is counted
as `dropped`, the sender's lateness as `lag`. Bodies are real images as one BYTES tensor
per request, each drawn at random (`seed`). A stop (`Stop.on_signals`) is read between
two sends. Why open loop, random draws and the stop flag: docs/inside-serving.md.
"""

import base64
import contextlib
import dataclasses
import json
import pathlib
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import numpy as np
import orjson
import requests

from contracts.errors import ExitCode, MlopsError
from serving.client import encode_request
from serving.protocol import Tensor

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE_VAL = REPO_ROOT / "examples" / "shapes-detector" / "data" / "val"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class LoadError(MlopsError):
    """Bad load-generator input (no images, unreachable server)."""

    exit_code = ExitCode.BAD_INPUT


def default_images_dir() -> pathlib.Path:
    """The example model repo's validation images."""
    return EXAMPLE_VAL


def load_images(directory: pathlib.Path, limit: int = 256) -> list[bytes]:
    """Encoded images from a directory (sorted, at most `limit`).

    A model repo directory works too: its `data/val` images are used.
    """
    if (directory / "data" / "val").is_dir():
        directory = directory / "data" / "val"
    if not directory.is_dir():
        raise LoadError(
            f"image directory {directory} does not exist (pass --images DIR, or generate the "
            f"example data: python examples/shapes-detector/shapes_data.py --data-dir "
            f"examples/shapes-detector/data)"
        )
    files = sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise LoadError(f"no PNG or JPEG images in {directory}")
    return [p.read_bytes() for p in files]


@dataclasses.dataclass
class LoadReport:
    """What one load run offered and what came back."""

    url: str
    model: str
    route: str
    offered_rps: float
    duration_s: float
    scheduled: int
    sent: int
    dropped: int  # not sent: all `concurrency_cap` slots busy at the send time
    achieved_rps: float  # requests actually sent per second of the send window
    throughput_rps: float  # 200 responses per second, first send to last response
    status_counts: dict[str, int]  # "200", "503", ... and "error" (timeout, reset)
    latency_ms: dict[str, float]  # p50, p90, p99, max, mean over answered requests
    lag_ms: dict[str, float]  # how late sends were against the schedule (p50, p99, max)
    stopped_early: bool = False  # Ctrl-C / SIGTERM: the report covers what was sent until then
    #: The first answers of each non-200 status: "t+12.3 s: <body or error>", to say why.
    error_samples: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """Human-readable lines for the terminal."""
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.status_counts.items()))
        lat = self.latency_ms
        return "\n".join(
            [
                f"target   {self.url} model {self.model} ({self.route})",
                f"offered  {self.offered_rps:.1f} req/s for {self.duration_s:.1f} s "
                f"({self.scheduled} scheduled, {self.sent} sent, {self.dropped} dropped)"
                + (" - stopped early" if self.stopped_early else ""),
                f"achieved {self.achieved_rps:.1f} req/s sent, "
                f"{self.throughput_rps:.1f} req/s answered 200",
                f"status   {codes or 'none'}",
                f"latency  p50 {lat.get('p50', float('nan')):.2f} ms  "
                f"p90 {lat.get('p90', float('nan')):.2f} ms  "
                f"p99 {lat.get('p99', float('nan')):.2f} ms  "
                f"max {lat.get('max', float('nan')):.2f} ms",
                f"lag      p99 {self.lag_ms.get('p99', float('nan')):.2f} ms behind schedule",
                *(
                    f"{status:<8} {sample}"
                    for status, kept in sorted(self.error_samples.items())
                    for sample in kept
                ),
            ]
        )

    def to_json(self) -> str:
        """The report as a JSON document."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


SAMPLES_PER_STATUS = 5

#: How often the send loop looks for a stop while it waits for the next send time.
STOP_POLL_S = 0.05


class Stop:
    """A request to stop sending, which a signal handler may make: it only sets a flag
    (no lock, so it cannot deadlock against the main thread it interrupts)."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True

    @classmethod
    @contextlib.contextmanager
    def on_signals(cls, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
                   ) -> Iterator["Stop"]:
        """A stop the first of `signals` requests (main thread only); a second one acts
        as it did before (Ctrl-C twice interrupts at once). The handlers are put back
        on exit."""
        stop = cls()
        previous = {sig: signal.getsignal(sig) for sig in signals}

        def handler(signum: int, frame: object) -> None:
            stop.request()
            for sig, old in previous.items():
                signal.signal(sig, old)

        for sig in signals:
            signal.signal(sig, handler)
        try:
            yield stop
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean in milliseconds of values in seconds (empty -> {})."""
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64) * 1e3
    return {
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
        "mean": float(arr.mean()),
    }


def discover_model(url: str, timeout: float = 5.0) -> str:
    """The single model a server serves (its repository index)."""
    try:
        response = requests.post(f"{url.rstrip('/')}/v2/repository/index", timeout=timeout)
        response.raise_for_status()
        models = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise LoadError(f"cannot ask {url} which model it serves ({exc}); pass --model") from None
    if len(models) != 1:
        raise LoadError(f"{url} serves {len(models)} models; pass --model")
    return str(models[0]["name"])


def build_bodies(
    images: Sequence[bytes], route: str, binary: bool
) -> list[tuple[bytes, dict[str, str]]]:
    """One request body (and headers) per image, for the chosen route."""
    bodies = []
    for image in images:
        if route == "paddle-serving":
            doc = {"feed": [{"image": base64.b64encode(image).decode("ascii")}], "fetch": ["bbox"]}
            bodies.append((orjson.dumps(doc), {"Content-Type": "application/json"}))
            continue
        data = np.empty(1, dtype=object)
        data[0] = image
        body, length = encode_request([Tensor("image_bytes", "BYTES", (1,), data)], binary=binary)
        headers = {"Content-Type": "application/json"}
        if length is not None:
            headers = {"Content-Type": "application/octet-stream",
                       "Inference-Header-Content-Length": str(length)}
        bodies.append((body, headers))
    return bodies


def run_load(
    url: str,
    rps: float,
    duration: float,
    images: Sequence[bytes],
    model: str | None = None,
    concurrency_cap: int = 64,
    timeout: float = 10.0,
    route: str = "infer",
    binary: bool = False,
    seed: int | None = None,
    stop: Stop | None = None,
) -> LoadReport:
    """Offer `rps` requests per second for `duration` seconds; returns the report.

    `seed` fixes the random draw of images (None: a fresh one each run). `stop`, once
    requested, ends the sending early: the requests already sent finish and the report
    covers them (`stopped_early`)."""
    stop = stop or Stop()
    if rps <= 0 or duration <= 0:
        raise LoadError("--rps and --duration must be positive")
    if concurrency_cap < 1:
        raise LoadError("--concurrency-cap must be at least 1")
    if not images:
        raise LoadError("no images to send")
    url = url.rstrip("/")
    if route == "paddle-serving":
        target = f"{url}/GeneralModelService/inference"
        model = model or "-"
    else:
        model = model or discover_model(url, timeout)
        target = f"{url}/v2/models/{model}/infer"
    bodies = build_bodies(images, route, binary)
    draw = np.random.default_rng(seed)

    local = threading.local()
    slots = threading.BoundedSemaphore(concurrency_cap)
    results: list[tuple[str, float, float]] = []  # (status, latency s, lag s)
    samples: dict[str, list[str]] = {}
    last_done = [0.0]

    def send(image: int, due: float) -> None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        body, headers = bodies[image]
        sent_at = time.perf_counter()
        detail = ""
        try:
            response = session.post(target, data=body, headers=headers, timeout=timeout)
            status = str(response.status_code)
            if status != "200":
                detail = response.text
        except requests.RequestException as exc:
            status, detail = "error", f"{type(exc).__name__}: {exc}"
        finally:
            slots.release()
        done = time.perf_counter()
        results.append((status, done - sent_at, sent_at - due))
        if detail:
            kept = samples.setdefault(status, [])
            if len(kept) < SAMPLES_PER_STATUS:
                kept.append(f"t+{sent_at - start:.1f} s: {' '.join(detail.split())[:200]}")
        last_done[0] = max(last_done[0], done)

    scheduled = max(1, int(round(rps * duration)))
    dropped = 0
    stopped_early = False
    handed = 0
    with ThreadPoolExecutor(max_workers=concurrency_cap, thread_name_prefix="load") as pool:
        start = time.perf_counter() + 0.05
        for i in range(scheduled):
            due = start + i / rps
            while (delay := due - time.perf_counter()) > 0 and not stop.requested:
                time.sleep(min(delay, STOP_POLL_S))
            if stop.requested:
                stopped_early = True
                break
            if not slots.acquire(blocking=False):
                dropped += 1
                continue
            pool.submit(send, int(draw.integers(len(bodies))), due)
            handed += 1
        send_window = max(time.perf_counter() - start, 1e-9)
    # the pool has waited for every request it was handed: each is in `results`
    assert len(results) == handed, (len(results), handed)
    if stopped_early:  # the plan shrinks to the send times reached: sent + dropped
        scheduled, duration = handed + dropped, min(duration, send_window)
    statuses = Counter(status for status, _, _ in results)
    answered = [lat for status, lat, _ in results if status != "error"]
    ok = statuses.get("200", 0)
    elapsed = max(last_done[0] - start, 1e-9)
    lag = percentiles([lag for _, _, lag in results])
    return LoadReport(
        url=url,
        model=model,
        route=route,
        offered_rps=rps,
        duration_s=duration,
        scheduled=scheduled,
        sent=len(results),
        dropped=dropped,
        achieved_rps=len(results) / send_window,
        throughput_rps=ok / elapsed,
        status_counts=dict(statuses),
        latency_ms=percentiles(answered),
        lag_ms={k: lag[k] for k in ("p50", "p99", "max") if k in lag},
        stopped_early=stopped_early,
        error_samples=samples,
    )


def report_from_json(text: str) -> LoadReport:
    """Read back a report written by `LoadReport.to_json`."""
    data: dict[str, Any] = json.loads(text)
    return LoadReport(**data)
