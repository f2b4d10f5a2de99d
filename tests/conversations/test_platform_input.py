"""Platform input that used to lose data: each message and status of a WhatsApp batch is
taken or skipped on its own, stored as far as it can be, and the platform gets its 200."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.contacts.models import Contact
from app.conversations.models import Message
from app.integrations.whatsapp import payloads
from tests.conftest import Tenant
from tests.conversations.test_whatsapp_webhooks import (
    PHONE_ID,
    open_conversation,
    post_signed,
    reply,
)
from tests.templates.conftest import WABA

INNOCENT = "+14155550101"
OTHER = "+14155550102"


def message(message_id: str, sender: str, text: str = "hello", **fields: Any) -> dict[str, Any]:
    return {
        "from": sender.lstrip("+"),
        "id": message_id,
        "timestamp": str(int(time.time())),
        "type": "text",
        "text": {"body": text},
        **fields,
    }


def batch(messages: list[dict[str, Any]], names: dict[str, Any]) -> dict[str, Any]:
    """One `messages` change carrying several messages, as the platform batches them."""
    contacts = [
        {"profile": {"name": name}, "wa_id": wa_id.lstrip("+")} for wa_id, name in names.items()
    ]
    return payloads.messages_change(
        WABA, PHONE_ID, "+14155550142", contacts=contacts, messages=messages
    )


async def stored(sessionmaker: async_sessionmaker[AsyncSession]) -> dict[str, tuple[str, Any]]:
    async with sessionmaker() as session:
        rows = await session.execute(
            select(Message.platform_message_id, Message.kind, Message.text)
        )
        return {row[0]: (row[1], row[2]) for row in rows}


async def contact_names(sessionmaker: async_sessionmaker[AsyncSession]) -> dict[str, str]:
    async with sessionmaker() as session:
        rows = await session.execute(select(Contact.phone_number, Contact.name))
        return dict(rows.all())  # type: ignore[arg-type]


# Each fault the issue reproduced, beside an innocent message of the same batch.
FAULTS = {
    "text with U+0000": (
        message("wamid.nul", OTHER, "card\x00number"),
        "Bob",
        {"wamid.nul": ("text", "cardnumber")},
        "Bob",
    ),
    "blank profile name": (
        message("wamid.blank", OTHER),
        "   ",
        {"wamid.blank": ("text", "hello")},
        OTHER,
    ),
    "300-character profile name": (
        message("wamid.long-name", OTHER),
        "N" * 300,
        {"wamid.long-name": ("text", "hello")},
        "N" * 255,
    ),
    "type over 16 characters": (
        message("wamid.type", OTHER, type="x" * 40, **{"x" * 40: {"body": "odd"}}),
        "Bob",
        {"wamid.type": ("unsupported", "odd")},
        "Bob",
    ),
    "message id over 128 characters": (message("w" * 129, OTHER), "Bob", {}, None),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_bad_message_never_costs_the_batch(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    fault: str,
) -> None:
    bad, name, kept, contact_name = FAULTS[fault]
    innocent = message("wamid.innocent", INNOCENT, "Where is my order?")
    body = batch([bad, innocent], {INNOCENT: "Ada", OTHER: name})
    response = await post_signed(client, body)
    assert response.status_code == 200, response.text
    assert await stored(sessionmaker) == {
        "wamid.innocent": ("text", "Where is my order?"),
        **kept,
    }
    names = await contact_names(sessionmaker)
    assert names[INNOCENT] == "Ada"
    assert names.get(OTHER) == contact_name


async def test_every_fault_in_one_batch(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    messages = [message("wamid.first", INNOCENT, "first")]
    expected = {"wamid.first": ("text", "first")}
    for n, (bad, _name, kept, _contact) in enumerate(FAULTS.values()):
        messages.append({**bad, "from": f"1415555020{n}"})
        expected.update(kept)
    messages.append(message("wamid.last", INNOCENT, "last"))
    expected["wamid.last"] = ("text", "last")
    assert (await post_signed(client, batch(messages, {INNOCENT: "Ada"}))).status_code == 200
    assert await stored(sessionmaker) == expected


async def test_a_status_that_cannot_be_stored_as_sent_is_stored_as_it_can(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ticket_id = await open_conversation(client, acme)
    first = (await reply(client, acme, ticket_id, text="one")).json()["platform_message_id"]
    second = (await reply(client, acme, ticket_id, text="two")).json()["platform_message_id"]
    entries = [
        {
            "id": first,
            "status": "failed",
            "timestamp": "1700000000",
            "errors": [{"code": 131026, "error_data": {"details": "not\x00 a user"}}],
        },
        {"id": "w" * 300, "status": "read", "timestamp": "1700000000"},
        {"id": second, "status": "read", "timestamp": "1700000000"},
    ]
    body = payloads.messages_change(WABA, PHONE_ID, "+14155550142", statuses=entries)
    assert (await post_signed(client, body)).status_code == 200
    async with sessionmaker() as session:
        rows = await session.execute(
            select(Message.platform_message_id, Message.status, Message.error).where(
                Message.direction == "outbound"
            )
        )
        found = {row[0]: (row[1], row[2]) for row in rows}
    assert found == {first: ("failed", "not a user (code 131026)"), second: ("read", None)}


@pytest.mark.parametrize("number", ["1065\x00", "1" * 300, "", "../1065"])
async def test_a_phone_number_id_no_channel_can_have_is_acknowledged(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    number: str,
) -> None:
    body = payloads.messages_change(
        WABA, number, "+1", messages=[message("wamid.nowhere", INNOCENT)]
    )
    assert (await post_signed(client, body)).status_code == 200
    assert await stored(sessionmaker) == {}
