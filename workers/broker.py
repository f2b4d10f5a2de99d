"""The Dramatiq broker: Redis when REDIS_URL is set, in-process otherwise.

The embedded single-machine mode needs no Redis: an in-process broker with worker threads
runs inside `switchboard serve`. Past one machine, `switchboard worker` processes consume
from Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AsyncIO, CurrentMessage

import app.db.models  # noqa: F401  (every table is known, so foreign keys resolve)
from app.config import Settings
from app.kit import outbox
from workers.jobs import declare_actors
from workers.runtime import JobRuntime

NAMESPACE = "switchboard"


def build_broker(redis_url: str | None) -> dramatiq.Broker:
    """A bare broker with AsyncIO middleware (actors may be `async def`)."""
    broker: dramatiq.Broker
    if redis_url:
        broker = RedisBroker(url=redis_url, namespace=NAMESPACE)  # type: ignore[no-untyped-call]
    else:
        broker = StubBroker()
        broker.emit_after("process_boot")
    broker.add_middleware(AsyncIO())
    broker.add_middleware(CurrentMessage())
    return broker


def build_job_engine(settings: Settings) -> tuple[dramatiq.Broker, JobRuntime]:
    """The broker with the job runtime and every actor declared on it."""
    broker = build_broker(settings.redis_url)
    runtime = JobRuntime(settings)
    broker.add_middleware(runtime)
    declare_actors(broker, runtime)
    return broker, runtime


def install_job_engine(settings: Settings) -> tuple[dramatiq.Broker, JobRuntime]:
    """Build the engine, make its broker the process's, and relay committed jobs to it."""
    broker, runtime = build_job_engine(settings)
    dramatiq.set_broker(broker)
    outbox.set_dispatcher(outbox.broker_dispatcher)
    return broker, runtime


@dataclass
class InProcessWorker:
    """Worker threads for the embedded mode, started and stopped with the server."""

    broker: dramatiq.Broker
    threads: int = 4
    _worker: dramatiq.Worker | None = None

    def start(self) -> None:
        self._worker = dramatiq.Worker(self.broker, worker_threads=self.threads, worker_timeout=100)
        self._worker.start()

    def stop(self, timeout_ms: int = 10_000) -> None:
        if self._worker is not None:
            self._worker.stop(timeout=timeout_ms)
            self._worker = None
