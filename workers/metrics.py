"""Prometheus figures of the job engine, and how a `switchboard worker` serves them (each
domain's tasks.py declares its own figures, e.g. app/webhooks/tasks.py).

In the embedded mode (`switchboard serve` without Redis) they live in the API process's registry
and its /metrics serves them. A `switchboard worker` runs `--processes` Dramatiq processes: with
a metrics port (SWITCHBOARD_WORKER_METRICS_PORT), each of them writes its figures to files in
one directory of that worker (prometheus_client's multiprocess mode, chosen by workers/process.py
before prometheus_client is first imported), and one of them serves the sum (`MetricsExporter`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import dramatiq
import structlog
from dramatiq.middleware import Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector

logger = structlog.get_logger("switchboard.worker")

JOB_FAILURES = Counter(
    "switchboard_job_failures_total", "Job runs that raised, by actor", ["actor"]
)
STALE_RUNS = Counter(
    "switchboard_job_stale_runs_total",
    "Runs refused when settling: their lease ran out and another run holds the job",
    ["actor"],
)
OUTBOX_JOBS = Gauge(
    "switchboard_outbox_jobs",
    "Jobs in the outbox by status (pending = queue depth)",
    ["status"],
    # Every worker process sweeps and sets the same database-wide count: across processes the
    # latest value is the figure (not one series per process). Ignored in a single process.
    multiprocess_mode="mostrecent",
)

EXPORTER_LOCK = "exporter.lock"


def record_outbox(counts: dict[str, int]) -> None:
    for status, count in counts.items():
        OUTBOX_JOBS.labels(status).set(count)


def writes_to_files() -> bool:
    """Whether this process's figures go to the multiprocess directory (else: in memory)."""
    return bool(getattr(prometheus_values.ValueClass, "_multiprocess", False))


class MetricsExporter(Middleware):
    """Serves on `port` the sum of the figures of every process that writes to `directory`.

    Every process of one `switchboard worker` has this middleware; the first to boot creates
    the directory's lock file and serves, the others only write their figures. One exporter per
    worker, then, and it lives as long as the worker: Dramatiq stops every process of a worker
    when one of them dies.
    """

    def __init__(self, directory: Path, port: int, host: str = "0.0.0.0") -> None:  # noqa: S104
        self.directory = directory
        self.port = port
        self.host = host
        self._server: WSGIServer | None = None

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        try:
            descriptor = os.open(self.directory / EXPORTER_LOCK, os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return  # another process of this worker serves
        os.close(descriptor)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.directory))  # type: ignore[no-untyped-call]
        try:
            self._server, _thread = start_http_server(self.port, addr=self.host, registry=registry)
        except OSError as exc:
            logger.error(
                "worker metrics not served", port=self.port, error=f"{type(exc).__name__}: {exc}"
            )
            return
        logger.info("serving worker metrics", port=self.port, directory=str(self.directory))

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # After the worker threads stopped: a last scrape still sees the jobs they finished.
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.shutdown()
                self._server.server_close()
            self._server = None
