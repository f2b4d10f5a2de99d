"""Campaigns through the real job engine: a Dramatiq worker (StubBroker on SQLite and
PostgreSQL, RedisBroker on PostgreSQL) dispatches, the simulator's signed callbacks reach the
inbound handler, and a scheduled campaign is started by the outbox sweep from the database,
even after Redis is flushed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from sqlalchemy import func, select

from app.conversations.statuses import STATUS_RETRY_ACTOR, STATUS_RETRY_QUEUE, retry_job_id
from app.core.clock import utcnow
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from tests.campaigns.conftest import CAMPAIGNS, simulated_campaign_body
from tests.conftest import Tenant
from tests.engine.fixtures import backend_fixture
from tests.webhooks.test_delivery_engine import Engine, eventually, running_engine

COUNTERS = ("total_contacts_count", "sent_count", "delivered_count", "read_count", "failed_count")


backend = backend_fixture("campaigns")


@pytest.fixture
async def engine(backend: tuple[str, str | None], tmp_path: Path) -> AsyncIterator[Engine]:
    url, redis_url = backend
    async with running_engine(url, tmp_path, redis_url=redis_url) as running:
        yield running


async def prepare(engine: Engine, phones: list[str]) -> tuple[Tenant, dict[str, Any]]:
    """A tenant with a test-mode channel, an APPROVED template and contacts."""
    tenant = await engine.tenants.organization()
    body = await simulated_campaign_body(engine.client, tenant, phones, "Engine", eventually)
    return tenant, body


async def test_campaign_completes_with_exact_counters(engine: Engine) -> None:
    phones = ["+15005550001", "+15005550009", "+15005550010", "+14155550100", "+14155550101"]
    tenant, body = await prepare(engine, phones)
    client = engine.client
    created = await client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    campaign_id = created.json()["id"]
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=tenant.headers)
    assert launched.json()["status"] == "sending"

    async def counters() -> list[Any]:
        found = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)).json()
        return [found["status"], *(found[name] for name in COUNTERS)]

    async def settled() -> bool:
        return await counters() == ["completed", 5, 3, 3, 2, 2]

    await eventually(settled, 20.0)


async def test_scheduled_campaign_is_started_by_the_sweep_after_a_broker_flush(
    engine: Engine, backend: tuple[str, str | None]
) -> None:
    tenant, body = await prepare(engine, ["+14155550100", "+14155550101"])
    client = engine.client
    start = utcnow() + timedelta(seconds=1)
    created = await client.post(
        CAMPAIGNS, json={**body, "scheduled_at": start.isoformat()}, headers=tenant.headers
    )
    campaign_id = created.json()["id"]
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=tenant.headers)
    assert launched.json()["status"] == "scheduled"
    _url, redis_url = backend
    if redis_url:
        redis.Redis.from_url(redis_url).flushdb()  # the schedule is not in Redis

    async def completed() -> bool:
        found = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)).json()
        return bool(found["status"] == "completed" and found["read_count"] == 2)

    await eventually(completed, 20.0)
    assert utcnow() >= start


async def test_a_status_storm_of_one_organization_is_one_low_priority_job(
    engine: Engine,
) -> None:
    """Org A's platform posts 10,000 statuses about ids nobody holds while org B's campaign
    runs: one retry job on the `status_retries` queue for org A's number, and org B's
    campaign completes with every counter exact (its own statuses that overtook their sends
    applied by its number's retry job, through the worker)."""
    storm_tenant = await engine.tenants.organization("Storm")
    storm_channel = await engine.client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": "storm-number",
            "business_account_id": "storm-waba",
            "access_token": "EAAGstorm",
        },
        headers=storm_tenant.headers,
    )
    assert storm_channel.status_code == 201
    phones = ["+14155550100", "+14155550101", "+15005550009"]
    tenant, body = await prepare(engine, phones)
    created = await engine.client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    campaign_id = created.json()["id"]
    storm = payloads.messages_change(
        "storm-waba",
        "storm-number",
        "+14155550142",
        statuses=[{"id": f"unknown-{n}", "status": "read"} for n in range(10_000)],
    )
    raw = orjson.dumps(storm)
    secret = engine.settings.whatsapp_app_secret_value()
    posted = await engine.client.post(
        "/webhooks/whatsapp",
        content=raw,
        headers={payloads.SIGNATURE_HEADER: payloads.sign(secret, raw)},
    )
    assert posted.status_code == 200
    launched = await engine.client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=tenant.headers)
    assert launched.json()["status"] == "sending"

    async with engine.sessionmaker() as session:
        storm_jobs = (
            await session.execute(
                select(OutboxJob.id, OutboxJob.queue).where(
                    OutboxJob.actor == STATUS_RETRY_ACTOR,
                    OutboxJob.id == retry_job_id(storm_channel.json()["id"]),
                )
            )
        ).all()
        retries = await session.scalar(
            select(func.count()).select_from(OutboxJob).where(OutboxJob.actor == STATUS_RETRY_ACTOR)
        )
    assert [queue for _id, queue in storm_jobs] == [STATUS_RETRY_QUEUE]
    assert (retries or 0) <= 2  # the storm's, and perhaps org B's number's

    async def settled() -> bool:
        found = (
            await engine.client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)
        ).json()
        return [found["status"], *(found[name] for name in COUNTERS)] == [
            "completed",
            3,
            2,
            2,
            2,
            1,
        ]

    await eventually(settled, 20.0)
