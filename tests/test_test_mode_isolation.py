"""A test-mode credential never sees or changes live-mode data, over REST and GraphQL.

One organization holds a live and a test-mode item of every moded kind (channel, call log,
phone number, template, campaign, conversation with its messages, webhook delivery attempt).
Per kind and surface: a test key's lists show the test item and leave the live one out; reading,
changing or deleting the live one is refused with 403 `livemode_mismatch` and changes nothing
(a live key then finds it as it was). The rule lives in the organization-scoped repository
(app/kit/repository.py); `test_every_moded_table_is_declared` keeps new tables honest.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.calls.models import AgentPhoneNumber
from app.calls.schemas import CallLogRecord
from app.calls.service import record_call_log
from app.campaigns.models import Campaign
from app.channels import service as channels
from app.channels.schemas import ChannelCreate
from app.config import Settings
from app.conversations.service import receive_message
from app.core.clock import utcnow
from app.events.models import Event
from app.inbox.models import Ticket
from app.kit.domains import collect
from app.kit.repository import OrgScopedRepository
from app.tables import Base
from app.templates.models import MessageTemplate
from app.webhooks.delivery import new_delivery_id
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription
from tests.conftest import TEST_SECRET, Tenant, TenantFactory, graphql

API = "/api/v1"
REFUSED_CODE = "livemode_mismatch"


def subject_of(tenant: Tenant, livemode: bool) -> Subject:
    return Subject(
        organization_id=tenant.organization_id,
        principal_id=tenant.key_id,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=livemode,
    )


@dataclass
class Mode:
    """The items of one mode."""

    channel: str
    call_log: str
    phone_number: str
    template: str
    campaign: str
    ticket: str
    message: str
    attempt: str


@dataclass
class World:
    test_key: Tenant
    live_key: Tenant
    test: Mode
    live: Mode
    agent_id: str
    contact_id: str
    webhook_id: str
    user_id: str


async def _items(
    session: AsyncSession,
    settings: Settings,
    owner: Tenant,
    livemode: bool,
    seq: int,
    agent_id: str,
    webhook: str,
) -> Mode:
    """One item of every moded kind in `livemode`, made as the service's own paths make them
    (no upstream platform: the channel is stored, the message arrives as a platform callback
    would bring it)."""
    subject = subject_of(owner, livemode)
    box = channels.access_token_box(TEST_SECRET)
    phone_number_id = f"10654035224{seq}"
    channel = await channels.create_channel(
        session,
        subject,
        ChannelCreate(
            display_phone_number=f"+1415555014{seq}",
            phone_number_id=phone_number_id,
            business_account_id=f"WABA{seq}",
            access_token="token-" + secrets.token_hex(8),
        ),
        box,
        settings,
    )
    number = AgentPhoneNumber(
        organization_id=owner.organization_id,
        agent_id=agent_id,
        phone_number=f"+1415555030{seq}",
        livemode=livemode,
    )
    template = MessageTemplate(
        organization_id=owner.organization_id,
        channel_id=channel.id,
        business_account_id=channel.business_account_id,
        name=f"welcome_{seq}",
        language="en_US",
        category="UTILITY",
        status="APPROVED",
        components=[{"type": "BODY", "text": "Hello"}],
        livemode=livemode,
    )
    session.add_all([number, template])
    await session.flush()
    campaign = Campaign(
        organization_id=owner.organization_id,
        name=f"Campaign {seq}",
        chat_phone_number_id=channel.id,
        message_template_id=template.id,
        audience_type="all",
        livemode=livemode,
    )
    session.add(campaign)
    await session.flush()
    message = await receive_message(
        session,
        channel,
        {
            "id": f"wamid.{seq}{secrets.token_hex(6)}",
            "from": "14155550199",
            "timestamp": str(int(utcnow().timestamp())),
            "type": "text",
            "text": {"body": "hello"},
        },
        "Ada",
    )
    assert message is not None
    ticket = await session.get(Ticket, message.ticket_id)
    assert ticket is not None
    call_log = await record_call_log(
        session,
        subject,
        CallLogRecord(
            call_id=f"CA{seq}{secrets.token_hex(8)}",
            from_number="+14155550100",
            to_number="+14155550199",
            contact_id=ticket.contact_id,
            direction="outbound",
            status="completed",
            recording_url="https://recordings.example/live.mp3" if livemode else None,
            cost=0.42 if livemode else 0.0,
        ),
    )
    event = Event(
        id="evt_" + secrets.token_hex(16),
        organization_id=owner.organization_id,
        type="ticket.created",
        livemode=livemode,
        data={},
    )
    session.add(event)
    await session.flush()
    delivery = WebhookDelivery(
        id=new_delivery_id(),
        organization_id=owner.organization_id,
        subscription_id=webhook,
        event_id=event.id,
        event_type=event.type,
    )
    session.add(delivery)
    await session.flush()
    attempt = WebhookDeliveryAttempt(
        organization_id=owner.organization_id,
        subscription_id=webhook,
        delivery_id=delivery.id,
        event_id=event.id,
        event_type=event.type,
        attempt=1,
        status_code=200,
        success=True,
        duration_ms=5,
    )
    session.add(attempt)
    await session.flush()
    return Mode(
        channel=channel.id,
        call_log=call_log.id,
        phone_number=number.id,
        template=template.id,
        campaign=campaign.id,
        ticket=message.ticket_id,
        message=message.id,
        attempt=attempt.id,
    )


async def _verified(settings: Settings, phone_number_id: str, access_token: str) -> None:
    return None


@pytest.fixture
async def world(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> World:
    # No platform here: the live channel's number is taken as verified.
    monkeypatch.setattr(channels, "verify_phone_number", _verified)
    live_key = await tenants.key(acme, ["full_access"], livemode=True)
    user_id = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    agent = await client.post(f"{API}/agents", json={"name": "Ava"}, headers=acme.headers)
    assert agent.status_code == 201, agent.text
    async with sessionmaker() as session:
        webhook = WebhookSubscription(
            organization_id=acme.organization_id,
            url="https://hooks.example/in",
            secret="whsec_" + secrets.token_hex(16),
            events=["ticket.created"],
        )
        session.add(webhook)
        await session.flush()
        agent_id = agent.json()["id"]
        live = await _items(session, settings, acme, True, 1, agent_id, webhook.id)
        test = await _items(session, settings, acme, False, 2, agent_id, webhook.id)
        await session.commit()
    contacts = (await client.get(f"{API}/contacts", headers=acme.headers)).json()["data"]
    return World(acme, live_key, test, live, agent_id, contacts[0]["id"], webhook.id, user_id)


def _ids(body: Any) -> set[str]:
    items = body.get("data", body.get("items")) if isinstance(body, dict) else body
    return {item.get("id") or item.get("call_log_id") for item in items}


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == REFUSED_CODE


# (list path, path of one item, kind); the list must hold the test item, not the live one.
REST_READS = {
    "channels": ("/channels", "/channels/{id}", "channel"),
    "call_logs": ("/call-logs", "/call-logs/{id}", "call_log"),
    "phone_numbers": ("/phone-numbers", None, "phone_number"),
    "templates": ("/templates", "/templates/{id}", "template"),
    "campaigns": ("/campaigns", "/campaigns/{id}", "campaign"),
    "tickets": ("/inbox/tickets", "/inbox/tickets/{id}", "ticket"),
    "messages": ("/inbox/tickets/{ticket}/messages", None, "message"),
    "deliveries": ("/webhooks/{webhook}/deliveries", None, "attempt"),
}


@pytest.mark.parametrize("kind", list(REST_READS))
async def test_rest_lists_and_reads_leave_live_data_out(
    client: httpx.AsyncClient, world: World, kind: str
) -> None:
    list_path, item_path, attribute = REST_READS[kind]
    for key, mine, other in (
        (world.test_key, world.test, world.live),
        (world.live_key, world.live, None),
    ):
        path = list_path.format(ticket=mine.ticket, webhook=world.webhook_id)
        listed = await client.get(API + path, headers=key.headers)
        assert listed.status_code == 200, listed.text
        ids = _ids(listed.json())
        assert getattr(mine, attribute) in ids, kind
        if other is not None:
            assert getattr(other, attribute) not in ids, kind
    if item_path is not None:
        live_id = getattr(world.live, attribute)
        _refused(
            await client.get(API + item_path.format(id=live_id), headers=world.test_key.headers)
        )
        found = await client.get(API + item_path.format(id=live_id), headers=world.live_key.headers)
        assert found.status_code == 200
    if kind == "messages":
        refused = await client.get(
            f"{API}/inbox/tickets/{world.live.ticket}/messages", headers=world.test_key.headers
        )
        _refused(refused)


def _rest_changes(world: World) -> dict[str, list[tuple[str, str, dict[str, Any] | None]]]:
    live = world.live
    return {
        "channels": [
            ("PUT", f"/channels/{live.channel}", {"name": "renamed"}),
            ("DELETE", f"/channels/{live.channel}", None),
        ],
        # Assigning the live number with a test key makes a test-mode assignment of its
        # own (numbers are held per mode), so only the live assignment's removal is a change.
        "phone_numbers": [("DELETE", f"/phone-numbers/{live.phone_number}", None)],
        "templates": [("DELETE", f"/templates/{live.template}", None)],
        "campaigns": [
            ("PUT", f"/campaigns/{live.campaign}", {"name": "renamed"}),
            ("POST", f"/campaigns/{live.campaign}/launch", None),
            ("DELETE", f"/campaigns/{live.campaign}", None),
            (
                "POST",
                "/campaigns",
                {
                    "name": "On a live channel",
                    "chat_phone_number_id": live.channel,
                    "message_template_id": world.test.template,
                    "audience_type": "all",
                },
            ),
        ],
        "tickets": [
            ("POST", f"/inbox/tickets/{live.ticket}/close", None),
            ("POST", f"/inbox/tickets/{live.ticket}/assign", {"user_id": world.user_id}),
            (
                "POST",
                "/inbox/tickets",
                {"contact_id": world.contact_id, "chat_phone_number_id": live.channel},
            ),
        ],
        "messages": [("POST", f"/inbox/tickets/{live.ticket}/messages", {"text": "hi"})],
        "templates_on_live_channel": [
            ("POST", "/templates/sync", {"channel_id": live.channel}),
        ],
    }


REST_CHANGE_KINDS = [
    "channels",
    "phone_numbers",
    "templates",
    "campaigns",
    "tickets",
    "messages",
    "templates_on_live_channel",
]


async def _live_state(client: httpx.AsyncClient, world: World) -> dict[str, Any]:
    """Everything a refused change could have touched, as the live key reads it."""
    live, headers = world.live, world.live_key.headers
    reads = {
        "channel": f"/channels/{live.channel}",
        "template": f"/templates/{live.template}",
        "campaign": f"/campaigns/{live.campaign}",
        "ticket": f"/inbox/tickets/{live.ticket}",
        "messages": f"/inbox/tickets/{live.ticket}/messages",
        "numbers": "/phone-numbers",
    }
    state = {}
    for name, path in reads.items():
        response = await client.get(API + path, headers=headers)
        assert response.status_code == 200, (name, response.text)
        state[name] = response.json()
    return state


@pytest.mark.parametrize("kind", REST_CHANGE_KINDS)
async def test_rest_changes_to_live_data_are_refused(
    client: httpx.AsyncClient, world: World, kind: str
) -> None:
    before = await _live_state(client, world)
    # organization_id: ticket creation requires it, and elsewhere it is optional.
    headers = {**world.test_key.headers, "organization_id": world.test_key.organization_id}
    for method, path, body in _rest_changes(world)[kind]:
        _refused(await client.request(method, API + path, json=body, headers=headers))
    assert await _live_state(client, world) == before


GRAPHQL_LISTS = {
    "channels": ("{ channels { nodes { id } } }", lambda d: d["channels"]["nodes"], "channel"),
    "call_logs": ("{ callLogs { items { id } } }", lambda d: d["callLogs"]["items"], "call_log"),
    "phone_numbers": (
        "{ phoneNumbers { nodes { id } } }",
        lambda d: d["phoneNumbers"]["nodes"],
        "phone_number",
    ),
    "templates": (
        "{ messageTemplates { items { id } } }",
        lambda d: d["messageTemplates"]["items"],
        "template",
    ),
    "campaigns": ("{ campaigns { items { id } } }", lambda d: d["campaigns"]["items"], "campaign"),
    "tickets": ("{ tickets { nodes { id } } }", lambda d: d["tickets"]["nodes"], "ticket"),
    "recent_calls": (
        "{ contacts { nodes { recentCalls { id } } } }",
        lambda d: [c for n in d["contacts"]["nodes"] for c in n["recentCalls"]],
        "call_log",
    ),
    "open_tickets": (
        "{ contacts { nodes { openTicket { id messages { id } } } } }",
        lambda d: [n["openTicket"] for n in d["contacts"]["nodes"] if n["openTicket"]],
        "ticket",
    ),
    "deliveries": (
        "query($id: ID!) { webhookDeliveries(webhookId: $id) { nodes { id } } }",
        lambda d: d["webhookDeliveries"]["nodes"],
        "attempt",
    ),
}


@pytest.mark.parametrize("kind", list(GRAPHQL_LISTS))
async def test_graphql_lists_leave_live_data_out(
    client: httpx.AsyncClient, world: World, kind: str
) -> None:
    query, items, attribute = GRAPHQL_LISTS[kind]
    for key, mine, other in (
        (world.test_key, world.test, world.live),
        (world.live_key, world.live, None),
    ):
        body = await graphql(client, query, {"id": world.webhook_id}, key.headers)
        assert "errors" not in body, body
        ids = {item["id"] for item in items(body["data"])}
        assert getattr(mine, attribute) in ids, kind
        if other is not None:
            assert getattr(other, attribute) not in ids, kind


GRAPHQL_READS = {
    "channel": ("channel", "channel"),
    "call_log": ("callLog", "call_log"),
    "template": ("messageTemplate", "template"),
    "campaign": ("campaign", "campaign"),
    "ticket": ("ticket", "ticket"),
}


@pytest.mark.parametrize("kind", list(GRAPHQL_READS))
async def test_graphql_reads_of_live_data_are_refused(
    client: httpx.AsyncClient, world: World, kind: str
) -> None:
    field, attribute = GRAPHQL_READS[kind]
    query = f"query($id: ID!) {{ {field}(id: $id) {{ id }} }}"
    live_id = getattr(world.live, attribute)
    body = await graphql(client, query, {"id": live_id}, world.test_key.headers)
    assert body["data"] == {field: None}
    assert body["errors"][0]["extensions"]["code"] == REFUSED_CODE
    allowed = await graphql(client, query, {"id": live_id}, world.live_key.headers)
    assert allowed["data"] == {field: {"id": live_id}}
    if kind == "ticket":
        messages = await graphql(
            client,
            "query($id: ID!) { ticketMessages(ticketId: $id) { nodes { id } } }",
            {"id": live_id},
            world.test_key.headers,
        )
        assert messages["errors"][0]["extensions"]["code"] == REFUSED_CODE


def _on(
    field: str, object_id: str, arguments: str = "", *, by: str = "id"
) -> tuple[str, str, dict[str, Any]]:
    """A mutation of one object by id that asks for its errors only."""
    mutation = f"mutation($id: ID!) {{ {field}({by}: $id{arguments}) {{ errors {{ code }} }} }}"
    return field, mutation, {"id": object_id}


def _graphql_changes(world: World) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    live = world.live
    return {
        "channels": [
            _on("updateChannel", live.channel, ', input: {name: "x"}'),
            _on("deleteChannel", live.channel),
        ],
        "phone_numbers": [_on("unassignPhoneNumber", live.phone_number)],
        "templates": [_on("deleteTemplate", live.template)],
        "campaigns": [
            _on("updateCampaign", live.campaign, ', input: {name: "x"}'),
            _on("launchCampaign", live.campaign),
            _on("deleteCampaign", live.campaign),
        ],
        "tickets": [
            _on("closeTicket", live.ticket),
            (
                "createTicket",
                "mutation($contact: ID!, $channel: ID!) { createTicket(input: "
                "{contactId: $contact, chatPhoneNumberId: $channel}) { errors { code } } }",
                {"contact": world.contact_id, "channel": live.channel},
            ),
        ],
        "messages": [_on("sendTicketMessage", live.ticket, ', input: {text: "hi"}', by="ticketId")],
    }


@pytest.mark.parametrize(
    "kind", ["channels", "phone_numbers", "templates", "campaigns", "tickets", "messages"]
)
async def test_graphql_changes_to_live_data_are_refused(
    client: httpx.AsyncClient, world: World, kind: str
) -> None:
    before = await _live_state(client, world)
    for field, mutation, variables in _graphql_changes(world)[kind]:
        body = await graphql(client, mutation, variables, world.test_key.headers)
        payload = (body.get("data") or {}).get(field)
        codes = [error["code"] for error in payload["errors"]] if payload else []
        codes += [error["extensions"]["code"] for error in body.get("errors", [])]
        assert codes == [REFUSED_CODE], (field, body)
    assert await _live_state(client, world) == before


def test_every_moded_table_is_declared() -> None:
    """A table with a `livemode` column is live/test data unless listed here as shared by
    both modes; its repository must then be `moded`, so the base enforces the rule."""
    shared = {"api_keys", "events", "knowledge_documents"}
    collect("repository", "__name__")  # every domain's repository module, imported
    repositories: dict[str, type[OrgScopedRepository[Any]]] = {}
    pending: list[type[Any]] = [OrgScopedRepository]
    while pending:
        for subclass in pending.pop().__subclasses__():
            pending.append(subclass)
            if getattr(subclass, "model", None) is not None:
                repositories[subclass.model.__tablename__] = subclass
    moded_tables = {table for table, repository in repositories.items() if repository.moded}
    with_mode = {
        table.name
        for table in Base.metadata.sorted_tables
        if "livemode" in table.columns and table.name not in shared
    }
    assert with_mode <= moded_tables
    # Delivery attempts take the mode of their event (no column of their own).
    assert "webhook_delivery_attempts" in moded_tables
