"""The Dramatiq broker: Redis when REDIS_URL is set, in-process otherwise.

The embedded single-machine mode needs no Redis: an in-process broker with worker threads
runs inside `switchboard serve`. Past one machine, `switchboard worker` processes consume
from Redis.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import dramatiq
import redis
import uvloop
from dramatiq.asyncio import EventLoopThread, set_event_loop_thread
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AsyncIO, CurrentMessage

import app.tables  # noqa: F401  (every table is known, so foreign keys resolve)
from app.config import EventLoopKind, Settings
from app.kit import outbox
from workers.jobs import collect_tasks, declare_actors
from workers.runtime import JobRuntime

NAMESPACE = "switchboard"
DEFAULT_TIMEOUT_SECONDS = 2.0


_LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


class _JobLoopThread(EventLoopThread):
    """Dramatiq's event loop thread, on the loop `factory` makes."""

    def __init__(
        self, logger: logging.Logger, factory: Callable[[], asyncio.AbstractEventLoop]
    ) -> None:
        super().__init__(logger)
        self.loop.close()  # the policy's default loop, never run
        self.loop = factory()


class JobEventLoop(AsyncIO):
    """Dramatiq's AsyncIO middleware (async actors run on one event loop thread), with that
    loop chosen by SWITCHBOARD_WORKER_EVENT_LOOP."""

    def __init__(self, kind: EventLoopKind = "uvloop") -> None:
        super().__init__()
        self.factory = _LOOP_FACTORIES[kind]

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        thread = _JobLoopThread(self.logger, self.factory)
        thread.start(timeout=1.0)
        set_event_loop_thread(thread)


def build_broker(
    redis_url: str | None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    event_loop: EventLoopKind = "uvloop",
) -> dramatiq.Broker:
    """A bare broker whose async actors run on one event loop of `event_loop`'s kind.

    On Redis every command is bounded by `timeout_seconds` (SWITCHBOARD_BROKER_TIMEOUT_SECONDS),
    so a Redis that stops answering costs a relay or a sweep that long, never a hang."""
    broker: dramatiq.Broker
    if redis_url:
        client = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds
        )
        broker = RedisBroker(client=client, namespace=NAMESPACE)  # type: ignore[no-untyped-call]
    else:
        broker = StubBroker()
        broker.emit_after("process_boot")
    broker.add_middleware(JobEventLoop(event_loop))
    broker.add_middleware(CurrentMessage())
    return broker


def build_job_engine(settings: Settings) -> tuple[dramatiq.Broker, JobRuntime]:
    """The broker with the job runtime and every domain's tasks declared on it."""
    broker = build_broker(
        settings.redis_url, settings.broker_timeout_seconds, settings.worker_event_loop
    )
    tasks = collect_tasks()
    relay = outbox.BrokerRelay(broker, getattr(broker, "client", None))
    runtime = JobRuntime(settings, tasks, relay)
    broker.add_middleware(runtime)
    declare_actors(broker, runtime, tasks)
    return broker, runtime


def install_job_engine(settings: Settings) -> tuple[dramatiq.Broker, JobRuntime]:
    """Build the engine, make its broker the process's, and relay committed jobs to it (from
    the relay's thread: never on the committing event loop)."""
    broker, runtime = build_job_engine(settings)
    dramatiq.set_broker(broker)
    assert runtime.relay is not None
    outbox.set_dispatcher(runtime.relay.submit)
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
