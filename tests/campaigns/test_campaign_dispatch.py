"""Dispatch through the job engine against the simulator: the ledger, exact counters with
the simulator's magic numbers, template parameters per recipient, pause and cancel between
batches, the schedule kept in the database, and the campaign events."""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns import dispatch
from app.campaigns.models import CampaignRecipient
from app.campaigns.service import DISPATCH_ACTOR
from app.core.clock import utcnow
from app.kit.outbox_models import OutboxJob
from tests.campaigns.conftest import (
    CAMPAIGNS,
    Jobs,
    campaign_body,
    create_contact,
    fetch_campaign,
    launch_campaign,
    ledger,
)
from tests.conftest import Tenant

COUNTERS = ("total_contacts_count", "sent_count", "delivered_count", "read_count", "failed_count")
# The data of campaign.message.failed and campaign.message.delivered (docs/api.md, Campaigns).
RECIPIENT_EVENT_FIELDS = {
    "campaign_id",
    "contact_id",
    "phone_number",
    "status",
    "platform_message_id",
    "error",
    "sent_at",
    "delivered_at",
    "read_at",
    "failed_at",
}


async def test_counters_follow_the_simulator_magic_numbers_and_events_are_emitted(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    numbers = ["+15005550001", "+15005550009", "+15005550010", "+14155550100", "+14155550101"]
    for n, phone in enumerate(numbers):
        await create_contact(client, acme, phone, f"Person {n}")
    campaign = await launch_campaign(client, acme, campaign_body(channel, template))
    assert campaign["status"] == "sending"
    assert campaign["total_contacts_count"] == 5
    ran = await jobs.drain()
    assert ran.count(DISPATCH_ACTOR) == 1
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert settled["status"] == "completed"
    # …01 refused at send; …09 accepted then failed; …10 delivered, never read; others read.
    assert [settled[name] for name in COUNTERS] == [5, 3, 3, 2, 2]
    rows = await ledger(sessionmaker, campaign["id"])
    assert rows["+15005550001"].status == "failed"
    assert rows["+15005550001"].platform_message_id is None
    assert "131009" in (rows["+15005550001"].error or "")
    assert rows["+15005550009"].status == "failed"
    assert rows["+15005550009"].platform_message_id
    assert rows["+15005550010"].status == "delivered"
    assert rows["+14155550100"].status == "read"
    assert rows["+14155550100"].platform_message_id.startswith("wamid.")  # type: ignore[union-attr]
    events = [event.type for event in await jobs.events(acme.organization_id)]
    assert events.count("campaign.started") == 1
    assert events.count("campaign.completed") == 1
    assert events.count("campaign.message.failed") == 2
    assert events.count("campaign.message.delivered") == 3
    completed = [e for e in await jobs.events(acme.organization_id, "campaign.completed")]
    assert completed[0].data["id"] == campaign["id"]
    failed = await jobs.events(acme.organization_id, "campaign.message.failed")
    assert {event.data["phone_number"] for event in failed} == {"+15005550001", "+15005550009"}
    delivered = await jobs.events(acme.organization_id, "campaign.message.delivered")
    assert all(set(event.data) == RECIPIENT_EVENT_FIELDS for event in [*failed, *delivered])
    assert {event.data["campaign_id"] for event in [*failed, *delivered]} == {campaign["id"]}
    # A second copy of the dispatch job finds nothing to send: no recipient twice.
    assert await dispatch.dispatch_campaign(jobs.resources, campaign["id"]) is None
    assert [(await fetch_campaign(client, acme, campaign["id"]))[name] for name in COUNTERS] == [
        5,
        3,
        3,
        2,
        2,
    ]


async def test_missing_contact_value_fails_that_recipient_only(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada", custom_fields={"order": "A-1"})
    await create_contact(client, acme, "+14155550101", "Bob")
    body = campaign_body(
        channel,
        template,
        template_parameters={"1": "{{contact.name}}", "2": "{{ contact.custom_fields.order }}"},
    )
    campaign = await launch_campaign(client, acme, body)
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert settled["status"] == "completed"
    assert (settled["sent_count"], settled["failed_count"]) == (1, 1)
    rows = await ledger(sessionmaker, campaign["id"])
    assert rows["+14155550101"].status == "failed"
    assert rows["+14155550101"].error == "Contact has no custom field 'order'"
    assert rows["+14155550100"].status == "read"


async def test_a_variable_without_a_parameter_fails_every_recipient_with_the_reason(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    campaign = await launch_campaign(
        client, acme, campaign_body(channel, template, template_parameters={"1": "Hi"})
    )
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert (settled["status"], settled["failed_count"], settled["sent_count"]) == (
        "completed",
        1,
        0,
    )
    rows = await ledger(sessionmaker, campaign["id"])
    assert rows["+14155550100"].error == "Template variable {{2}} has no value"


@pytest.mark.usefixtures("batches_of_two")
async def test_pause_stops_between_batches_and_resume_finishes(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    for n in range(5):
        await create_contact(client, acme, f"+1415555020{n}", f"P{n}")
    campaign = await launch_campaign(client, acme, campaign_body(channel, template))
    # One run sends one batch of two, then yields (rescheduled at once).
    again = await dispatch.dispatch_campaign(jobs.resources, campaign["id"])
    assert again is not None
    paused = await client.post(f"{CAMPAIGNS}/{campaign['id']}/pause", headers=acme.headers)
    assert paused.json()["status"] == "paused"
    assert paused.json()["sent_count"] == 2
    # The job's next run finds the campaign paused and ends without sending.
    assert await dispatch.dispatch_campaign(jobs.resources, campaign["id"]) is None
    statuses = [row.status for row in (await ledger(sessionmaker, campaign["id"])).values()]
    assert statuses.count("pending") == 3
    resumed = await client.post(f"{CAMPAIGNS}/{campaign['id']}/resume", headers=acme.headers)
    assert resumed.json()["status"] == "sending"
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert (settled["status"], settled["sent_count"], settled["read_count"]) == (
        "completed",
        5,
        5,
    )


@pytest.mark.usefixtures("batches_of_two")
async def test_cancel_leaves_queued_recipients_unprocessed(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    for n in range(5):
        await create_contact(client, acme, f"+1415555030{n}", f"P{n}")
    campaign = await launch_campaign(client, acme, campaign_body(channel, template))
    await dispatch.dispatch_campaign(jobs.resources, campaign["id"])
    cancelled = await client.post(f"{CAMPAIGNS}/{campaign['id']}/cancel", headers=acme.headers)
    assert cancelled.json()["status"] == "cancelled"
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    # The two handed to the platform still complete; the three queued are never sent.
    assert (settled["status"], settled["sent_count"], settled["read_count"]) == (
        "cancelled",
        2,
        2,
    )
    statuses = [row.status for row in (await ledger(sessionmaker, campaign["id"])).values()]
    assert sorted(statuses) == ["pending", "pending", "pending", "read", "read"]


async def test_scheduled_campaign_starts_from_the_database_schedule(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    start = utcnow() + timedelta(seconds=1.5)
    campaign = await launch_campaign(
        client, acme, campaign_body(channel, template, scheduled_at=start.isoformat())
    )
    assert campaign["status"] == "scheduled"
    # The schedule is an outbox row due at scheduled_at: the sweep, not Redis, holds it.
    async with sessionmaker() as session:
        job = await session.scalar(select(OutboxJob).where(OutboxJob.actor == DISPATCH_ACTOR))
        assert job is not None
        assert job.args == [campaign["id"]]
        assert abs((job.available_at - start).total_seconds()) < 0.01
        assert job.dispatched_at is None
    # Run early (a stray copy): still scheduled, it asks to run again at the start time.
    again = await dispatch.dispatch_campaign(jobs.resources, campaign["id"])
    assert again is not None
    assert abs((again - start).total_seconds()) < 0.01
    assert (await fetch_campaign(client, acme, campaign["id"]))["status"] == "scheduled"
    await asyncio.sleep(max(0.0, (start - utcnow()).total_seconds()) + 0.05)
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert (settled["status"], settled["sent_count"], settled["read_count"]) == (
        "completed",
        1,
        1,
    )
    started = await jobs.events(acme.organization_id, "campaign.started")
    assert len(started) == 1


async def test_a_claim_left_by_a_dead_run_is_failed_not_resent(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    await create_contact(client, acme, "+14155550101", "Bob")
    campaign = await launch_campaign(client, acme, campaign_body(channel, template))
    claimed_at = utcnow()
    async with sessionmaker() as session:
        # A run claimed Bob, then died before recording the platform's answer.
        await session.execute(
            update(CampaignRecipient)
            .where(
                CampaignRecipient.campaign_id == campaign["id"],
                CampaignRecipient.phone_number == "+14155550101",
            )
            .values(status="claimed", claimed_at=claimed_at)
        )
        await session.commit()
    # While the claim is young it may still be in flight: look again when it goes stale.
    again = await dispatch.dispatch_campaign(jobs.resources, campaign["id"])
    assert again is not None
    expected = claimed_at + timedelta(seconds=jobs.resources.settings.campaign_claim_stale_seconds)
    assert abs((again - expected).total_seconds()) < 0.01
    assert (await fetch_campaign(client, acme, campaign["id"]))["status"] == "sending"
    async with sessionmaker() as session:
        await session.execute(
            update(CampaignRecipient)
            .where(CampaignRecipient.status == "claimed")
            .values(
                claimed_at=claimed_at
                - timedelta(seconds=jobs.resources.settings.campaign_claim_stale_seconds + 1)
            )
        )
        await session.commit()
    assert await dispatch.dispatch_campaign(jobs.resources, campaign["id"]) is None
    await jobs.drain()
    settled = await fetch_campaign(client, acme, campaign["id"])
    assert (settled["status"], settled["sent_count"], settled["failed_count"]) == (
        "completed",
        1,
        1,
    )
    rows = await ledger(sessionmaker, campaign["id"])
    assert rows["+14155550101"].platform_message_id is None
    assert rows["+14155550101"].error == dispatch.UNCONFIRMED_SEND
    # Where operators read the ledger, the reason says the message most likely arrived (in
    # every fault run all such sends had been delivered): never re-send them blindly.
    export = await client.get(
        f"/api/v1/campaigns/{campaign['id']}/recipients.csv", headers=acme.headers
    )
    [bob] = [row for row in csv.DictReader(io.StringIO(export.text)) if row["name"] == "Bob"]
    assert (bob["status"], bob["error"]) == ("failed", dispatch.UNCONFIRMED_SEND)
    assert "most likely delivered" in bob["error"]
    assert "Do not send it again without checking" in bob["error"]
