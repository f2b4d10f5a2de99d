"""Conversation messages over GraphQL: a ticket's messages and a reply."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import StatementCounter, Tenant, graphql
from tests.conversations.test_whatsapp_webhooks import open_conversation, reply
from tests.templates.conftest import create_channel


async def test_ticket_messages_and_reply(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    await create_channel(client, acme, "106540352242922")
    ticket_id = await open_conversation(client, acme)
    sent = await graphql(
        client,
        """mutation($ticket: ID!, $input: SendMessageInput!) {
          sendTicketMessage(ticketId: $ticket, input: $input) {
            message { direction kind text status } errors { code message }
          }
        }""",
        {"ticket": ticket_id, "input": {"text": "Hello from GraphQL"}},
        acme.headers,
    )
    assert sent["data"]["sendTicketMessage"]["message"] == {
        "direction": "outbound",
        "kind": "text",
        "text": "Hello from GraphQL",
        "status": "sent",
    }
    listed = await graphql(
        client,
        """query($ticket: ID!) {
          ticketMessages(ticketId: $ticket, first: 10) { totalCount nodes { direction text } }
        }""",
        {"ticket": ticket_id},
        acme.headers,
    )
    messages = listed["data"]["ticketMessages"]
    assert messages["totalCount"] == 2
    assert [m["direction"] for m in messages["nodes"]] == ["outbound", "inbound"]
    foreign = await graphql(
        client,
        """mutation($ticket: ID!) {
          sendTicketMessage(ticketId: $ticket, input: {text: "x"}) { errors { code } }
        }""",
        {"ticket": ticket_id},
        globex.headers,
    )
    assert foreign["data"]["sendTicketMessage"]["errors"] == [{"code": "not_found"}]


async def test_ticket_messages_field_is_one_query_for_every_ticket(
    client: httpx.AsyncClient, acme: Tenant, sql_counter: StatementCounter
) -> None:
    await create_channel(client, acme, "106540352242922")
    query = """{ tickets(first: 10) { nodes { contact { phoneNumber }
                 messages(limit: 2) { direction text } } } }"""

    async def statements_for_tickets() -> tuple[int, list[Any]]:
        sql_counter.count = 0
        result = await graphql(client, query, headers=acme.headers)
        return sql_counter.count, result["data"]["tickets"]["nodes"]

    ticket_id = await open_conversation(client, acme)
    await reply(client, acme, ticket_id, text="First reply")
    await reply(client, acme, ticket_id, text="Second reply")
    one, nodes = await statements_for_tickets()
    assert [m["text"] for m in nodes[0]["messages"]] == ["Second reply", "First reply"]
    for sender in ("+14155550111", "+14155550122"):
        await open_conversation(client, acme, sender=sender)
    three, nodes = await statements_for_tickets()
    assert len(nodes) == 3
    assert three == one  # no statement per ticket
    limited = await graphql(
        client, "{ tickets { nodes { messages(limit: 0) { text } } } }", headers=acme.headers
    )
    assert limited["errors"][0]["extensions"]["code"] == "invalid_input"
