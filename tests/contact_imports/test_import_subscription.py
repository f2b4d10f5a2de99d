"""`contactImportProgress` takes one of the organization's open subscriptions, as the
streamed subscriptions do: refused at the cap, given back when it ends, and another
organization's subscriptions are untouched."""

from __future__ import annotations

import asyncio

from app.core.ids import new_id
from app.kit.event_stream import SubscriptionQuota
from tests.conftest import Tenant
from tests.contact_imports.rows import queued_import as queued_import_row
from tests.events.test_graphql_subscription import Harness, _bearer, committed_url, harness

__all__ = ["committed_url", "harness"]

PROGRESS = """subscription($id: ID!) { contactImportProgress(id: $id) { id status } }"""


async def queued_import(harness: Harness, tenant: Tenant) -> str:
    """An import that stays queued (no job runs it), so its subscription stays open."""
    import_id = new_id()
    async with harness.sessionmaker() as session:
        session.add(queued_import_row(tenant.organization_id, import_id, size_bytes=10))
        await session.commit()
    return import_id


async def test_import_progress_counts_toward_the_subscription_cap(harness: Harness) -> None:
    harness.resources.subscriptions = SubscriptionQuota(2)
    quota = harness.resources.subscriptions
    org_a = await harness.tenants.organization("Org A")
    org_b = await harness.tenants.organization("Org B")
    import_id = await queued_import(harness, org_a)
    async with harness.socket() as socket:
        assert await socket.init(_bearer(org_a)) == {"type": "connection_ack"}
        for op in ("1", "2"):
            await socket.subscribe(PROGRESS, {"id": import_id}, op=op)
            first = await socket.receive()
            assert first["id"] == op
            assert first["payload"]["data"]["contactImportProgress"] == {
                "id": import_id,
                "status": "queued",
            }
        assert quota.open_count(org_a.organization_id) == 2
        # The cap holds for every kind of subscription: another import's, or the events.
        await socket.subscribe(PROGRESS, {"id": import_id}, op="3")
        refused = await socket.receive()
        # Refused before it starts: an `error` message, whose payload is the errors.
        assert (refused["id"], refused["type"]) == ("3", "error")
        [error] = refused["payload"]
        assert error["extensions"] == {"code": "too_many_subscriptions"}
        await socket.subscribe(op="4")
        refused = await socket.receive()
        assert refused["id"] == "4"
        [error] = refused["payload"]["errors"]  # the events subscription's refusal
        assert error["extensions"] == {"code": "too_many_subscriptions"}

        # Org B is not held back by Org A's subscriptions.
        async with harness.subscribed(org_b) as theirs:
            contact = await harness.create_contact(org_b)
            assert (await theirs.next_event())["data"] == contact

        # Ending one gives its place back.
        await socket.send({"id": "1", "type": "complete"})
        for _ in range(200):
            if quota.open_count(org_a.organization_id) == 1:
                break
            await asyncio.sleep(0.01)
        assert quota.open_count(org_a.organization_id) == 1
        await socket.subscribe(PROGRESS, {"id": import_id}, op="5")
        again = await socket.receive()
        while again["type"] == "complete":  # the refused operations' ends
            again = await socket.receive()
        assert again["id"] == "5"
        assert "errors" not in again["payload"], again
    # A closed socket gives back what it held.
    for _ in range(200):
        if quota.open_count(org_a.organization_id) == 0:
            break
        await asyncio.sleep(0.01)
    assert quota.open_count(org_a.organization_id) == 0


async def test_an_unknown_import_takes_no_place(harness: Harness) -> None:
    harness.resources.subscriptions = SubscriptionQuota(1)
    org_a = await harness.tenants.organization("Org A")
    async with harness.socket() as socket:
        await socket.init(_bearer(org_a))
        await socket.subscribe(PROGRESS, {"id": new_id()}, op="1")
        refused = await socket.receive()
        assert (refused["id"], refused["type"]) == ("1", "error")
        assert refused["payload"][0]["extensions"]["code"] == "not_found"
        assert harness.resources.subscriptions.open_count(org_a.organization_id) == 0
