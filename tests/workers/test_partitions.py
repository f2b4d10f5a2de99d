"""The job engine under a Redis partition and beside a dead endpoint (PostgreSQL + Redis, with
real `switchboard worker` processes).

- Redis goes silent (a proxy that accepts and never answers: the worst partition, no error
  until a timeout) for the relay and the worker while writes go on: every write answers as
  fast as before, and every job runs once Redis answers again (the sweep relays them).
- Jobs waiting in Redis are never queued twice by the sweep; flushed, they are sent again.
- One organization's receiver never answers in time while another's answers at once: the
  healthy organization's events arrive within two seconds (p99) while the dead endpoint keeps
  timing out, and no job is queued twice in Redis.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dramatiq
import pytest
import redis
from sqlalchemy import select

from app.webhooks.models import WebhookDeliveryAttempt
from tests.conftest import Tenant
from tests.webhooks.receiver import Answer, running_receiver
from tests.webhooks.test_delivery_engine import Engine, engine_settings, eventually, wait_for
from tests.workers.tcp_proxy import silentable_proxy
from tests.workers.test_redis_engine import (  # noqa: F401  (fixtures)
    QUEUES,
    database_url,
    flushable,
    outbox_rows,
    redis_url,
    running_stack,
    stack,
    worker_env,
)
from tests.workers.worker_process import running_worker
from workers.broker import build_job_engine

pytestmark = [pytest.mark.redis, pytest.mark.slow]


async def timed_contact(engine: Engine, tenant: Tenant, index: int) -> tuple[str, float]:
    """Create a contact; its id and the seconds the write took."""
    started = time.perf_counter()
    contact = await engine.create_contact(tenant, phone_number=f"+1415555{index:04d}")
    return contact["id"], time.perf_counter() - started


async def test_writes_answer_while_redis_is_silent_and_every_job_runs_after(
    database_url: str,  # noqa: F811
    redis_url: str,  # noqa: F811
    flushable: redis.Redis,  # noqa: F811
    tmp_path: Path,
) -> None:
    parts = urlsplit(redis_url)
    async with silentable_proxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        through_proxy = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
        env = worker_env(database_url, through_proxy, tmp_path)
        async with running_stack(
            database_url, redis_url, tmp_path, broker_url=through_proxy
        ) as stack:
            timeout = stack.settings.broker_timeout_seconds
            tenant = await stack.tenants.organization()
            with running_receiver() as receiver:
                await stack.subscribe(tenant, receiver.url, ["lead.created"])
                with running_worker(env, tmp_path / "worker.log", threads=2) as worker:
                    before = [await timed_contact(stack, tenant, index) for index in range(3)]
                    await wait_for(receiver, 3)

                    proxy.freeze()  # Redis is silent for the relay and the worker
                    during = [await timed_contact(stack, tenant, index) for index in range(3, 13)]
                    await asyncio.sleep(timeout + 1)  # the relay and the sweep time out meanwhile
                    delivered_while_silent = len(receiver.requests)
                    proxy.thaw()

                    try:
                        requests = await wait_for(receiver, 13, seconds=40)
                    except AssertionError as exc:
                        raise AssertionError(f"{exc}\n{worker.log_tail()}") from exc

                    async def settled() -> bool:
                        return await outbox_rows(stack) == []

                    await eventually(settled, seconds=20)

    write_seconds = [seconds for _, seconds in during]
    print(
        f"writes before the partition: max {max(s for _, s in before) * 1000:.0f} ms;"
        f" while Redis was silent: median {statistics.median(write_seconds) * 1000:.0f} ms,"
        f" max {max(write_seconds) * 1000:.0f} ms (broker timeout {timeout:g} s)"
    )
    # A write that waited on Redis would take at least the broker timeout.
    assert max(write_seconds) < timeout
    assert delivered_while_silent == 3
    contacts = [contact for contact, _ in before + during]
    delivered = Counter(request.json["data"]["id"] for request in requests)
    assert sorted(delivered) == sorted(contacts)
    assert set(delivered.values()) == {1}  # every job ran, none twice


def queued_job_ids(client: redis.Redis) -> list[str]:
    """Outbox job ids of every message Redis holds, repeated if queued more than once."""
    return [
        dramatiq.Message.decode(raw if isinstance(raw, bytes) else raw.encode()).args[0]
        for queue in QUEUES
        for raw in client.hvals(f"switchboard:{queue}.msgs")
    ]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def test_a_dead_endpoint_does_not_hold_up_other_organizations(
    stack: Engine,  # noqa: F811
    flushable: redis.Redis,  # noqa: F811
    database_url: str,  # noqa: F811
    redis_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    attempt_timeout = 2.0  # production: 10 s; the receiver sleeps far longer either way
    env = worker_env(
        database_url,
        redis_url,
        tmp_path,
        SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS=attempt_timeout,
        SWITCHBOARD_JOB_LEASE_SECONDS=attempt_timeout + 3,
        SWITCHBOARD_WEBHOOK_RETRY_SCALE=0.01,  # 5 s -> 50 ms, 5 min -> 3 s: A retries often
        SWITCHBOARD_WORKER_PREFETCH=64,  # the production defaults
        SWITCHBOARD_OUTBOX_REDISPATCH_SECONDS=30,
        # The dead endpoint's circuit opens after 5 timeouts; it is tried again after 1 s,
        # then 2 s, 4 s...: it goes on timing out during the test (production: 30 s, ...).
        SWITCHBOARD_WEBHOOK_BREAKER_SECONDS=1,
    )
    org_a = await stack.tenants.organization("A")
    org_b = await stack.tenants.organization("B")
    with running_receiver() as dead, running_receiver() as healthy:
        dead.default = Answer(200, delay=15)
        subscription_a = await stack.subscribe(org_a, dead.url, ["lead.created"])
        await stack.subscribe(org_b, healthy.url, ["lead.created"])
        with running_worker(env, tmp_path / "worker.log", threads=4) as worker:
            for index in range(50):
                await stack.create_contact(org_a, phone_number=f"+1415555{index:04d}")
            await asyncio.sleep(2 * attempt_timeout + 1)  # A's attempts time out, retries start
            b_started = time.time()
            created_at: dict[str, float] = {}
            for index in range(100):
                contact = await stack.create_contact(org_b, phone_number=f"+1415556{index:04d}")
                created_at[contact["id"]] = time.time()
            try:
                received = await wait_for(healthy, 100, seconds=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{worker.log_tail()}") from exc
            queued = queued_job_ids(flushable)

            async def tried_again() -> bool:  # A's circuit lets trials through meanwhile
                return any(request.at >= b_started for request in dead.requests)

            await eventually(tried_again, seconds=20)
            await asyncio.sleep(attempt_timeout + 0.5)  # ... which time out
            async with stack.sessionmaker() as session:
                a_attempts = (
                    await session.execute(
                        select(WebhookDeliveryAttempt.success, WebhookDeliveryAttempt.error).where(
                            WebhookDeliveryAttempt.subscription_id == subscription_a.id,
                        )
                    )
                ).all()

    tried_since = [request for request in dead.requests if request.at >= b_started]
    latencies = [request.at - created_at[request.json["data"]["id"]] for request in received]
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(
        f"healthy organization beside a dead endpoint: {len(latencies)} events,"
        f" p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms;"
        f" dead endpoint: {len(a_attempts)} attempts recorded, {len(dead.requests)} requests"
        f" ({len(tried_since)} since B began);"
        f" messages in Redis: {len(queued)}"
    )
    # Behind the dead endpoint, B's events would wait whole attempts (2 s each, 50 of A's
    # deliveries over 4 threads: tens of seconds). Most go at once and none waits two attempts;
    # the margin is for a loaded machine, not for a hold-up.
    assert p50 < attempt_timeout / 2
    assert p99 < 2 * attempt_timeout
    assert len({request.headers["webhook-id"] for request in received}) == 100
    assert tried_since, "the dead endpoint was not tried any more"
    assert a_attempts
    assert all(not success and error.startswith("timed out") for success, error in a_attempts)
    assert len(queued) == len(set(queued)), "a job waits in Redis twice"


async def test_the_sweep_leaves_jobs_waiting_in_redis_alone(
    stack: Engine,  # noqa: F811
    flushable: redis.Redis,  # noqa: F811
    database_url: str,  # noqa: F811
    redis_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """No worker consumes: the jobs wait in Redis past the redispatch time and a sweeping
    runtime leaves them there (once each); flushed from Redis, they are sent again."""
    settings = engine_settings(
        database_url,
        tmp_path,
        redis_url=redis_url,
        outbox_sweep_seconds=0.1,
        outbox_redispatch_seconds=0.5,
    )
    broker, runtime = build_job_engine(settings)
    runtime.known_actors = frozenset(broker.get_declared_actors())
    await runtime.open()  # its sweep runs; no worker thread takes a message
    try:
        tenant = await stack.tenants.organization()
        for index in range(3):
            await stack.create_contact(tenant, phone_number=f"+1415557{index:04d}")
        jobs = {row.id for row in await outbox_rows(stack)}
        assert len(jobs) == 3

        async def queued_once() -> bool:
            return sorted(queued_job_ids(flushable)) == sorted(jobs)

        await eventually(queued_once, seconds=5)
        await asyncio.sleep(2.0)  # four redispatch periods, twenty sweeps
        assert sorted(queued_job_ids(flushable)) == sorted(jobs)  # still once each

        flushable.flushdb()  # Redis loses them: the sweep sends them again
        await eventually(queued_once, seconds=5)
        await asyncio.sleep(1.0)
        assert sorted(queued_job_ids(flushable)) == sorted(jobs)
    finally:
        await runtime.close()
        broker.close()
