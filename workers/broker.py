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
from dramatiq.middleware import AsyncIO

NAMESPACE = "switchboard"


def build_broker(redis_url: str | None) -> dramatiq.Broker:
    """A broker with AsyncIO middleware (actors may be `async def`)."""
    broker: dramatiq.Broker
    if redis_url:
        broker = RedisBroker(url=redis_url, namespace=NAMESPACE)  # type: ignore[no-untyped-call]
    else:
        broker = StubBroker()
        broker.emit_after("process_boot")
    broker.add_middleware(AsyncIO())
    return broker


def install_broker(redis_url: str | None) -> dramatiq.Broker:
    """Build the broker and make it the global one that actors declared later bind to."""
    broker = build_broker(redis_url)
    dramatiq.set_broker(broker)
    return broker


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
