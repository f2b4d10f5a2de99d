"""A storm of statuses about unknown messages costs one low-priority job per number, never
one job per status, and a status that overtook its send is still applied by it."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.conversations.models import ParkedStatus
from app.conversations.statuses import (
    MAX_PARKED_PER_CHANNEL,
    STATUS_RETRY_QUEUE,
    retry_job_id,
)
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from tests.conftest import Tenant
from tests.conversations.conftest import JobWorker
from tests.conversations.test_whatsapp_webhooks import (
    PHONE_ID,
    open_conversation,
    post_signed,
    reply,
    settle_as,
    the_outbound,
)
from tests.templates.conftest import WABA, create_channel

STORM = 10_000


def statuses_body(entries: list[dict[str, Any]], phone_number_id: str = PHONE_ID) -> dict[str, Any]:
    return payloads.messages_change(WABA, phone_number_id, "+14155550142", statuses=entries)


def storm(count: int, prefix: str = "u") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{n}", "status": "read"} for n in range(count)]


async def jobs_by_queue(sessionmaker: async_sessionmaker[AsyncSession]) -> dict[str, int]:
    async with sessionmaker() as session:
        rows = await session.execute(
            select(OutboxJob.queue, func.count()).group_by(OutboxJob.queue)
        )
        return dict(rows.all())  # type: ignore[arg-type]


async def parked_count(sessionmaker: async_sessionmaker[AsyncSession]) -> int:
    async with sessionmaker() as session:
        return int(await session.scalar(select(func.count()).select_from(ParkedStatus)) or 0)


async def test_a_storm_of_unknown_statuses_is_one_bounded_job_that_still_applies_late_ones(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: JobWorker,
) -> None:
    ticket_id = await open_conversation(client, acme)
    sent = (await reply(client, acme, ticket_id, text="On its way")).json()
    before = await jobs_by_queue(sessionmaker)
    # One signed body: a status that overtook its send, then 10,000 about ids nobody holds.
    late = {"id": "wamid.late", "status": "delivered", "timestamp": str(int(time.time()))}
    response = await post_signed(client, statuses_body([late, *storm(STORM)]))
    assert response.status_code == 200
    after = await jobs_by_queue(sessionmaker)
    assert after.get(STATUS_RETRY_QUEUE, 0) == 1
    assert after.get("default", 0) == before.get("default", 0)
    async with sessionmaker() as session:
        (job,) = await session.scalars(
            select(OutboxJob).where(OutboxJob.queue == STATUS_RETRY_QUEUE)
        )
    assert job.id == retry_job_id(channel["id"])
    assert await parked_count(sessionmaker) == MAX_PARKED_PER_CHANNEL  # the rest dropped
    # A second storm adds nothing: the channel holds as many as it may, in one job.
    assert (await post_signed(client, statuses_body(storm(500, "v")))).status_code == 200
    assert (await jobs_by_queue(sessionmaker)).get(STATUS_RETRY_QUEUE) == 1
    assert await parked_count(sessionmaker) == MAX_PARKED_PER_CHANNEL

    # The reply's send settles as "wamid.late": the retry applies the status it missed.
    await settle_as(sessionmaker, sent["id"], "wamid.late")
    await worker.run(job.id)
    assert (await the_outbound(client, acme, ticket_id))["status"] == "delivered"
    assert await parked_count(sessionmaker) == MAX_PARKED_PER_CHANNEL - 1
    assert (await jobs_by_queue(sessionmaker)).get(STATUS_RETRY_QUEUE) == 1  # run again later


async def test_storms_of_two_numbers_are_one_job_each(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    other = await create_channel(client, globex, "106540352249999")
    for number in (PHONE_ID, "106540352249999"):
        for _ in range(3):
            body = statuses_body(storm(50, number), number)
            assert (await post_signed(client, body)).status_code == 200
    async with sessionmaker() as session:
        ids = set(
            await session.scalars(select(OutboxJob.id).where(OutboxJob.queue == STATUS_RETRY_QUEUE))
        )
    assert ids == {retry_job_id(channel["id"]), retry_job_id(other["id"])}
    assert await parked_count(sessionmaker) == 2 * 50
