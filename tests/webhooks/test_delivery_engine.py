"""Events to webhooks end to end: API write → outbox → Dramatiq worker → a real receiver.

The app owns its resources on a committed database (SQLite file and PostgreSQL) and a real
in-process Dramatiq worker (StubBroker) runs the jobs; the receiver is an HTTP server on
loopback. Retry delays are the production schedule scaled down (webhook_retry_scale).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import dramatiq
import httpx
import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from standardwebhooks import Webhook

from app.config import Settings
from app.core.clock import utcnow
from app.db.engine import create_engine, create_sessionmaker
from app.events.models import Event
from app.kit import outbox
from app.kit.outbox_models import OutboxJob
from app.main import create_app
from app.webhooks.delivery import DISABLE_AFTER_FAILING_FOR
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription
from app.webhooks.signing import generate_secret
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings
from tests.webhooks.receiver import Answer, Receiver, running_receiver
from workers.broker import InProcessWorker, install_job_engine

CONTACT = {"phone_number": "+14155550100", "name": "Ada"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("jobs"), "sb_jobs") as url:
        yield url


@dataclass
class Engine:
    settings: Settings
    client: httpx.AsyncClient
    sessionmaker: async_sessionmaker[AsyncSession]
    tenants: TenantFactory
    broker: dramatiq.Broker

    async def subscribe(
        self, tenant: Tenant, url: str, events: list[str], *, is_active: bool = True
    ) -> WebhookSubscription:
        async with self.sessionmaker() as session:
            subscription = WebhookSubscription(
                organization_id=tenant.organization_id,
                url=url,
                secret=generate_secret(),
                events=events,
                is_active=is_active,
            )
            session.add(subscription)
            await session.commit()
        return subscription

    async def create_contact(self, tenant: Tenant, **fields: Any) -> dict[str, Any]:
        response = await self.client.post(
            "/api/v1/contacts", json={**CONTACT, **fields}, headers=tenant.headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def create_contact_unrelayed(self, tenant: Tenant) -> None:
        """As if the process died right after commit: the job never reaches the broker."""
        dispatcher = outbox.get_dispatcher()
        outbox.set_dispatcher(None)
        try:
            await self.create_contact(tenant)
        finally:
            outbox.set_dispatcher(dispatcher)

    async def attempts(self, subscription_id: str) -> list[WebhookDeliveryAttempt]:
        async with self.sessionmaker() as session:
            rows = await session.scalars(
                select(WebhookDeliveryAttempt)
                .where(WebhookDeliveryAttempt.subscription_id == subscription_id)
                .order_by(WebhookDeliveryAttempt.attempt)
            )
            return list(rows.all())

    async def deliveries(self, subscription_id: str) -> list[WebhookDelivery]:
        async with self.sessionmaker() as session:
            rows = await session.scalars(
                select(WebhookDelivery).where(WebhookDelivery.subscription_id == subscription_id)
            )
            return list(rows.all())


def engine_settings(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "allow_private_webhook_urls": True,
        "webhook_retry_scale": 0.002,  # 5 s → 10 ms, 5 min → 0.6 s
        "webhook_timeout_seconds": 1.0,
        "outbox_sweep_seconds": 0.05,
        "outbox_redispatch_seconds": 0.5,
        "job_lease_seconds": 5.0,
        "knowledge_extraction_seconds": 3.0,  # the lease must outlast an extraction too
        "worker_threads": 2,
    }
    values.update(overrides)
    return make_settings(url, tmp_path, **values)


@asynccontextmanager
async def running_engine(
    committed_url: str, tmp_path: Path, *, in_process_worker: bool = True, **overrides: Any
) -> AsyncIterator[Engine]:
    """The API and, unless `in_process_worker` is false (jobs then wait for `switchboard
    worker` processes on Redis), an in-process Dramatiq worker."""
    settings = engine_settings(committed_url, tmp_path, **overrides)
    database = create_engine(committed_url, pool_size=2)
    sessionmaker = create_sessionmaker(database)
    broker, _runtime = install_job_engine(settings)
    worker = InProcessWorker(broker, threads=settings.worker_threads)
    if in_process_worker:
        worker.start()
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
                yield Engine(settings, client, sessionmaker, TenantFactory(sessionmaker), broker)
    finally:
        worker.stop()
        outbox.set_dispatcher(None)
        broker.close()
        async with sessionmaker() as session:  # jobs of this test must not run in the next
            await session.execute(delete(OutboxJob))
            await session.commit()
        await database.dispose()


@pytest.fixture
async def engine(committed_url: str, tmp_path: Path) -> AsyncIterator[Engine]:
    async with running_engine(committed_url, tmp_path) as running:
        yield running


async def wait_for(receiver: Receiver, count: int, seconds: float = 10.0) -> list[Any]:
    return await asyncio.to_thread(receiver.wait_for, count, seconds)


async def eventually(check: Any, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_a_contact_write_is_delivered_signed(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        subscription = await engine.subscribe(
            tenant, f"{receiver.url}/hook", ["lead.created", "lead.updated"]
        )
        contact = await engine.create_contact(tenant)
        [received] = await wait_for(receiver, 1)

    body = received.json
    assert body["type"] == "lead.created"
    assert body["id"].startswith("evt_")
    assert body["organization_id"] == tenant.organization_id
    assert body["livemode"] is False
    assert body["data"] == contact  # the resource exactly as REST returned it
    headers = received.headers
    expected = hmac.new(subscription.secret.encode(), received.body, hashlib.sha256).hexdigest()
    assert headers["x-service-signature"] == f"sha256={expected}"
    assert headers["x-service-event"] == "lead.created"
    assert headers["x-service-delivery"] == headers["webhook-id"]
    assert headers["x-service-delivery"].startswith("msg_")
    assert headers["x-service-timestamp"] == headers["webhook-timestamp"]
    assert Webhook(subscription.secret).verify(received.body, headers)["id"] == body["id"]
    assert received.path == "/hook"

    [attempt] = await engine.attempts(subscription.id)
    assert attempt.success
    assert attempt.status_code == 200
    assert attempt.attempt == 1
    assert attempt.response_body == "ok"


async def test_failures_are_retried_with_the_same_delivery_id(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        receiver.script = [Answer(500, body=b"boom"), Answer(500)]
        subscription = await engine.subscribe(tenant, receiver.url, ["lead.created"])
        await engine.create_contact(tenant)
        requests = await wait_for(receiver, 3)

    assert len({r.headers["x-service-delivery"] for r in requests}) == 1
    assert len({r.json["id"] for r in requests}) == 1

    async def three_attempts() -> bool:
        return len(await engine.attempts(subscription.id)) == 3

    await eventually(three_attempts)
    attempts = await engine.attempts(subscription.id)
    assert [(a.attempt, a.status_code, a.success) for a in attempts] == [
        (1, 500, False),
        (2, 500, False),
        (3, 200, True),
    ]
    assert attempts[0].error == "HTTP 500"
    assert attempts[0].response_body == "boom"
    [delivery] = await engine.deliveries(subscription.id)
    assert delivery.status == "succeeded"
    assert delivery.attempt_count == 3


async def test_a_slow_receiver_counts_as_failed(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        receiver.script = [Answer(200, delay=engine.settings.webhook_timeout_seconds + 1)]
        subscription = await engine.subscribe(tenant, receiver.url, ["lead.created"])
        await engine.create_contact(tenant)
        await wait_for(receiver, 2)  # the timed-out attempt, then the retry

        async def retried() -> bool:
            return len(await engine.attempts(subscription.id)) == 2

        await eventually(retried)
    first, second = await engine.attempts(subscription.id)
    assert not first.success
    assert first.status_code is None
    assert first.error is not None
    assert "timed out" in first.error
    assert second.success


async def test_inactive_subscriptions_and_other_organizations_receive_nothing(
    engine: Engine,
) -> None:
    tenant = await engine.tenants.organization()
    other = await engine.tenants.organization("Other")
    with running_receiver() as mine, running_receiver() as inactive, running_receiver() as theirs:
        await engine.subscribe(tenant, mine.url, ["lead.created"])
        await engine.subscribe(tenant, inactive.url, ["lead.created"], is_active=False)
        await engine.subscribe(other, theirs.url, ["lead.created", "lead.updated"])
        unsubscribed = await engine.subscribe(tenant, mine.url + "/updates", ["lead.updated"])
        await engine.create_contact(tenant)
        await wait_for(mine, 1)
        await asyncio.sleep(0.5)  # time for anything wrongly sent to arrive
        assert len(mine.requests) == 1
        assert inactive.requests == []
        assert theirs.requests == []
    assert await engine.deliveries(unsubscribed.id) == []


@pytest.mark.parametrize(("local_jobs", "through_broker"), [(64, 0), (1, 2)])
async def test_a_fan_out_runs_its_deliveries_itself_while_it_has_room(
    committed_url: str, tmp_path: Path, local_jobs: int, through_broker: int
) -> None:
    """A worker starts the deliveries it fanned out on its own loop (no broker round trip);
    beyond its room (`worker_local_jobs`) they go through the broker. All arrive signed."""
    relayed: list[str] = []

    async with running_engine(committed_url, tmp_path, worker_local_jobs=local_jobs) as engine:
        dispatcher = outbox.get_dispatcher()
        assert dispatcher is not None

        def recording_dispatcher(refs: Sequence[outbox.JobRef]) -> None:
            relayed.extend(ref.actor for ref in refs)
            dispatcher(refs)

        outbox.set_dispatcher(recording_dispatcher)
        tenant = await engine.tenants.organization()
        with running_receiver() as receiver:
            subscriptions = [
                await engine.subscribe(tenant, receiver.url, ["lead.created"]) for _ in range(3)
            ]
            await engine.create_contact(tenant)
            received = await wait_for(receiver, 3)
    assert {request.headers["webhook-id"] for request in received} == {
        delivery.id for s in subscriptions for delivery in await engine.deliveries(s.id)
    }
    expected = ["events.fan_out"] + ["webhooks.deliver"] * through_broker
    assert relayed == expected


async def test_a_job_lost_between_commit_and_enqueue_is_swept(engine: Engine) -> None:
    """The process 'dies' after commit: nothing reaches the broker, the sweep sends it."""
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        await engine.subscribe(tenant, receiver.url, ["lead.created"])
        await engine.create_contact_unrelayed(tenant)
        [received] = await wait_for(receiver, 1)
    assert received.json["type"] == "lead.created"


async def test_a_job_held_by_a_killed_worker_runs_again(engine: Engine) -> None:
    """A run that never finished leaves its lease to expire; the job is then re-sent."""
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        await engine.subscribe(tenant, receiver.url, ["lead.created"])
        await engine.create_contact_unrelayed(tenant)
        async with engine.sessionmaker() as session:  # as a worker's claim would leave it
            await session.execute(
                update(OutboxJob).values(starts=1, locked_until=utcnow() + timedelta(seconds=1))
            )
            await session.commit()
        await asyncio.sleep(0.7)
        assert receiver.requests == []  # still held by the "dead" run
        [received] = await wait_for(receiver, 1)
    assert received.json["type"] == "lead.created"


async def test_a_job_that_keeps_failing_is_parked(engine: Engine) -> None:
    async with engine.sessionmaker() as session:
        job_id = outbox.schedule(session, "events.fan_out", queue="events")  # no event id: raises
        await session.commit()

    async def parked() -> bool:
        async with engine.sessionmaker() as session:
            job = await session.get(OutboxJob, job_id)
            return job is not None and job.status == "parked"

    await eventually(parked, seconds=20)
    async with engine.sessionmaker() as session:
        job = await session.get(OutboxJob, job_id)
        assert job is not None
        assert job.last_error is not None


async def test_a_job_no_worker_knows_is_never_sent_and_parked_after_the_grace(
    engine: Engine,
) -> None:
    dispatcher = outbox.get_dispatcher()
    outbox.set_dispatcher(None)  # written only: the sweep alone decides what is sent
    try:
        async with engine.sessionmaker() as session:
            fresh = outbox.schedule(session, "campaigns.unknown", queue="campaigns")
            old = outbox.schedule(session, "campaigns.unknown", queue="campaigns")
            await session.commit()
        async with engine.sessionmaker() as session:  # never relayed, and created long ago
            await session.execute(
                update(OutboxJob).where(OutboxJob.id.in_([fresh, old])).values(dispatched_at=None)
            )
            await session.execute(
                update(OutboxJob)
                .where(OutboxJob.id == old)
                .values(created_at=utcnow() - outbox.UNKNOWN_ACTOR_GRACE - timedelta(minutes=1))
            )
            await session.commit()

        async def old_is_parked() -> bool:
            async with engine.sessionmaker() as session:
                job = await session.get(OutboxJob, old)
                return job is not None and job.status == "parked"

        await eventually(old_is_parked)
        async with engine.sessionmaker() as session:
            parked = await session.get(OutboxJob, old)
            waiting = await session.get(OutboxJob, fresh)
        assert parked is not None
        assert parked.last_error == "no worker declares this actor"
        assert waiting is not None
        assert waiting.status == "pending"
        assert waiting.dispatched_at is None  # the sweep never handed it to the broker
    finally:
        outbox.set_dispatcher(dispatcher)


async def test_410_disables_the_subscription_and_records_it(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        receiver.default = Answer(410)
        subscription = await engine.subscribe(tenant, receiver.url, ["lead.created"])
        await engine.create_contact(tenant)
        await wait_for(receiver, 1)

        async def disabled() -> bool:
            async with engine.sessionmaker() as session:
                row = await session.get(WebhookSubscription, subscription.id)
                return row is not None and not row.is_active

        await eventually(disabled)
        await engine.create_contact(tenant, phone_number="+14155550101")
        await asyncio.sleep(0.5)
        assert len(receiver.requests) == 1  # nothing more once disabled
    async with engine.sessionmaker() as session:
        notices = (
            await session.scalars(
                select(Event).where(
                    Event.organization_id == tenant.organization_id,
                    Event.type == "webhook.disabled",
                )
            )
        ).all()
    assert [notice.data["id"] for notice in notices] == [subscription.id]
    assert "secret" not in notices[0].data


async def test_five_days_of_failures_disable_the_subscription(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        receiver.default = Answer(503)
        subscription = await engine.subscribe(tenant, receiver.url, ["lead.created"])
        async with engine.sessionmaker() as session:
            await session.execute(
                update(WebhookSubscription)
                .where(WebhookSubscription.id == subscription.id)
                .values(failing_since=utcnow() - DISABLE_AFTER_FAILING_FOR)
            )
            await session.commit()
        await engine.create_contact(tenant)
        await wait_for(receiver, 1)

        async def disabled() -> bool:
            async with engine.sessionmaker() as session:
                row = await session.get(WebhookSubscription, subscription.id)
                return row is not None and not row.is_active

        await eventually(disabled)
    [delivery] = await engine.deliveries(subscription.id)
    assert delivery.status == "failed"


async def test_the_test_endpoint_sends_a_signed_test_event(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        created = await engine.client.post(
            "/api/v1/webhooks",
            json={"url": receiver.url, "events": ["lead.created"]},
            headers=tenant.headers,
        )
        assert created.status_code == 200, created.text
        webhook = created.json()
        queued = await engine.client.post(
            f"/api/v1/webhooks/{webhook['id']}/test", headers=tenant.headers
        )
        assert queued.status_code == 202, queued.text
        [received] = await wait_for(receiver, 1)
    assert received.json["type"] == "webhook.test"
    assert received.json["id"] == queued.json()["event_id"]
    assert received.headers["webhook-id"] == queued.json()["delivery_id"]
    assert Webhook(webhook["secret"]).verify(received.body, received.headers)

    async def listed() -> bool:
        page = await engine.client.get(
            f"/api/v1/webhooks/{webhook['id']}/deliveries", headers=tenant.headers
        )
        return bool(page.json()["data"])

    await eventually(listed)
    page = await engine.client.get(
        f"/api/v1/webhooks/{webhook['id']}/deliveries", headers=tenant.headers
    )
    [attempt] = page.json()["data"]
    assert attempt["event_type"] == "webhook.test"
    assert attempt["success"] is True
    assert attempt["status_code"] == 200
    assert attempt["attempt"] == 1

    paused = await engine.client.put(
        f"/api/v1/webhooks/{webhook['id']}", json={"is_active": False}, headers=tenant.headers
    )
    assert paused.status_code == 200
    refused = await engine.client.post(
        f"/api/v1/webhooks/{webhook['id']}/test", headers=tenant.headers
    )
    assert refused.status_code == 400
    assert "not active" in refused.json()["detail"]


async def test_rotated_secrets_sign_with_both_for_a_day(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as receiver:
        created = await engine.client.post(
            "/api/v1/webhooks",
            json={"url": receiver.url, "events": ["lead.created"]},
            headers=tenant.headers,
        )
        old_secret = created.json()["secret"]
        rotated = await engine.client.post(
            f"/api/v1/webhooks/{created.json()['id']}/rotate-secret", headers=tenant.headers
        )
        new_secret = rotated.json()["secret"]
        await engine.create_contact(tenant)
        [received] = await wait_for(receiver, 1)
    signatures = received.headers["x-service-signature"].split(",")
    for secret in (new_secret, old_secret):
        digest = hmac.new(secret.encode(), received.body, hashlib.sha256).hexdigest()
        assert f"sha256={digest}" in signatures
        assert Webhook(secret).verify(received.body, received.headers)
