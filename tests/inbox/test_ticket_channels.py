"""A ticket created through the API may name the messaging channel its replies go through
(`chat_phone_number_id`): one of the organization's channels, usable by the credential; the
ticket takes the channel's mode."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import Tenant, TenantFactory, graphql
from tests.inbox.conftest import TICKETS, Inbox, org_headers

CHANNEL_NOT_FOUND = {"detail": "Channel/phone number not found"}


async def channel(client: httpx.AsyncClient, tenant: Tenant, phone_number_id: str) -> str:
    body = {
        "display_phone_number": "+14155550142",
        "phone_number_id": phone_number_id,
        "business_account_id": "WABA1",
        "access_token": "token",
    }
    response = await client.post("/api/v1/channels", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def create(
    client: httpx.AsyncClient, tenant: Tenant, contact_id: str, channel_id: Any
) -> httpx.Response:
    body = {"contact_id": contact_id, "chat_phone_number_id": channel_id}
    return await client.post(TICKETS, json=body, headers=org_headers(tenant))


async def test_a_ticket_with_a_channel_can_be_replied_through_it(
    client: httpx.AsyncClient, acme: Tenant, inbox: Inbox
) -> None:
    channel_id = await channel(client, acme, "1001")
    contact = await inbox.contact(acme)
    created = await create(client, acme, contact["id"], channel_id)
    assert created.status_code == 201, created.text
    ticket = created.json()
    assert (ticket["chat_phone_number_id"], ticket["livemode"]) == (channel_id, False)
    assert (await client.get(f"{TICKETS}/{ticket['id']}", headers=acme.headers)).json() == ticket
    # The reply goes to the channel: what stops a free-form text now is WhatsApp's window
    # (the contact never wrote), no longer "no messaging channel".
    reply = await client.post(
        f"{TICKETS}/{ticket['id']}/messages", json={"text": "Hello"}, headers=acme.headers
    )
    assert reply.status_code == 400
    assert "24-hour" in reply.json()["detail"]


async def test_the_contacts_open_ticket_takes_the_channel_it_lacked(
    client: httpx.AsyncClient, acme: Tenant, inbox: Inbox
) -> None:
    contact = await inbox.contact(acme)
    first = await inbox.open(acme, contact["id"])
    assert first["chat_phone_number_id"] is None
    channel_id = await channel(client, acme, "1002")
    again = await create(client, acme, contact["id"], channel_id)
    assert again.status_code == 200
    assert (again.json()["id"], again.json()["chat_phone_number_id"]) == (first["id"], channel_id)
    # A ticket with a channel keeps it.
    other_channel = await channel(client, acme, "1003")
    kept = await create(client, acme, contact["id"], other_channel)
    assert (kept.status_code, kept.json()["chat_phone_number_id"]) == (200, channel_id)


async def test_unknown_foreign_and_malformed_channels(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, inbox: Inbox
) -> None:
    contact = await inbox.contact(acme)
    theirs = await channel(client, globex, "1004")
    for channel_id in (str(uuid.uuid4()), theirs):
        refused = await create(client, acme, contact["id"], channel_id)
        assert (refused.status_code, refused.json()) == (400, CHANNEL_NOT_FOUND)
    malformed = await create(client, acme, contact["id"], "not-a-uuid")
    assert malformed.status_code == 422
    assert malformed.json()["detail"][0]["loc"] == ["body", "chat_phone_number_id"]
    # Nothing was created by the refusals.
    listed = await client.get(TICKETS, headers=acme.headers)
    assert listed.json()["data"] == []


async def test_a_live_key_on_a_test_channel_opens_a_test_mode_ticket(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, inbox: Inbox
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    test_channel = await channel(client, acme, "1005")
    contact = await inbox.contact(acme)
    created = await create(client, live, contact["id"], test_channel)
    assert (created.status_code, created.json()["livemode"]) == (201, False)
    # So the test key sees it, and a live key's ticket without a channel is live.
    assert (await client.get(f"{TICKETS}/{created.json()['id']}", headers=acme.headers)).is_success
    live_ticket = await create(client, live, contact["id"], None)
    assert (live_ticket.status_code, live_ticket.json()["livemode"]) == (201, True)


async def test_create_ticket_over_graphql_with_a_channel(
    client: httpx.AsyncClient, acme: Tenant, inbox: Inbox
) -> None:
    channel_id = await channel(client, acme, "1006")
    contact = await inbox.contact(acme)
    mutation = """mutation($input: TicketCreateInput!) {
      createTicket(input: $input) {
        created ticket { chatPhoneNumberId livemode } errors { code field }
      }
    }"""
    body = await graphql(
        client,
        mutation,
        {"input": {"contactId": contact["id"], "chatPhoneNumberId": str(uuid.uuid4())}},
        acme.headers,
    )
    assert body["data"]["createTicket"]["errors"] == [
        {"code": "channel_not_found", "field": "chatPhoneNumberId"}
    ]
    body = await graphql(
        client,
        mutation,
        {"input": {"contactId": contact["id"], "chatPhoneNumberId": channel_id}},
        acme.headers,
    )
    assert body["data"]["createTicket"] == {
        "created": True,
        "ticket": {"chatPhoneNumberId": channel_id, "livemode": False},
        "errors": [],
    }
