"""Prometheus for the local platform: config, target files, command line, start.

Model servers come and go as the sync starts them, so Prometheus discovers
them through a ``file_sd`` targets file the sync rewrites (atomically;
Prometheus watches the file, no reload needed). HAProxy's built-in exporter
is a static target; the promotion controller's ``/metrics`` is a second
file_sd file so it can be added later without touching the config.

Scrape interval is 1 s: local canaries step in tens of seconds, and a
decision needs several samples per window.
"""

from __future__ import annotations

import pathlib
from typing import Iterable

import yaml

from cogs.files import atomic_write_json, atomic_write_text
from local.platform import procs, services
from local.platform.workdir import PlatformConfig, Workdir

SCRAPE_INTERVAL = "1s"
MODELS_TARGETS = "models.json"
CONTROLLER_TARGETS = "controller.json"


def render_config(workdir: Workdir, config: PlatformConfig) -> str:
    """prometheus.yml text (pure)."""
    targets = workdir.targets
    doc = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "scrape_configs": [
            {
                "job_name": "model-servers",
                "file_sd_configs": [
                    {"files": [str(targets / MODELS_TARGETS)], "refresh_interval": "5s"}
                ],
            },
            {
                "job_name": "haproxy",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{config.haproxy_stats_port}"]}
                ],
            },
            {
                # the router's own response-time histograms (local/platform/router_latency.lua)
                "job_name": "haproxy-latency",
                "metrics_path": "/router-latency",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{config.haproxy_stats_port}"]}
                ],
            },
            {
                "job_name": "controller",
                "file_sd_configs": [
                    {"files": [str(targets / CONTROLLER_TARGETS)], "refresh_interval": "5s"}
                ],
            },
        ],
    }
    header = "# Rendered by `mlops up`; edits are overwritten.\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def model_targets(servers: Iterable[tuple[str, str, int]]) -> list[dict[str, object]]:
    """file_sd document for (model, version, port) triples (pure).

    Target labels are ``app``/``version``/``deployment`` -- not
    ``model_name``/``model_version``, which the servers' own series carry and
    a same-named target label would rename to ``exported_*``.
    """
    return [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {"app": model, "version": version, "deployment": f"{model}-{version}"},
        }
        for model, version, port in sorted(servers)
    ]


def write_model_targets(workdir: Workdir, servers: Iterable[tuple[str, str, int]]) -> None:
    atomic_write_json(workdir.targets / MODELS_TARGETS, model_targets(servers))


def write_controller_targets(workdir: Workdir, port: int | None) -> None:
    doc = (
        []
        if port is None
        else [{"targets": [f"127.0.0.1:{port}"], "labels": {"app": "mlops-controller"}}]
    )
    atomic_write_json(workdir.targets / CONTROLLER_TARGETS, doc)


def command(binary: str, workdir: Workdir, config: PlatformConfig) -> list[str]:
    data: pathlib.Path = workdir.prometheus / "data"
    return [
        binary,
        f"--config.file={workdir.prometheus / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address=127.0.0.1:{config.prometheus_port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def start(workdir: Workdir, config: PlatformConfig, binary: str) -> services.Started:
    """Render the config and the target files, start Prometheus, wait for ``/-/ready``."""
    atomic_write_text(
        workdir.prometheus / "prometheus.yml", render_config(workdir, config)
    )
    if not (workdir.targets / MODELS_TARGETS).exists():
        write_model_targets(workdir, [])
    write_controller_targets(workdir, config.controller_port)
    log = workdir.logs / "prometheus.log"
    popen, record = procs.spawn(
        "prometheus", command(binary, workdir, config), log,
        env=procs.marked_env(str(workdir.root)),
    )
    procs.write_record(workdir.pidfile("prometheus"), record)
    services.wait_ready(lambda: services.http_ok(config.prometheus_port, "/-/ready"),
                        "prometheus", log, record, popen)
    return popen, record
