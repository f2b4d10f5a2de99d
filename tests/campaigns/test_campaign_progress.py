"""campaignProgress(id) over graphql-transport-ws: the campaign's counters now, then each
change as the in-process worker dispatches against the simulator, until it completes; counter
changes without an event are caught by re-reading the row; other tenants, unknown ids and
missing scopes are refused."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest
from sqlalchemy import update

from app.campaigns import reports
from app.campaigns.models import Campaign
from tests.campaigns.conftest import CAMPAIGNS, simulated_campaign_body
from tests.conftest import Tenant
from tests.events.test_graphql_subscription import (  # noqa: F401 (fixtures)
    Harness,
    Socket,
    committed_url,
    harness,
)

PROGRESS = """subscription($id: ID!) { campaignProgress(id: $id) {
  campaignId status startedAt completedAt
  stats { total pending sent delivered read failed deliveryRate readRate } } }"""
COUNTERS = ("total", "sent", "delivered", "read", "failed")
REST_COUNTERS = (
    "total_contacts_count",
    "sent_count",
    "delivered_count",
    "read_count",
    "failed_count",
)


async def eventually(check: Any, seconds: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def prepare(app_harness: Harness, tenant: Tenant, phones: list[str]) -> dict[str, Any]:
    """A test-mode channel, an APPROVED template and contacts; the body of a campaign."""
    return await simulated_campaign_body(app_harness.client, tenant, phones, "Progress", eventually)


async def create(app_harness: Harness, tenant: Tenant, body: dict[str, Any]) -> str:
    created = await app_harness.client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    assert created.status_code == 201, created.text
    campaign_id: str = created.json()["id"]
    return campaign_id


async def move(app_harness: Harness, tenant: Tenant, campaign_id: str, action: str) -> None:
    moved = await app_harness.client.post(
        f"{CAMPAIGNS}/{campaign_id}/{action}", headers=tenant.headers
    )
    assert moved.status_code == 200, moved.text


async def next_progress(socket: Socket, op: str = "1") -> dict[str, Any] | None:
    """The next snapshot, or None when the subscription completed."""
    message = await socket.receive()
    if message["type"] == "complete":
        assert message["id"] == op
        return None
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    progress: dict[str, Any] = message["payload"]["data"]["campaignProgress"]
    return progress


async def until_complete(socket: Socket, op: str = "1") -> list[dict[str, Any]]:
    steps = []
    while (step := await next_progress(socket, op)) is not None:
        steps.append(step)
    return steps


def counters(step: dict[str, Any]) -> list[int]:
    return [step["stats"][name] for name in COUNTERS]


async def test_progress_from_draft_to_completed_with_exact_counters(
    harness: Harness,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A draft is re-read only every minute here: the launch must reach the subscriber
    # through the campaign's events.
    monkeypatch.setattr(reports, "DRAFT_RECHECK_SECONDS", 60.0)
    tenant = await harness.tenants.organization()
    phones = ["+15005550001", "+15005550009", "+15005550010", "+14155550100", "+14155550101"]
    body = await prepare(harness, tenant, phones)
    campaign_id = await create(harness, tenant, body)
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": campaign_id})
        first = await next_progress(socket)
        assert first is not None
        assert (first["campaignId"], first["status"], counters(first)) == (
            campaign_id,
            "draft",
            [0, 0, 0, 0, 0],
        )
        launched_at = asyncio.get_running_loop().time()
        await move(harness, tenant, campaign_id, "launch")
        steps = [first, *await until_complete(socket)]
        assert asyncio.get_running_loop().time() - launched_at < 30.0

        # Completed = every recipient sent or failed; receipts may still move the counters
        # (…09 fails after its send, reads come later): the campaign's stats show them.
        async def receipts_in() -> bool:
            found = await harness.client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)
            body = found.json()
            return [body[name] for name in REST_COUNTERS] == [5, 3, 3, 2, 2]

        await eventually(receipts_in)
        # A finished campaign answers its state once and completes.
        await socket.subscribe(PROGRESS, {"id": campaign_id}, op="2")
        again = await until_complete(socket, op="2")

    last = steps[-1]
    assert last["status"] == "completed"
    assert last["completedAt"] is not None
    assert last["stats"]["total"] == 5
    assert last["stats"]["pending"] == 0
    assert last["stats"]["sent"] + last["stats"]["failed"] == 5
    # (A dispatch that finishes between two reads goes from draft to completed in one step.)
    assert {step["status"] for step in steps} <= {"draft", "sending", "completed"}
    # Only changes are pushed; delivered, read and failed only grow (sent may shrink: a sent
    # message can fail later).
    for before, after in itertools.pairwise(steps):
        assert (before["status"], counters(before)) != (after["status"], counters(after))
        for name in ("delivered", "read", "failed"):
            assert after["stats"][name] >= before["stats"][name]
    [settled] = again
    assert (settled["status"], counters(settled)) == ("completed", [5, 3, 3, 2, 2])
    assert settled["stats"]["readRate"] == round(2 / 3, 4)


async def test_a_counter_change_without_an_event_is_pushed(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    body = await prepare(harness, tenant, ["+14155550100", "+14155550101"])
    campaign_id = await create(harness, tenant, {**body, "scheduled_at": "2099-01-01T00:00:00Z"})
    await move(harness, tenant, campaign_id, "launch")
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": campaign_id})
        first = await next_progress(socket)
        assert first is not None
        assert (first["status"], counters(first)) == ("scheduled", [2, 0, 0, 0, 0])
        # A write that emits no event (as an incremental counter update does).
        async with harness.sessionmaker() as session:
            await session.execute(
                update(Campaign).where(Campaign.id == campaign_id).values(failed_count=1)
            )
            await session.commit()
        started = asyncio.get_running_loop().time()
        changed = await next_progress(socket)
        waited = asyncio.get_running_loop().time() - started
        assert changed is not None
        assert (changed["status"], counters(changed)) == ("scheduled", [2, 0, 0, 0, 1])
        assert changed["stats"]["pending"] == 1
        assert waited < 3.0  # the poll interval (0.5 s) plus a loaded machine's slack
        await move(harness, tenant, campaign_id, "pause")
        paused = await next_progress(socket)
        assert paused is not None
        assert paused["status"] == "paused"
        await move(harness, tenant, campaign_id, "cancel")
        rest = await until_complete(socket)
    assert [step["status"] for step in rest] == ["cancelled"]


async def test_unknown_foreign_and_unauthorised(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    other = await harness.tenants.organization("Globex")
    body = await prepare(harness, other, [])
    foreign = await create(harness, other, body)
    reader = await harness.tenants.key(tenant, ["agents:read"])
    manager = await harness.tenants.key(other, ["campaigns:manage"])
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        for op, campaign_id in (("1", foreign), ("2", str(uuid.uuid4())), ("3", "nope")):
            await socket.subscribe(PROGRESS, {"id": campaign_id}, op=op)
            refused = await socket.receive()
            assert refused["type"] == "error", refused
            assert refused["id"] == op
            [error] = refused["payload"]
            assert error["message"] == "Campaign not found"
            assert error["extensions"]["code"] == "not_found"

    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {reader.api_key}"})
        await socket.subscribe(PROGRESS, {"id": foreign})
        forbidden = await socket.receive()
    errors = (
        forbidden["payload"] if forbidden["type"] == "error" else forbidden["payload"]["errors"]
    )
    assert errors[0]["extensions"]["code"] == "insufficient_scope"

    # A campaigns:manage key of the owner may subscribe.
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {manager.api_key}"})
        await socket.subscribe(PROGRESS, {"id": foreign})
        mine = await next_progress(socket)
    assert mine is not None
    assert mine["status"] == "draft"


async def test_a_test_key_cannot_follow_a_live_campaign(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    live = await harness.tenants.key(tenant, ["campaigns:manage"], livemode=True)
    campaign_id = await create(harness, tenant, await prepare(harness, tenant, []))
    async with harness.sessionmaker() as session:  # as a live channel's campaign is stored
        await session.execute(
            update(Campaign).where(Campaign.id == campaign_id).values(livemode=True)
        )
        await session.commit()
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": campaign_id})
        refused = await socket.receive()
    assert refused["type"] == "error", refused
    assert refused["payload"][0]["extensions"]["code"] == "livemode_mismatch"
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {live.api_key}"})
        await socket.subscribe(PROGRESS, {"id": campaign_id})
        followed = await next_progress(socket)
    assert followed is not None
    assert followed["status"] == "draft"


async def test_over_post_it_is_refused(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    response = await harness.client.post(
        "/graphql",
        json={"query": PROGRESS, "variables": {"id": str(uuid.uuid4())}},
        headers=tenant.headers,
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"
