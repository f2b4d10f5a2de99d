"""Call logs connect to the rest of the organization's data: `contact_id` is the
organization's contact for the other party's number (dispatched and inbound calls alike), and
`phone_number_id` the assignment (`/api/v1/phone-numbers`) of the organization's own number,
so `Contact.recentCalls` shows a contact's calls."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.models import AgentPhoneNumber
from app.calls.telephony import INCOMING_PATH
from tests.calls.test_phone_numbers import (  # noqa: F401 (the carrier settings and its fixtures)
    carrier,
    carrier_post,
    create_agent,
    inbound_logs,
    incoming,
    running_carrier,
    settings,
)
from tests.conftest import Tenant, TenantFactory, graphql

CALLER = "+14155550199"  # `incoming()`'s From
RECENT_CALLS = """query($id: ID!) { contact(id: $id) { recentCalls { id direction } } }"""


async def contact(client: httpx.AsyncClient, tenant: Tenant, phone_number: str) -> str:
    response = await client.post(
        "/api/v1/contacts",
        json={"name": "Ada", "phone_number": phone_number},
        headers=tenant.headers,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def assigned(
    sessionmaker: async_sessionmaker[AsyncSession],
    tenant: Tenant,
    agent_id: str,
    number: str,
    *,
    livemode: bool,
) -> str:
    """An assignment stored as the phone-numbers route stores it (no carrier to ask here)."""
    async with sessionmaker() as session:
        assignment = AgentPhoneNumber(
            organization_id=tenant.organization_id,
            agent_id=agent_id,
            phone_number=number,
            livemode=livemode,
        )
        session.add(assignment)
        await session.commit()
    return assignment.id


async def recent_calls(
    client: httpx.AsyncClient, tenant: Tenant, contact_id: str
) -> list[dict[str, Any]]:
    body = await graphql(client, RECENT_CALLS, {"id": contact_id}, tenant.headers)
    assert "errors" not in body, body
    calls: list[dict[str, Any]] = body["data"]["contact"]["recentCalls"]
    return calls


async def test_a_dispatched_call_names_the_contact_and_the_number_it_is_from(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent_id = await create_agent(client, acme)
    contact_id = await contact(client, acme, "+14155550123")
    number_id = await assigned(sessionmaker, acme, agent_id, "+14155550150", livemode=False)
    body = {"agent_id": agent_id, "to_number": "+1 415 555 0123", "from_number": "+14155550150"}
    dispatched = await client.post("/api/v1/calls", json=body, headers=acme.headers)
    assert dispatched.status_code == 201, dispatched.text
    call = dispatched.json()
    assert (call["contact_id"], call["phone_number_id"]) == (contact_id, number_id)
    assert await recent_calls(client, acme, contact_id) == [
        {"id": call["id"], "direction": "outbound"}
    ]
    # No contact for the number, and a from_number the organization does not hold: no links.
    other = {"agent_id": agent_id, "to_number": "+14155550124"}
    unlinked = (await client.post("/api/v1/calls", json=other, headers=acme.headers)).json()
    assert (unlinked["contact_id"], unlinked["phone_number_id"]) == (None, None)


async def test_a_test_key_call_never_links_a_live_number(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent_id = await create_agent(client, acme)
    await assigned(sessionmaker, acme, agent_id, "+14155550151", livemode=True)
    body = {"agent_id": agent_id, "to_number": "+14155550123", "from_number": "+14155550151"}
    dispatched = await client.post("/api/v1/calls", json=body, headers=acme.headers)
    assert dispatched.json()["phone_number_id"] is None


@pytest.mark.parametrize("caller_is_a_contact", [True, False])
async def test_an_inbound_call_names_its_caller_and_the_number_called(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller_is_a_contact: bool,
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    number_id = await assigned(sessionmaker, acme, agent_id, "+14155550160", livemode=True)
    await contact(client, acme, "+14155550100")  # someone else
    caller_id = await contact(client, acme, CALLER) if caller_is_a_contact else None
    answered = await carrier_post(client, INCOMING_PATH, incoming("CA" + "d" * 32, "+14155550160"))
    assert answered.status_code == 200
    [log] = await inbound_logs(client, live)
    assert (log["contact_id"], log["phone_number_id"]) == (caller_id, number_id)
    if caller_id is not None:
        assert await recent_calls(client, live, caller_id) == [
            {"id": log["id"], "direction": "inbound"}
        ]
        # The call is live data: the contact (shared by both modes) shows it to live keys only.
        assert await recent_calls(client, acme, caller_id) == []
