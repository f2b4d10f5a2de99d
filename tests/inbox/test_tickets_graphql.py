"""Inbox tickets over GraphQL: the same service operations as REST, typed errors, paging,
scopes, isolation, and contacts/tickets resolved without a query per item."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import StatementCounter, Tenant, TenantFactory, graphql
from tests.inbox.conftest import Inbox

FIELDS = """id organizationId contactId chatPhoneNumberId status assignedUserId createdAt updatedAt
contact { id name phoneNumber tags notes customFields }"""
CREATE = f"""
mutation($input: TicketCreateInput!) {{
  createTicket(input: $input) {{ created ticket {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
CLOSE = f"""
mutation($id: ID!) {{
  closeTicket(id: $id) {{ ticket {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
ASSIGN = f"""
mutation($id: ID!, $userId: ID!) {{
  assignTicket(id: $id, userId: $userId) {{
    ticket {{ {FIELDS} assignedUser {{ id email }} }}
    errors {{ code message field }}
  }}
}}"""
GET = f"query($id: ID!) {{ ticket(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String, $status: TicketStatus) {
  tickets(first: $first, after: $after, last: $last, before: $before, status: $status) {
    totalCount
    nodes { id status contact { id name } assignedUser { id email } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""
CONTACTS_WITH_TICKETS = """
query($first: Int) {
  contacts(first: $first) {
    nodes { id name openTicket { id status contact { id name } } }
  }
}"""
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def create(
    client: httpx.AsyncClient, tenant: Tenant, contact_id: str
) -> tuple[dict[str, Any], bool]:
    body = await graphql(client, CREATE, {"input": {"contactId": contact_id}}, tenant.headers)
    payload = body["data"]["createTicket"]
    assert payload["errors"] == [], payload
    return payload["ticket"], payload["created"]


async def test_create_get_close_and_assign(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant
) -> None:
    contact = await inbox.contact(acme, "Grace", tags=["vip"], custom_fields={"n": 1})
    ticket, created = await create(client, acme, contact["id"])
    assert created is True
    assert ticket["status"] == "OPEN"
    assert ticket["organizationId"] == acme.organization_id
    assert ticket["contactId"] == contact["id"]
    assert ticket["chatPhoneNumberId"] is None
    assert ticket["assignedUserId"] is None
    assert ticket["createdAt"].endswith("Z")
    assert ticket["contact"] == {
        "id": contact["id"],
        "name": "Grace",
        "phoneNumber": contact["phone_number"],
        "tags": ["vip"],
        "notes": None,
        "customFields": {"n": 1},
    }
    again, created_again = await create(client, acme, contact["id"])
    assert (again, created_again) == (ticket, False)

    fetched = await graphql(client, GET, {"id": ticket["id"]}, acme.headers)
    assert fetched["data"]["ticket"] == ticket
    rest = await inbox.client.get(f"/api/v1/inbox/tickets/{ticket['id']}", headers=acme.headers)
    assert rest.json()["id"] == ticket["id"]

    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    assigned = await graphql(client, ASSIGN, {"id": ticket["id"], "userId": agent}, acme.headers)
    payload = assigned["data"]["assignTicket"]
    assert payload["errors"] == []
    assert payload["ticket"]["assignedUserId"] == agent
    assert payload["ticket"]["assignedUser"] == {"id": agent, "email": "agent@acme.test"}

    closed = await graphql(client, CLOSE, {"id": ticket["id"]}, acme.headers)
    assert closed["data"]["closeTicket"]["errors"] == []
    assert closed["data"]["closeTicket"]["ticket"]["status"] == "CLOSED"
    events = [kind for kind, _ in await inbox.events(acme)]
    assert sorted(events) == sorted(
        [
            "ticket.created",
            "conversation.started",
            "ticket.assigned",
            "ticket.resolved",
            "conversation.closed",
        ]
    )


async def test_typed_errors(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant, globex: Tenant
) -> None:
    bad_id = await graphql(client, CREATE, {"input": {"contactId": "nope"}}, acme.headers)
    [error] = bad_id["data"]["createTicket"]["errors"]
    assert (error["code"], error["field"]) == ("uuid_parsing", "contactId")
    unknown = await graphql(client, CREATE, {"input": {"contactId": UNKNOWN_ID}}, acme.headers)
    assert unknown["data"]["createTicket"] == {
        "created": None,
        "ticket": None,
        "errors": [{"code": "not_found", "message": "Contact not found", "field": None}],
    }

    ticket = await inbox.ticket(acme)
    outsider = await tenants.user(globex, "agent@globex.test", "correct horse battery")
    foreign_user = await graphql(
        client, ASSIGN, {"id": ticket["id"], "userId": outsider}, acme.headers
    )
    assert foreign_user["data"]["assignTicket"]["errors"] == [
        {"code": "not_found", "message": "User not found", "field": None}
    ]
    bad_user = await graphql(client, ASSIGN, {"id": ticket["id"], "userId": "x"}, acme.headers)
    assert bad_user["data"]["assignTicket"]["errors"][0]["field"] == "userId"

    await graphql(client, CLOSE, {"id": ticket["id"]}, acme.headers)
    twice = await graphql(client, CLOSE, {"id": ticket["id"]}, acme.headers)
    assert twice["data"]["closeTicket"] == {
        "ticket": None,
        "errors": [
            {
                "code": "invalid_state",
                "message": "cannot close ticket in closed state",
                "field": None,
            }
        ],
    }


async def test_isolation(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant, globex: Tenant
) -> None:
    theirs = await inbox.ticket(globex, "Secret")
    their_contact = theirs["contact_id"]
    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "ticket": None
    }
    close = await graphql(client, CLOSE, {"id": theirs["id"]}, acme.headers)
    assert close["data"]["closeTicket"]["errors"][0]["message"] == "Ticket not found"
    assign = await graphql(client, ASSIGN, {"id": theirs["id"], "userId": agent}, acme.headers)
    assert assign["data"]["assignTicket"]["errors"][0]["message"] == "Ticket not found"
    create_theirs = await graphql(
        client, CREATE, {"input": {"contactId": their_contact}}, acme.headers
    )
    assert create_theirs["data"]["createTicket"]["errors"][0]["message"] == "Contact not found"
    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["tickets"]["totalCount"] == 0
    still = await graphql(client, GET, {"id": theirs["id"]}, globex.headers)
    assert still["data"]["ticket"]["status"] == "OPEN"


async def test_status_filter_and_paging(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    ids = [(await inbox.ticket(acme, f"P{index}"))["id"] for index in range(5)]
    await graphql(client, CLOSE, {"id": ids[0]}, acme.headers)
    closed = (await graphql(client, LIST, {"status": "CLOSED"}, acme.headers))["data"]["tickets"]
    assert [node["id"] for node in closed["nodes"]] == [ids[0]]
    assert closed["totalCount"] == 1
    open_ = (await graphql(client, LIST, {"status": "OPEN"}, acme.headers))["data"]["tickets"]
    assert [node["id"] for node in open_["nodes"]] == list(reversed(ids[1:]))

    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 2, "after": after}, acme.headers))["data"][
            "tickets"
        ]
        assert page["totalCount"] == 5
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 2, "before": seen[2]}, acme.headers))["data"][
        "tickets"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:2]
    assert back["pageInfo"]["hasPreviousPage"] is False

    for variables in ({"first": 0}, {"first": 101}, {"after": "not-an-id"}):
        body = await graphql(client, LIST, variables, acme.headers)
        assert body["data"] == {"tickets": None}
        assert body["errors"][0]["extensions"]["code"] == "invalid_input", variables
    bad_status = await graphql(client, LIST, {"status": "PENDING"}, acme.headers)
    assert bad_status.get("data") is None
    assert "PENDING" in bad_status["errors"][0]["message"]


async def test_contact_open_ticket(inbox: Inbox, client: httpx.AsyncClient, acme: Tenant) -> None:
    with_ticket = await inbox.contact(acme, "Has one")
    ticket = await inbox.open(acme, with_ticket["id"])
    closed_only = await inbox.contact(acme, "Had one")
    old = await inbox.open(acme, closed_only["id"])
    await graphql(client, CLOSE, {"id": old["id"]}, acme.headers)
    await inbox.contact(acme, "Never")
    nodes = (await graphql(client, CONTACTS_WITH_TICKETS, {}, acme.headers))["data"]["contacts"][
        "nodes"
    ]
    by_name = {node["name"]: node["openTicket"] for node in nodes}
    assert by_name == {
        "Has one": {
            "id": ticket["id"],
            "status": "OPEN",
            "contact": {"id": with_ticket["id"], "name": "Has one"},
        },
        "Had one": None,
        "Never": None,
    }


async def test_scopes(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant
) -> None:
    contact = await inbox.contact(acme)
    ticket = await inbox.open(acme, contact["id"])
    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    operations: list[tuple[str, dict[str, Any]]] = [
        (LIST, {}),
        (GET, {"id": ticket["id"]}),
        (CREATE, {"input": {"contactId": contact["id"]}}),
        (CLOSE, {"id": ticket["id"]}),
        (ASSIGN, {"id": ticket["id"], "userId": agent}),
    ]
    for scopes in (["agents:read"], ["webhooks:admin"]):
        key = await tenants.key(acme, scopes)
        for query, variables in operations:
            body = await graphql(client, query, variables, key.headers)
            # Every root field that can be refused is nullable: it alone is nulled.
            assert list(body["data"].values()) == [None], (scopes, query)
            assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    assert (await graphql(client, GET, {"id": ticket["id"]}, acme.headers))["data"]["ticket"][
        "status"
    ] == "OPEN"  # nothing above changed it
    for query, variables in operations:
        body = await graphql(client, query, variables, acme.headers)
        assert "errors" not in body, (query, body)


async def _statements(
    client: httpx.AsyncClient, tenant: Tenant, counter: StatementCounter, query: str
) -> tuple[int, dict[str, Any]]:
    counter.count = 0
    body = await graphql(client, query, {"first": 100}, tenant.headers)
    assert "errors" not in body, body
    return counter.count, body["data"]


async def test_a_page_of_tickets_costs_the_same_statements_whatever_its_size(
    inbox: Inbox,
    client: httpx.AsyncClient,
    tenants: TenantFactory,
    acme: Tenant,
    sql_counter: StatementCounter,
) -> None:
    agents = [
        await tenants.user(acme, f"agent{index}@acme.test", "correct horse battery")
        for index in range(3)
    ]

    async def add_tickets(count: int) -> None:
        for index in range(count):
            ticket = await inbox.ticket(acme, f"P{index}")
            await inbox.client.post(
                f"/api/v1/inbox/tickets/{ticket['id']}/assign",
                json={"user_id": agents[index % len(agents)]},
                headers=acme.headers,
            )

    await add_tickets(2)
    small, small_data = await _statements(client, acme, sql_counter, LIST)
    assert len(small_data["tickets"]["nodes"]) == 2
    await add_tickets(8)
    large, large_data = await _statements(client, acme, sql_counter, LIST)
    nodes = large_data["tickets"]["nodes"]
    assert len(nodes) == 10
    assert all(node["contact"]["name"].startswith("P") for node in nodes)
    assert {node["assignedUser"]["email"] for node in nodes} == {
        f"agent{index}@acme.test" for index in range(3)
    }
    assert small == large


async def test_a_page_of_contacts_with_open_tickets_costs_the_same_statements(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant, sql_counter: StatementCounter
) -> None:
    async def add_contacts(count: int) -> None:
        for index in range(count):
            contact = await inbox.contact(acme, f"C{index}")
            if index % 2 == 0:
                await inbox.open(acme, contact["id"])

    await add_contacts(2)
    small, small_data = await _statements(client, acme, sql_counter, CONTACTS_WITH_TICKETS)
    assert len(small_data["contacts"]["nodes"]) == 2
    await add_contacts(8)
    large, large_data = await _statements(client, acme, sql_counter, CONTACTS_WITH_TICKETS)
    nodes = large_data["contacts"]["nodes"]
    assert len(nodes) == 10
    assert sum(node["openTicket"] is not None for node in nodes) == 5
    assert all(
        node["openTicket"] is None or node["openTicket"]["contact"]["id"] == node["id"]
        for node in nodes
    )
    assert small == large
