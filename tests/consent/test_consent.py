"""Consent end to end: the API's opt-out and do-not-call, keywords in inbound WhatsApp texts
(settings, confirmation reply, duplicates and out-of-order arrival), Meta's 131050 status
and `user_preferences` webhook, campaigns leaving opted-out contacts out, calls refused."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns.models import CampaignRecipient
from app.consent.service import CONFIRM_ACTOR
from app.conversations.models import Message
from app.events.models import Event
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from tests.campaigns.conftest import CAMPAIGNS, Jobs, campaign_body, create_contact
from tests.conftest import Tenant, TenantFactory, graphql
from tests.conversations.conftest import PHONE_ID, JobWorker, post_signed
from tests.templates.conftest import WABA

CONTACTS = "/api/v1/contacts"
SETTINGS = "/api/v1/consent/settings"
CUSTOMER = "+14155550100"
OTHER = "+14155550111"
DISPLAY = "+14155550142"


async def post_accepted(client: httpx.AsyncClient, payload: dict[str, Any]) -> None:
    response = await post_signed(client, payload)
    assert response.status_code == 200, response.text


async def text_in(
    client: httpx.AsyncClient, message_id: str, text: str, at: int, sender: str = CUSTOMER
) -> None:
    await post_accepted(
        client,
        payloads.inbound_text(
            WABA, PHONE_ID, DISPLAY, message_id, sender, text, profile_name="Ada", timestamp=at
        ),
    )


def user_preferences(wa_id: str, value: str, at: int) -> dict[str, Any]:
    return payloads.envelope(
        WABA,
        "user_preferences",
        {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": DISPLAY.lstrip("+"), "phone_number_id": PHONE_ID},
            "contacts": [{"wa_id": wa_id.lstrip("+"), "profile": {"name": "Ada"}}],
            "user_preferences": [
                {
                    "wa_id": wa_id.lstrip("+"),
                    "detail": "User requested to stop marketing messages",
                    "category": "marketing_messages",
                    "value": value,
                    "timestamp": at,
                }
            ],
        },
    )


async def contact(client: httpx.AsyncClient, tenant: Tenant, contact_id: str) -> dict[str, Any]:
    response = await client.get(f"{CONTACTS}/{contact_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def lead_updates(sessionmaker: async_sessionmaker[AsyncSession], contact_id: str) -> int:
    async with sessionmaker() as session:
        rows = await session.scalars(select(Event).where(Event.type == "lead.updated"))
        return sum(1 for event in rows if event.data["id"] == contact_id)


# --- the API -----------------------------------------------------------------------------


async def test_put_sets_and_clears_consent_with_events(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    created = await create_contact(client, acme, CUSTOMER, "Ada")
    assert created["marketing_opt_out"] is None
    assert created["do_not_call"] is False
    url = f"{CONTACTS}/{created['id']}"

    response = await client.put(
        url, json={"marketing_opt_out": True, "do_not_call": True}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["marketing_opt_out"]["source"] == "api"
    assert body["marketing_opt_out"]["at"].endswith("Z")
    assert body["do_not_call"] is True
    assert await lead_updates(sessionmaker, created["id"]) == 1
    async with sessionmaker() as session:
        [event] = await session.scalars(select(Event).where(Event.type == "lead.updated"))
    assert event.data["marketing_opt_out"]["source"] == "api"

    # Opting out again keeps the first opt-out.
    again = await client.put(url, json={"marketing_opt_out": True}, headers=acme.headers)
    assert again.json()["marketing_opt_out"] == body["marketing_opt_out"]

    cleared = await client.put(
        url, json={"marketing_opt_out": False, "do_not_call": False}, headers=acme.headers
    )
    assert cleared.json()["marketing_opt_out"] is None
    assert cleared.json()["do_not_call"] is False
    assert (await contact(client, acme, created["id"]))["marketing_opt_out"] is None


async def test_put_refuses_bad_consent_values(client: httpx.AsyncClient, acme: Tenant) -> None:
    created = await create_contact(client, acme, CUSTOMER, "Ada")
    url = f"{CONTACTS}/{created['id']}"
    for body in (
        {"marketing_opt_out": None},
        {"do_not_call": None},
        {"marketing_opt_out": "maybe"},
        {"do_not_call": [1]},
    ):
        response = await client.put(url, json=body, headers=acme.headers)
        assert response.status_code == 422, body
        assert response.json()["detail"][0]["loc"][-1] in body


async def test_graphql_reads_and_writes_consent(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    created = await create_contact(client, acme, CUSTOMER, "Ada")
    update = """
    mutation($id: ID!, $input: ContactUpdateInput!) {
      updateContact(id: $id, input: $input) {
        contact { id doNotCall marketingOptOut { at source } }
        errors { code field }
      }
    }"""
    result = await graphql(
        client,
        update,
        {"id": created["id"], "input": {"marketingOptOut": True, "doNotCall": True}},
        acme.headers,
    )
    node = result["data"]["updateContact"]["contact"]
    assert node["doNotCall"] is True
    assert node["marketingOptOut"]["source"] == "api"
    listed = await graphql(
        client,
        "{ contacts(first: 5) { edges { node { id doNotCall marketingOptOut { source } } } } }",
        headers=acme.headers,
    )
    [edge] = listed["data"]["contacts"]["edges"]
    assert edge["node"]["marketingOptOut"] == {"source": "api"}
    # Another organization's id: not found, nothing changed.
    foreign = await graphql(
        client, update, {"id": created["id"], "input": {"doNotCall": False}}, globex.headers
    )
    assert foreign["data"]["updateContact"]["errors"][0]["code"] == "not_found"
    assert (await contact(client, acme, created["id"]))["do_not_call"] is True


# --- keywords ---------------------------------------------------------------------------------


async def test_stop_keyword_skips_the_next_campaign_and_refuses_calls(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ada = await create_contact(client, acme, CUSTOMER, "Ada")
    grace = await create_contact(client, acme, OTHER, "Grace")
    await text_in(client, "wamid.stop1", "  Stop ", int(time.time()))
    opted = await contact(client, acme, ada["id"])
    assert opted["marketing_opt_out"]["source"] == "keyword"
    assert opted["do_not_call"] is True
    assert (await contact(client, acme, grace["id"]))["marketing_opt_out"] is None

    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=acme.headers
    )
    assert created.status_code == 201, created.text
    launched = await client.post(f"{CAMPAIGNS}/{created.json()['id']}/launch", headers=acme.headers)
    assert launched.status_code == 200, launched.text
    assert launched.json()["total_contacts_count"] == 1
    await jobs.drain()
    async with sessionmaker() as session:
        recipients = list(await session.scalars(select(CampaignRecipient.contact_id)))
    assert recipients == [grace["id"]]

    agent = await client.post(
        "/api/v1/agents",
        json={"name": "Ava", "agent_config": {"welcome_message": "Hi"}},
        headers=acme.headers,
    )
    refused = await client.post(
        "/api/v1/calls",
        json={"agent_id": agent.json()["id"], "to_number": "+1 415 555 0100"},
        headers=acme.headers,
    )
    assert refused.status_code == 400
    assert refused.json() == {"detail": "The contact asked not to be called"}
    allowed = await client.post(
        "/api/v1/calls",
        json={"agent_id": agent.json()["id"], "to_number": OTHER},
        headers=acme.headers,
    )
    assert allowed.status_code == 201, allowed.text
    dispatch = """
    mutation($input: DispatchCallInput!) {
      dispatchCall(input: $input) { callLog { id } errors { code message field } }
    }"""
    result = await graphql(
        client,
        dispatch,
        {"input": {"agentId": agent.json()["id"], "toNumber": CUSTOMER}},
        acme.headers,
    )
    assert result["data"]["dispatchCall"] == {
        "callLog": None,
        "errors": [
            {
                "code": "do_not_call",
                "message": "The contact asked not to be called",
                "field": "toNumber",
            }
        ],
    }


async def test_start_opts_back_in_and_late_or_repeated_keywords_keep_the_latest_state(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    ada = await create_contact(client, acme, CUSTOMER, "Ada")
    now = int(time.time())
    await text_in(client, "wamid.a", "UNSUBSCRIBE", now - 30)
    await text_in(client, "wamid.b", "start", now - 10)
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"] is None
    # An opt-out older than the START arrives late, and the first one twice: still opted in.
    await text_in(client, "wamid.c", "stop", now - 20)
    await text_in(client, "wamid.a", "UNSUBSCRIBE", now - 30)
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"] is None
    # A newer one opts out; an older START that arrives after it changes nothing.
    await text_in(client, "wamid.d", "Arrêt", now)
    await text_in(client, "wamid.e", "START", now - 5)
    found = await contact(client, acme, ada["id"])
    assert found["marketing_opt_out"]["source"] == "keyword"
    assert found["marketing_opt_out"]["at"].startswith(
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    )
    # Not a keyword: nothing changes.
    await text_in(client, "wamid.f", "please stop calling at night", now + 5)
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"] is not None


async def test_settings_keywords_and_confirmation_reply(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    channel: dict[str, Any],
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    defaults = await client.get(SETTINGS, headers=acme.headers)
    assert defaults.status_code == 200
    assert {"stop", "unsubscribe", "cancel", "arret", "parar"} <= set(
        defaults.json()["opt_out_keywords"]
    )
    assert "start" in defaults.json()["opt_in_keywords"]
    assert defaults.json()["updated_at"] is None

    changed = await client.put(
        SETTINGS,
        json={
            "opt_out_keywords": [" HALT ", "halt", "Stop"],
            "opt_out_reply": "You will get no more offers. Reply START to come back.",
        },
        headers=acme.headers,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["opt_out_keywords"] == ["halt", "stop"]
    assert changed.json()["opt_in_reply"] is None
    # Globex keeps the defaults.
    assert (await client.get(SETTINGS, headers=globex.headers)).json()["updated_at"] is None

    overlapping = await client.put(
        SETTINGS, json={"opt_in_keywords": ["halt"]}, headers=acme.headers
    )
    assert overlapping.status_code == 400
    assert "halt" in overlapping.json()["detail"]
    for bad in ({"opt_out_keywords": None}, {"opt_out_keywords": ["  "]}, {"opt_in_reply": ""}):
        assert (await client.put(SETTINGS, json=bad, headers=acme.headers)).status_code == 422

    narrow = await tenants.key(acme, ["calls:read"])
    assert (await client.get(SETTINGS, headers=narrow.headers)).status_code == 403

    ada = await create_contact(client, acme, CUSTOMER, "Ada")
    await text_in(client, "wamid.halt", "halt", int(time.time()))
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"]["source"] == "keyword"
    async with sessionmaker() as session:
        [job] = await session.scalars(select(OutboxJob).where(OutboxJob.actor == CONFIRM_ACTOR))
    # The confirmation goes out through the conversation's send path, run as a worker runs it.
    await JobWorker(resources).run(job.id)
    async with sessionmaker() as session:
        outbound = list(
            await session.scalars(select(Message).where(Message.direction == "outbound"))
        )
    assert [message.text for message in outbound] == [
        "You will get no more offers. Reply START to come back."
    ]
    assert outbound[0].status == "sent"


async def test_consent_settings_over_graphql(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    mutation = """
    mutation($input: ConsentSettingsInput!) {
      updateConsentSettings(input: $input) {
        consentSettings { optInKeywords optInReply updatedAt }
        errors { code field }
      }
    }"""
    result = await graphql(
        client,
        mutation,
        {"input": {"optInKeywords": ["Resume"], "optInReply": "Welcome back"}},
        acme.headers,
    )
    payload = result["data"]["updateConsentSettings"]
    assert payload["consentSettings"]["optInKeywords"] == ["resume"]
    assert payload["consentSettings"]["updatedAt"] is not None
    bad = await graphql(client, mutation, {"input": {"optInKeywords": ["stop"]}}, acme.headers)
    assert bad["data"]["updateConsentSettings"]["errors"] == [
        {"code": "invalid_input", "field": "optInKeywords"}
    ]
    read = await graphql(client, "{ consentSettings { optInReply } }", headers=acme.headers)
    assert read["data"]["consentSettings"] == {"optInReply": "Welcome back"}
    narrow = await tenants.key(acme, ["calls:read"])
    refused = await graphql(client, "{ consentSettings { optInReply } }", headers=narrow.headers)
    assert refused["data"]["consentSettings"] is None
    assert refused["errors"][0]["extensions"]["code"] == "insufficient_scope"


# --- the platform's signals --------------------------------------------------------------------


async def test_error_131050_on_a_status_opts_the_recipient_out(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ada = await create_contact(client, acme, CUSTOMER, "Ada")
    twin = await create_contact(client, acme, CUSTOMER, "Ada (work)")
    foreign = await create_contact(client, globex, CUSTOMER, "Ada at Globex")
    other = await create_contact(client, acme, OTHER, "Grace")
    error = {"code": 131050, "title": "User has stopped marketing messages"}
    at = int(time.time())
    await post_accepted(
        client,
        payloads.message_status(
            WABA, PHONE_ID, DISPLAY, "wamid.x", CUSTOMER, "failed", timestamp=at, errors=[error]
        ),
    )
    # Another error code opts nobody out.
    await post_accepted(
        client,
        payloads.message_status(
            WABA,
            PHONE_ID,
            DISPLAY,
            "wamid.y",
            OTHER,
            "failed",
            timestamp=at,
            errors=[{"code": 131026, "title": "Message undeliverable"}],
        ),
    )
    for found in (ada, twin):
        body = await contact(client, acme, found["id"])
        assert body["marketing_opt_out"]["source"] == "platform"
        assert body["do_not_call"] is False
    assert (await contact(client, acme, other["id"]))["marketing_opt_out"] is None
    assert (await contact(client, globex, foreign["id"]))["marketing_opt_out"] is None
    assert await lead_updates(sessionmaker, ada["id"]) == 1
    # The same status again: no second change, no second event.
    await post_accepted(
        client,
        payloads.message_status(
            WABA, PHONE_ID, DISPLAY, "wamid.x", CUSTOMER, "failed", timestamp=at, errors=[error]
        ),
    )
    assert await lead_updates(sessionmaker, ada["id"]) == 1


async def test_user_preferences_stop_and_resume_in_time_order(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    ada = await create_contact(client, acme, CUSTOMER, "Ada")
    now = int(time.time())
    await post_accepted(client, user_preferences(CUSTOMER, "stop", now - 20))
    body = await contact(client, acme, ada["id"])
    assert body["marketing_opt_out"]["source"] == "platform"
    await post_accepted(client, user_preferences(CUSTOMER, "resume", now - 10))
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"] is None
    # The stop delivered again, late: the resume is newer and stands.
    await post_accepted(client, user_preferences(CUSTOMER, "stop", now - 20))
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"] is None
    # Garbage in the list is skipped with the rest applied; the answer is still 200.
    garbage = user_preferences(CUSTOMER, "stop", now)
    value = garbage["entry"][0]["changes"][0]["value"]
    value["user_preferences"] = [
        "x",
        {"wa_id": None, "value": "stop"},
        {"wa_id": "abc", "value": "stop"},
        *value["user_preferences"],
    ]
    await post_accepted(client, garbage)
    assert (await contact(client, acme, ada["id"]))["marketing_opt_out"]["source"] == "platform"
