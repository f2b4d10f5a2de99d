"""The broker module: in-process broker without Redis, RedisBroker with it; real round trips."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from tests.conftest import service_unavailable
from workers.broker import InProcessWorker, build_broker


def test_without_redis_the_broker_is_in_process() -> None:
    assert isinstance(build_broker(None), StubBroker)


def _round_trip(broker: dramatiq.Broker) -> list[str]:
    received: list[str] = []
    done = threading.Event()
    queue = f"test-{uuid.uuid4().hex[:8]}"

    async def record(value: str) -> None:
        await asyncio.sleep(0)  # runs on the AsyncIO middleware's event loop
        received.append(value)
        done.set()

    actor = dramatiq.actor(record, broker=broker, queue_name=queue, actor_name=f"record_{queue}")
    worker = InProcessWorker(broker, threads=2)
    worker.start()
    try:
        actor.send("hello")
        assert done.wait(timeout=10), "the actor never ran"
    finally:
        worker.stop()
    return received


def test_in_process_worker_runs_async_actors() -> None:
    broker = build_broker(None)
    try:
        assert _round_trip(broker) == ["hello"]
    finally:
        broker.close()


def test_redis_broker_round_trip() -> None:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        service_unavailable("Redis", RuntimeError("TEST_REDIS_URL is not set"))
    assert url is not None
    broker = build_broker(url)
    assert isinstance(broker, RedisBroker)
    try:
        broker.client.ping()
    except Exception as exc:
        service_unavailable("Redis", exc)
    try:
        assert _round_trip(broker) == ["hello"]
    finally:
        broker.close()


@pytest.mark.parametrize("url", [None, ""])
def test_empty_url_means_in_process(url: str | None) -> None:
    assert isinstance(build_broker(url), StubBroker)
