"""The live dispatch hot path against the local fake Graph API: batched claims and settles,
pacing through the channel's send governor, 130429 and 131056 answers (sent again later, once),
pause-to-quiet through the real job engine, and counters equal to the ledger under concurrent
status callbacks and batch settles on PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from app.campaigns import dispatch, statuses
from app.campaigns.models import Campaign, CampaignRecipient
from app.campaigns.repository import Outcome
from app.channels.models import Channel
from app.config import Settings
from app.contacts.models import Contact
from app.core.clock import utcnow
from app.core.ids import new_id
from app.db.engine import create_engine, create_sessionmaker
from app.events.models import Event
from app.events.service import FAN_OUT_ACTOR
from app.kit.outbox_models import OutboxJob
from app.organizations.service import create_organization
from app.templates.models import MessageTemplate
from tests.campaigns.conftest import CAMPAIGNS, Jobs, campaign_body, create_contact
from tests.campaigns.test_campaign_live import approved_live_template
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph
from tests.templates.conftest import CHANNELS, VALID_BODY, WABA, create_channel
from tests.webhooks.test_delivery_engine import eventually, running_engine

TOKEN = "EAAGtest-token"
# The channels' default pace (Meta's default throughput).
RATE = 80


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN) as fake:
        yield fake


@pytest.fixture
def settings(database_url: str, tmp_path: Path, graph: FakeGraph) -> Settings:
    return make_settings(database_url, tmp_path, graph_api_url=graph.base_url)


def phones_for(prefix: int, count: int) -> list[str]:
    return [f"+1{prefix:03d}{n:07d}" for n in range(count)]


async def add_contacts(
    sessionmaker: async_sessionmaker[AsyncSession], organization_id: str, phones: list[str]
) -> None:
    async with sessionmaker() as session:
        session.add_all(
            Contact(organization_id=organization_id, phone_number=phone, name=f"P{n}")
            for n, phone in enumerate(phones)
        )
        await session.commit()


async def launch_live(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
    phones: list[str],
    graph: FakeGraph,
) -> tuple[Tenant, str]:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    channel = await create_channel(
        client, live, phone_number_id=f"live-{new_id()[:12]}", platform=graph
    )
    template = await approved_live_template(sessionmaker, acme, channel["id"])
    await add_contacts(sessionmaker, acme.organization_id, phones)
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=live.headers
    )
    assert created.status_code == 201, created.text
    campaign_id = created.json()["id"]
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=live.headers)
    assert launched.json()["status"] == "sending", launched.text
    return live, campaign_id


def sends_to(graph: FakeGraph, phones: list[str], since: int = 0) -> list[tuple[float, str]]:
    """(arrival, recipient) of the fake's sends to `phones`, from its `since`-th send on (the
    fake is shared by the module's tests)."""
    wanted = set(phones)
    return [
        (at, message["to"])
        for at, message in zip(graph.message_times[since:], graph.messages[since:], strict=True)
        if message["to"] in wanted
    ]


async def ledger_counts(session: AsyncSession, campaign_id: str) -> list[int]:
    rows = dict(
        (
            await session.execute(
                select(CampaignRecipient.status, func.count())
                .where(CampaignRecipient.campaign_id == campaign_id)
                .group_by(CampaignRecipient.status)
            )
        ).all()
    )
    sent = rows.get("sent", 0) + rows.get("delivered", 0) + rows.get("read", 0)
    delivered = rows.get("delivered", 0) + rows.get("read", 0)
    return [sent, delivered, rows.get("read", 0), rows.get("failed", 0)]


async def stored_counts(session: AsyncSession, campaign_id: str) -> list[int]:
    campaign = await session.get(Campaign, campaign_id, populate_existing=True)
    assert campaign is not None
    return [
        campaign.sent_count,
        campaign.delivered_count,
        campaign.read_count,
        campaign.failed_count,
    ]


async def test_live_dispatch_claims_and_settles_in_batches_at_the_channel_rate(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
    connection: AsyncConnection,
    dialect: str,
) -> None:
    count = 200
    phones = phones_for(201, count)
    since = len(graph.messages)
    live, campaign_id = await launch_live(client, acme, tenants, sessionmaker, phones, graph)
    ledger_writes: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith(("UPDATE CAMPAIGN_RECIPIENTS", "WITH PICKED")):
            ledger_writes.append(statement)

    event.listen(connection.sync_connection, "before_cursor_execute", seen)
    try:
        await jobs.drain()
    finally:
        event.remove(connection.sync_connection, "before_cursor_execute", seen)
    settled = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (settled["status"], settled["sent_count"], settled["failed_count"]) == (
        "completed",
        count,
        0,
    )
    sends = sends_to(graph, phones, since)
    assert sorted(to for _, to in sends) == sorted(phones)  # each exactly once
    # Paced by the governor at the channel's rate: after the first burst (a tenth of a
    # second's worth), no faster than the rate; generous above, the machine is shared.
    span = sends[-1][0] - sends[0][0]
    assert span >= (count - RATE // 10) / RATE * 0.9, span
    assert span < (count / RATE) * 4, span
    async with sessionmaker() as session:
        sent_events = await session.scalar(
            select(func.count()).where(
                Event.organization_id == acme.organization_id, Event.type == "message.sent"
            )
        )
        fan_outs = list(
            await session.scalars(select(OutboxJob).where(OutboxJob.actor == FAN_OUT_ACTOR))
        )
        events = await session.scalar(select(func.count()).select_from(Event))
    assert sent_events == count
    # One fan-out job per settled batch, carrying all of its events.
    assert sum(len(job.args) for job in fan_outs) == events
    assert len(fan_outs) < count / 4
    if dialect == "postgresql":
        # Claims and settles write many rows per statement (two per recipient without).
        assert len(ledger_writes) < count / 2, len(ledger_writes)


async def test_throughput_exceeded_holds_the_channel_and_sends_again_once(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    phones = phones_for(202, 20)
    since = len(graph.messages)
    live, campaign_id = await launch_live(client, acme, tenants, sessionmaker, phones, graph)
    graph.fail_with("/messages", 400, 130429, "(#130429) Rate limit hit", times=3)
    await jobs.drain()
    settled = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (settled["status"], settled["sent_count"], settled["failed_count"]) == (
        "completed",
        20,
        0,
    )
    sends = sends_to(graph, phones, since)
    assert sorted(to for _, to in sends) == sorted(phones)  # no loss, no duplicate
    # The governor held the channel (about a second) before the throttled ones went again.
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(sends)]
    assert max(gaps) >= 0.8, gaps


async def test_pair_rate_limited_recipient_is_sent_later_once(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    phones = phones_for(203, 10)
    since = len(graph.messages)
    live, campaign_id = await launch_live(client, acme, tenants, sessionmaker, phones, graph)
    before = len(graph.requests)
    graph.fail_with(
        "/messages",
        400,
        131056,
        "(#131056) (Business Account, Consumer Account) pair rate limit hit",
        headers={"Retry-After": "1"},
    )
    started = time.monotonic()
    await jobs.drain()
    settled = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (settled["status"], settled["sent_count"], settled["failed_count"]) == (
        "completed",
        10,
        0,
    )
    limited = next(seen.json["to"] for seen in graph.requests[before:] if "/messages" in seen.path)
    sends = sends_to(graph, phones, since)
    assert sorted(to for _, to in sends) == sorted(phones)
    [(sent_at, _)] = [send for send in sends if send[1] == limited]
    assert sent_at - started >= 0.9  # waited out the platform's pair wait


# --- through the job engine, on committed databases ----------------------------------------


@pytest.fixture(scope="module")
def committed_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("hot"), "sb_hot") as url:
        yield url


async def test_pause_stops_sends_within_a_slice_and_resume_sends_the_rest_once(
    committed_pg: str, tmp_path: Path, graph: FakeGraph
) -> None:
    count = 400
    phones = phones_for(204, count)
    since = len(graph.messages)
    async with running_engine(committed_pg, tmp_path, graph_api_url=graph.base_url) as engine:
        tenant = await engine.tenants.organization()
        live, campaign_id = await launch_live(
            engine.client, tenant, engine.tenants, engine.sessionmaker, phones, graph
        )
        client = engine.client

        async def some_sent() -> bool:
            return len(sends_to(graph, phones, since)) >= 40

        await eventually(some_sent, 20.0)
        paused = await client.post(f"{CAMPAIGNS}/{campaign_id}/pause", headers=live.headers)
        quiet_from = time.monotonic()
        assert paused.json()["status"] == "paused"
        await asyncio.sleep(1.5)
        sends = sends_to(graph, phones, since)
        late = [at - quiet_from for at, _ in sends if at > quiet_from + 0.3]
        assert late == []  # nothing left after the pause but what was already in flight
        assert len(sends) < count
        async with engine.sessionmaker() as session:
            statuses = dict(
                (
                    await session.execute(
                        select(CampaignRecipient.status, func.count())
                        .where(CampaignRecipient.campaign_id == campaign_id)
                        .group_by(CampaignRecipient.status)
                    )
                ).all()
            )
            # Every claim settled or given back: resume continues exactly where it stopped.
            assert "claimed" not in statuses
            assert statuses["sent"] == len(sends)
            assert statuses["pending"] == count - len(sends)
            assert await stored_counts(session, campaign_id) == await ledger_counts(
                session, campaign_id
            )
        resumed = await client.post(f"{CAMPAIGNS}/{campaign_id}/resume", headers=live.headers)
        assert resumed.json()["status"] == "sending"

        async def completed() -> bool:
            found = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
            return bool(found["status"] == "completed")

        await eventually(completed, 30.0)
        assert sorted(to for _, to in sends_to(graph, phones, since)) == sorted(phones)


@pytest.fixture
async def committed_sessions(committed_pg: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    database = create_engine(committed_pg, pool_size=12)
    try:
        yield create_sessionmaker(database)
    finally:
        await database.dispose()


async def test_counters_equal_the_ledger_after_concurrent_callbacks_and_settles(
    committed_sessions: async_sessionmaker[AsyncSession],
) -> None:
    sessions = committed_sessions
    count = 300
    async with sessions() as session:
        organization = await create_organization(session, "Counters")
        channel = Channel(
            id=new_id(),
            organization_id=organization.id,
            display_phone_number="+14155550142",
            phone_number_id=f"pn-{new_id()[:8]}",
            business_account_id=WABA,
            livemode=True,
            access_token_encrypted="sealed",
        )
        session.add(channel)
        await session.flush()  # no ORM relationship orders the inserts
        template = MessageTemplate(
            id=new_id(),
            organization_id=organization.id,
            channel_id=channel.id,
            business_account_id=WABA,
            platform_template_id="1",
            name="order_shipped",
            language="en_US",
            category="UTILITY",
            status="APPROVED",
            components=[VALID_BODY],
            quality_score="GREEN",
            livemode=True,
        )
        campaign = Campaign(
            id=new_id(),
            organization_id=organization.id,
            name="Counters",
            chat_phone_number_id=channel.id,
            message_template_id=template.id,
            audience_type="all",
            status="sending",
            total_contacts_count=count,
            sent_count=count // 2,
            delivered_count=0,
            read_count=0,
            failed_count=0,
            livemode=True,
        )
        session.add(template)
        await session.flush()
        session.add(campaign)
        await session.flush()
        # Half handed to the platform already, half claimed by runs still sending.
        session.add_all(
            CampaignRecipient(
                campaign_id=campaign.id,
                contact_id=f"c{n:05d}",
                phone_number=f"+1415{n:07d}",
                name=f"P{n}",
                status="sent" if n < count // 2 else "claimed",
                platform_message_id=f"wamid.{n}" if n < count // 2 else None,
            )
            for n in range(count)
        )
        await session.commit()
    owner = dispatch.Unsendable(campaign.id, organization.id, True, "unused")
    rng = random.Random(14)
    callbacks = [
        (f"wamid.{n}", rng.choice(["delivered", "read", "failed", "sent"]))
        for n in range(count // 2)
        for _ in range(3)  # duplicates and reorderings of each message's statuses
    ]
    rng.shuffle(callbacks)
    gate = asyncio.Semaphore(10)

    async def callback(message_id: str, status: str) -> None:
        async with gate, sessions() as session:
            entry = {"id": message_id, "status": status}
            assert await statuses.apply_status(session, channel.id, entry, "failed upstream")
            await session.commit()

    async def settle(first: int) -> None:
        outcomes = [
            Outcome(f"c{n:05d}", f"wamid.{n}", None) if n % 3 else Outcome(f"c{n:05d}", None, "x")
            for n in range(first, first + 30)
        ]
        async with gate, sessions() as session:
            await dispatch.settle_sends(session, owner, outcomes)
            await session.commit()

    await asyncio.gather(
        *(callback(message_id, status) for message_id, status in callbacks),
        *(settle(first) for first in range(count // 2, count, 30)),
    )
    async with sessions() as session:
        stored = await stored_counts(session, campaign.id)
        assert stored == await ledger_counts(session, campaign.id)
        found = await session.get(Campaign, campaign.id)
        assert found is not None
        # Every recipient sent or failed: the last settle completed the campaign.
        assert found.status == "completed"
        assert stored[0] + stored[3] == count


async def test_a_channel_cannot_be_deleted_while_a_campaign_uses_it(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    later = (utcnow() + timedelta(hours=1)).isoformat()
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template, scheduled_at=later), headers=acme.headers
    )
    campaign_id = created.json()["id"]
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=acme.headers)
    assert launched.json()["status"] == "scheduled"
    for state, move in (("scheduled", "pause"), ("paused", "resume")):
        refused = await client.delete(f"{CHANNELS}/{channel['id']}", headers=acme.headers)
        assert refused.status_code == 400
        assert refused.json() == {
            "detail": f"Cannot delete channel: campaign 'Spring sale' is in {state} state; "
            "cancel it first"
        }
        await client.post(f"{CAMPAIGNS}/{campaign_id}/{move}", headers=acme.headers)
    await client.post(f"{CAMPAIGNS}/{campaign_id}/cancel", headers=acme.headers)
    deleted = await client.delete(f"{CHANNELS}/{channel['id']}", headers=acme.headers)
    assert deleted.status_code == 204
    # A finished campaign goes with its channel.
    gone = await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=acme.headers)
    assert gone.status_code == 404
