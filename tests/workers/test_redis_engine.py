"""The job engine on Redis with real `switchboard worker` processes (PostgreSQL + Redis only).

- Redis flushed mid-way, with messages waiting in it (worker busy, then worker stopped): every
  event still reaches every subscription, exactly one delivery per (event, subscription).
- A worker killed -9 while a delivery is in progress: the next worker completes it once the
  run's lease expires (the outbox sweep re-sends it).
- A worker with two processes serves the sum of their figures on its metrics port.

The API side runs in this process (REST app on a Redis-configured Resources, so the after-commit
relay enqueues on Redis); the worker side is `switchboard worker` in a subprocess.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dramatiq
import httpx
import pytest
import redis
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import delete, func, select

from app.core.clock import utcnow
from app.db.engine import create_engine, create_sessionmaker
from app.kit import outbox
from app.kit.outbox_models import OutboxJob
from app.main import create_app
from app.webhooks.delivery import DELIVER_ACTOR
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt
from tests.conftest import (
    TEST_SECRET,
    TenantFactory,
    flushable_redis_url,
    fresh_database,
)
from tests.webhooks.receiver import Answer, running_receiver
from tests.webhooks.test_delivery_engine import Engine, engine_settings, eventually, wait_for
from tests.workers.worker_process import (
    WorkerProcess,
    free_port,
    metric_value,
    running_worker,
)
from workers.broker import install_job_engine

pytestmark = [pytest.mark.redis, pytest.mark.slow]

SWEEP_SECONDS = 0.5
REDISPATCH_SECONDS = 2.0
QUEUES = ("events", "webhooks")
# Where a worker's processes write their figures, under SWITCHBOARD_VAR_DIR (docs/operations.md);
# not imported from workers.process, which installs a job engine when imported.
METRICS_DIRNAME = "worker-metrics"


@pytest.fixture(scope="module")
def redis_url() -> str:
    """TEST_REDIS_URL: the one Redis database these tests may flush."""
    return flushable_redis_url()


@pytest.fixture(scope="module")
def database_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("redis"), "sb_redis_jobs") as url:
        yield url


@pytest.fixture
def flushable(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@asynccontextmanager
async def running_stack(
    database_url: str,
    redis_url: str,
    tmp_path: Path,
    *,
    broker_url: str | None = None,
    **overrides: Any,
) -> AsyncIterator[Engine]:
    """The REST app and the relay of this process on Redis (the relay on `broker_url` when
    given); no worker runs in this process. `overrides`: more settings of the app."""
    settings = engine_settings(database_url, tmp_path, redis_url=redis_url, **overrides)
    database = create_engine(database_url, pool_size=2)
    sessionmaker = create_sessionmaker(database)
    broker, _runtime = install_job_engine(
        settings.model_copy(update={"redis_url": broker_url or redis_url})
    )
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
                yield Engine(settings, client, sessionmaker, TenantFactory(sessionmaker), broker)
    finally:
        outbox.set_dispatcher(None)
        broker.close()
        async with sessionmaker() as session:
            await session.execute(delete(OutboxJob))
            await session.commit()
        await database.dispose()


@pytest.fixture
async def stack(
    database_url: str, redis_url: str, flushable: redis.Redis, tmp_path: Path
) -> AsyncIterator[Engine]:
    async with running_stack(database_url, redis_url, tmp_path) as engine:
        yield engine


def worker_env(
    database_url: str, redis_url: str, tmp_path: Path, **overrides: Any
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHBOARD_", "PROMETHEUS"))}
    env.update(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        SWITCHBOARD_SECRET_KEY=TEST_SECRET,
        SWITCHBOARD_VAR_DIR=str(tmp_path / "var"),
        SWITCHBOARD_LOG_LEVEL="warning",
        SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS="true",
        SWITCHBOARD_OUTBOX_SWEEP_SECONDS=str(SWEEP_SECONDS),
        SWITCHBOARD_OUTBOX_REDISPATCH_SECONDS=str(REDISPATCH_SECONDS),
        SWITCHBOARD_WEBHOOK_RETRY_SCALE="0.002",
        SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS="2",
        # A run that never settles (a killed worker, or a stop that closes the runtime under
        # running jobs: see test_a_graceful_stop_finishes_the_delivery_in_progress) holds its
        # job this long: the shortest lease the settings accept for the timeout above.
        SWITCHBOARD_JOB_LEASE_SECONDS="4",
        # The lease must outlast a document's extraction too (no document is indexed here).
        SWITCHBOARD_KNOWLEDGE_EXTRACTION_SECONDS="2",
        SWITCHBOARD_WORKER_PREFETCH="1",  # the rest waits in Redis, where a flush loses it
        SWITCHBOARD_WORKER_METRICS_PORT=str(free_port()),
    )
    env.update({key: str(value) for key, value in overrides.items()})
    return env


def queued_jobs(client: redis.Redis) -> set[str]:
    """Outbox job ids of the messages Redis holds (waiting or fetched, not yet acknowledged)."""
    return {
        dramatiq.Message.decode(raw if isinstance(raw, bytes) else raw.encode()).args[0]
        for queue in QUEUES
        for raw in client.hvals(f"switchboard:{queue}.msgs")
    }


async def outbox_rows(stack: Engine) -> list[OutboxJob]:
    async with stack.sessionmaker() as session:
        return list((await session.scalars(select(OutboxJob))).all())


async def create_contacts(stack: Engine, tenant: Any, first: int, count: int) -> list[str]:
    ids = []
    for index in range(first, first + count):
        contact = await stack.create_contact(tenant, phone_number=f"+1415555{index:04d}")
        ids.append(contact["id"])
    return ids


async def test_flushing_redis_mid_way_loses_no_delivery(
    stack: Engine, flushable: redis.Redis, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    tenant = await stack.tenants.organization()
    # One delivery at a time on the worker's loop: the others wait in Redis (with room for
    # many, a fast worker had taken every job before the first flush, leaving Redis empty).
    env = worker_env(database_url, redis_url, tmp_path, SWITCHBOARD_WORKER_LOCAL_JOBS=1)
    log = tmp_path / "worker.log"
    flushed: list[set[str]] = []
    with running_receiver() as receiver:
        # Slow answers: deliveries queue up in Redis, even when the contacts are written
        # slowly (a loaded machine).
        receiver.default = Answer(200, delay=0.5)
        paths = ("/a", "/b")
        for path in paths:
            await stack.subscribe(tenant, receiver.url + path, ["lead.created"])

        # 1. The worker is busy with a delivery while the other jobs wait in Redis: flush.
        with running_worker(env, log) as worker:
            contacts = await create_contacts(stack, tenant, 0, 6)
            await wait_for(receiver, 1)
            flushed.append(queued_jobs(flushable))
            flushable.flushdb()
            await wait_for(receiver, 3)  # the worker goes on after the flush
        receiver.default = Answer(200, delay=0.15)

        # 2. No worker: the jobs of new writes are relayed to Redis, then flushed unseen.
        before = {row.id for row in await outbox_rows(stack)}
        contacts += await create_contacts(stack, tenant, 6, 4)
        relayed = {row.id for row in await outbox_rows(stack)} - before

        async def all_relayed() -> bool:  # the relay thread sends them just after commit
            return relayed <= queued_jobs(flushable)

        await eventually(all_relayed, seconds=5)
        flushed.append(queued_jobs(flushable))
        flushable.flushdb()
        with running_worker(env, log) as worker:
            expected = len(contacts) * len(paths)
            try:
                await wait_for(receiver, expected, seconds=25)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{worker.log_tail()}") from exc

            async def settled() -> bool:
                return await outbox_rows(stack) == []

            await eventually(settled, seconds=10)
            await asyncio.sleep(REDISPATCH_SECONDS + SWEEP_SECONDS)  # late duplicates show up
            requests = list(receiver.requests)

    assert len(flushed[0]) > 1, "no job was waiting in Redis at the first flush"
    assert len(relayed) == 4
    assert relayed <= flushed[1], "the new fan-out jobs were not in Redis when it was flushed"
    deliveries_by_path: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for request in requests:
        body = request.json
        assert body["type"] == "lead.created"
        deliveries_by_path[request.path][body["data"]["id"]].add(request.headers["webhook-id"])
    assert set(deliveries_by_path) == set(paths)
    for path in paths:
        by_contact = deliveries_by_path[path]
        assert sorted(by_contact) == sorted(contacts), f"{path} missed contacts"
        assert all(len(ids) == 1 for ids in by_contact.values()), f"{path}: two deliveries"
    sent = Counter(request.headers["webhook-id"] for request in requests)
    assert len(sent) == expected
    duplicates = sum(count - 1 for count in sent.values())
    async with stack.sessionmaker() as session:
        failed = (
            await session.scalars(
                select(WebhookDeliveryAttempt.error).where(
                    WebhookDeliveryAttempt.success.is_(False)
                )
            )
        ).all()
    print(
        f"flush test: {expected} deliveries, {duplicates} duplicate requests, failed attempts"
        f" {Counter(failed)}; jobs flushed from Redis: {len(flushed[0])}, then {len(flushed[1])}"
    )
    async with stack.sessionmaker() as session:
        statuses = dict(
            (
                await session.execute(
                    select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
                )
            ).all()
        )
    assert statuses == {"succeeded": expected}


async def test_a_delivery_whose_worker_is_killed_completes_on_the_next_worker(
    stack: Engine, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    lease = 4.0  # longer than the next worker takes to boot: the re-send waits for the lease
    tenant = await stack.tenants.organization()
    env = worker_env(
        database_url,
        redis_url,
        tmp_path,
        SWITCHBOARD_JOB_LEASE_SECONDS=lease,
        # The worker is killed as soon as the request arrives, long before this.
        SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS=2,
    )
    log = tmp_path / "worker.log"
    with running_receiver() as receiver:
        receiver.script = [Answer(200, delay=25)]  # the first request is held open
        subscription = await stack.subscribe(tenant, receiver.url, ["lead.created"])
        worker = WorkerProcess(env, log)
        try:
            worker.wait_ready()
            await stack.create_contact(tenant)
            [held] = await wait_for(receiver, 1)
            worker.kill()  # kill -9 mid-request: the response is never read
        finally:
            worker.stop()
        killed_at = utcnow()

        [job] = [row for row in await outbox_rows(stack) if row.actor == DELIVER_ACTOR]
        assert (job.status, job.starts) == ("pending", 1)  # claimed once, never settled
        assert job.locked_until is not None
        assert job.locked_until > killed_at  # the dead run's lease still holds the job
        assert await stack.attempts(subscription.id) == []  # the killed run recorded nothing
        with running_worker(env, log) as worker:
            try:
                requests = await wait_for(receiver, 2, seconds=20)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{worker.log_tail()}") from exc

            async def finished() -> bool:
                return await outbox_rows(stack) == []

            await eventually(finished)

    first, second = requests[:2]
    assert first.headers["webhook-id"] == held.headers["webhook-id"]
    assert second.headers["webhook-id"] == first.headers["webhook-id"]  # the same delivery
    assert second.json["id"] == first.json["id"]
    [attempt] = await stack.attempts(subscription.id)
    assert (attempt.attempt, attempt.status_code, attempt.success) == (1, 200, True)
    assert attempt.created_at >= job.locked_until  # sent again only once the lease ran out
    [delivery] = await stack.deliveries(subscription.id)
    assert (delivery.status, delivery.attempt_count) == ("succeeded", 1)


async def test_a_graceful_stop_finishes_the_delivery_in_progress(
    stack: Engine, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    tenant = await stack.tenants.organization()
    env = worker_env(
        database_url,
        redis_url,
        tmp_path,
        SWITCHBOARD_JOB_LEASE_SECONDS=60,
        SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS=10,
    )
    log = tmp_path / "worker.log"
    with running_receiver() as receiver:
        # Still running when the worker stops (a worker process notices SIGTERM within 1 s).
        receiver.script = [Answer(200, delay=3)]
        subscription = await stack.subscribe(tenant, receiver.url, ["lead.created"])
        with running_worker(env, log) as worker:
            await stack.create_contact(tenant)
            await wait_for(receiver, 1)
            await asyncio.to_thread(worker.stop)  # SIGTERM: Dramatiq lets running jobs finish
    assert worker.process.returncode == 0, worker.log_tail()
    assert "not open" not in log.read_text(), worker.log_tail()
    [attempt] = await stack.attempts(subscription.id)
    assert (attempt.status_code, attempt.success) == (200, True), attempt.error
    assert await outbox_rows(stack) == []


# --- stopping ------------------------------------------------------------------------------


def wait_for_consumers(client: redis.Redis, processes: int, seconds: float = 90.0) -> None:
    """Until `processes` worker processes fetch from Redis (each beats under its own id), so
    each has booted, its signal handling included."""
    deadline = time.monotonic() + seconds
    while client.zcard("switchboard:__heartbeats__") < processes:
        assert time.monotonic() < deadline, "the worker processes never consumed"
        time.sleep(0.05)


async def test_a_group_sigterm_stops_every_worker_process_and_nothing_runs_after(
    stack: Engine, flushable: redis.Redis, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """The issue's reproduction: docs/operations.md's `kill -TERM -<pgid>` reaches each
    worker process twice (from the group, and forwarded by the main process); each logged
    "Killing worker process..." and never exited, its consumers still taking jobs."""
    tenant = await stack.tenants.organization()
    env = worker_env(database_url, redis_url, tmp_path, SWITCHBOARD_WORKER_SHUTDOWN_SECONDS=5)
    log = tmp_path / "worker.log"
    with running_receiver() as receiver:
        await stack.subscribe(tenant, receiver.url, ["lead.created"])
        worker = WorkerProcess(env, log, processes=2)
        try:
            await asyncio.to_thread(wait_for_consumers, flushable, 2)
            await asyncio.to_thread(worker.wait_handling, signal.SIGTERM)
            assert len(worker.children()) == 2
            worker.signal_group(signal.SIGTERM)
            # Idle: nothing to finish, so well within the 5 s grace.
            await asyncio.to_thread(worker.wait_gone, 15)
        finally:
            worker.stop()
        assert worker.process.returncode == 0, worker.log_tail()
        assert "Killing worker process" not in log.read_text()
        await stack.create_contact(tenant)
        await asyncio.sleep(1.0)  # a consumer left behind would take the delivery by now
        assert receiver.requests == []


async def test_a_later_second_sigterm_stops_a_worker_process_at_once(
    stack: Engine, flushable: redis.Redis, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A delivery in flight holds the graceful stop (the receiver answers after 25 s); a second
    SIGTERM seconds later ends the worker process at once, and the job runs again on the next
    worker once its lease ends, as after a kill."""
    tenant = await stack.tenants.organization()
    env = worker_env(
        database_url,
        redis_url,
        tmp_path,
        SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS=20,
        SWITCHBOARD_JOB_LEASE_SECONDS=22,
        SWITCHBOARD_WORKER_SHUTDOWN_SECONDS=60,
    )
    log = tmp_path / "worker.log"
    with running_receiver() as receiver:
        receiver.script = [Answer(200, delay=25)]
        await stack.subscribe(tenant, receiver.url, ["lead.created"])
        worker = WorkerProcess(env, log)
        try:
            await asyncio.to_thread(wait_for_consumers, flushable, 1)
            [child] = worker.children()
            await stack.create_contact(tenant)
            await wait_for(receiver, 1)
            os.kill(child, signal.SIGTERM)  # graceful: waits for the delivery in flight
            await asyncio.sleep(2.5)  # past the window in which a repeat is the same stop
            assert worker.children() == [child]
            os.kill(child, signal.SIGTERM)
            elapsed = await asyncio.to_thread(worker.wait_gone, 10)
        finally:
            worker.stop()
        assert elapsed < 10
        assert "stopping at once on a second signal" in log.read_text(), worker.log_tail()
        [job] = [row for row in await outbox_rows(stack) if row.actor == DELIVER_ACTOR]
        assert job.status == "pending"  # never settled: it runs again once its lease ends


async def test_a_worker_serves_the_figures_of_all_its_processes(
    stack: Engine, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    tenant = await stack.tenants.organization()
    # One thread and one local job per process: a process holds at most two deliveries at a
    # time, so while they last (0.2 s each) the rest wait in Redis for the other process.
    env = worker_env(
        database_url,
        redis_url,
        tmp_path,
        SWITCHBOARD_WORKER_THREADS=1,
        SWITCHBOARD_WORKER_LOCAL_JOBS=1,
    )
    count = 10
    pending = {"status": "pending"}
    with running_receiver() as receiver:
        receiver.default = Answer(200, delay=0.2)
        await stack.subscribe(tenant, receiver.url, ["lead.created"])
        with running_worker(env, tmp_path / "worker.log", processes=2) as worker:
            await scraped(worker, lambda text: metric_value(text, OUTBOX, pending) == 0)
            await create_contacts(stack, tenant, 0, count)
            await wait_for(receiver, count, seconds=20)
            scrape = await scraped(
                worker,
                lambda text: (
                    metric_value(text, ATTEMPTS, {"outcome": "success"}) == count
                    and metric_value(text, OUTBOX, pending) == 0
                ),
            )
            per_process = deliveries_per_process(tmp_path / "var" / METRICS_DIRNAME, worker)

    assert metric_value(scrape, "switchboard_webhook_delivery_seconds_count") == count
    assert metric_value(scrape, OUTBOX, {"status": "parked"}) == 0
    assert sum(per_process.values()) == count
    assert len([n for n in per_process.values() if n]) == 2, per_process  # the sum of two


OUTBOX = "switchboard_outbox_jobs"
ATTEMPTS = "switchboard_webhook_delivery_attempts_total"


async def scraped(
    worker: WorkerProcess, check: Callable[[str], bool], seconds: float = 10.0
) -> str:
    """The first scrape of `worker`'s metrics port that passes `check`."""
    deadline = time.monotonic() + seconds
    while True:
        text = await asyncio.to_thread(worker.scrape)
        if check(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics never passed the check; last scrape:\n{text}")
        await asyncio.sleep(0.1)


def deliveries_per_process(root: Path, worker: WorkerProcess) -> dict[str, float]:
    """Successful deliveries of each process of `worker`, from its multiprocess files."""
    [directory] = [path for path in root.iterdir() if path.name.split("-")[0] == str(worker.pid)]
    counts: dict[str, float] = {}
    for path in directory.glob("counter_*.db"):
        for metric in MultiProcessCollector.merge([str(path)]):  # type: ignore[no-untyped-call]
            for sample in metric.samples:
                if sample.name == "switchboard_webhook_delivery_attempts_total":
                    counts[path.name] = counts.get(path.name, 0) + sample.value
    return counts
