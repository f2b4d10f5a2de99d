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

from app.config import Settings
from app.events.service import FAN_OUT_ACTOR
from app.webhooks.delivery import DELIVER_ACTOR
from tests.conftest import service_unavailable
from workers.broker import InProcessWorker, build_broker
from workers.jobs import collect_tasks, declare_actors
from workers.runtime import JobRuntime


def test_without_redis_the_broker_is_in_process() -> None:
    assert isinstance(build_broker(None), StubBroker)


def _round_trip(broker: dramatiq.Broker, loops: list[str] | None = None) -> list[str]:
    received: list[str] = []
    done = threading.Event()
    queue = f"test-{uuid.uuid4().hex[:8]}"

    async def record(value: str) -> None:
        await asyncio.sleep(0)  # runs on the AsyncIO middleware's event loop
        if loops is not None:
            loops.append(type(asyncio.get_running_loop()).__module__)
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


@pytest.mark.parametrize(
    ("setting", "loop_module"), [(None, "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_jobs_run_on_the_event_loop_the_setting_names(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, loop_module: str
) -> None:
    if setting is not None:
        monkeypatch.setenv("SWITCHBOARD_WORKER_EVENT_LOOP", setting)
    settings = make_settings_for_broker()
    broker = build_broker(None, event_loop=settings.worker_event_loop)
    loops: list[str] = []
    try:
        assert _round_trip(broker, loops) == ["hello"]
    finally:
        broker.close()
    assert [module.split(".")[0] for module in loops] == [loop_module]


def test_an_unknown_event_loop_is_refused_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_WORKER_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="worker_event_loop"):
        make_settings_for_broker()


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


def test_the_worker_collects_each_domains_tasks() -> None:
    tasks = collect_tasks()
    assert {FAN_OUT_ACTOR, DELIVER_ACTOR} <= set(tasks)
    fan_out, deliver = tasks[FAN_OUT_ACTOR], tasks[DELIVER_ACTOR]
    assert (fan_out.queue, fan_out.detached) == ("events", False)
    assert (deliver.queue, deliver.detached) == ("webhooks", True)
    assert fan_out.priority < deliver.priority  # a worker takes fan-outs first
    assert collect_tasks(("app.contacts",)) == {}  # a domain without tasks.py


def test_two_domains_may_not_declare_one_job() -> None:
    with pytest.raises(RuntimeError, match=r"events\.fan_out"):
        collect_tasks(("app.webhooks", "app.webhooks"))


def test_every_task_becomes_an_actor_on_its_queue() -> None:
    broker = build_broker(None)
    try:
        tasks = collect_tasks()
        actors = declare_actors(broker, JobRuntime(make_settings_for_broker()), tasks)
        assert {name: actor.queue_name for name, actor in actors.items()} == {
            name: task.queue for name, task in tasks.items()
        }
        assert {name: actor.priority for name, actor in actors.items()} == {
            name: task.priority for name, task in tasks.items()
        }
    finally:
        broker.close()


def make_settings_for_broker() -> Settings:
    return Settings(database_url="sqlite+aiosqlite:///:memory:", secret_key="x" * 40)


def test_switchboard_worker_hands_its_prefetch_to_dramatiq(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through Dramatiq's documented `dramatiq_queue_prefetch` variable; Dramatiq is already
    imported here, so the worker processes are spawned and read it afresh."""
    import dramatiq.cli

    from app.cli import build_parser, cmd_worker

    seen: dict[str, object] = {}

    def fake_main(args: object) -> int:
        seen["args"] = args
        seen["prefetch"] = os.environ.get("dramatiq_queue_prefetch")  # noqa: SIM112
        seen["threads"] = os.environ.get("SWITCHBOARD_WORKER_THREADS")
        return 0

    monkeypatch.setattr(dramatiq.cli, "main", fake_main)
    monkeypatch.delenv("dramatiq_queue_prefetch", raising=False)
    monkeypatch.delenv("SWITCHBOARD_WORKER_THREADS", raising=False)
    settings = make_settings_for_broker().model_copy(
        update={"redis_url": "redis://127.0.0.1:1/0", "worker_prefetch": 7}
    )
    assert cmd_worker(settings, build_parser().parse_args(["worker", "--threads", "3"])) == 0
    assert seen["prefetch"] == "7"
    # The processes' pools are sized for the threads they run (they read the variable).
    assert seen["threads"] == "3"
    args = seen["args"]
    assert getattr(args, "use_spawn", None) is True
    assert getattr(args, "threads", None) == 3
    # Without --threads: the setting's value, for Dramatiq and the pools alike.
    settings = settings.model_copy(update={"worker_threads": 6})
    assert cmd_worker(settings, build_parser().parse_args(["worker"])) == 0
    assert (getattr(seen["args"], "threads", None), seen["threads"]) == (6, "6")
    monkeypatch.delenv("dramatiq_queue_prefetch", raising=False)
    monkeypatch.delenv("SWITCHBOARD_WORKER_THREADS", raising=False)
