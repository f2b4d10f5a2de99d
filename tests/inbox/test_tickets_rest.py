"""Inbox tickets over REST: the documented shapes and error bodies, the one-open-ticket rule,
the organization_id header rule, events, isolation, paging and scopes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.inbox.models import Ticket
from tests.conftest import Tenant, TenantFactory
from tests.inbox.conftest import TICKETS, Inbox, org_headers

ORG_REQUIRED = {"detail": "A valid organization_id header is required"}
TICKET_NOT_FOUND = {"detail": "Ticket not found"}
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def test_create_returns_the_ticket_with_its_contact(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    contact = await inbox.contact(
        acme, "Grace", tags=["vip"], notes="called twice", custom_fields={"plan": "pro"}
    )
    ticket = await inbox.open(acme, contact["id"])
    assert set(ticket) == {
        "id",
        "organization_id",
        "contact_id",
        "chat_phone_number_id",
        "status",
        "assigned_user_id",
        "livemode",
        "created_at",
        "updated_at",
        "contact",
    }
    assert ticket["organization_id"] == acme.organization_id
    assert ticket["contact_id"] == contact["id"]
    assert ticket["chat_phone_number_id"] is None
    assert ticket["status"] == "open"
    assert ticket["assigned_user_id"] is None
    assert ticket["created_at"].endswith("Z")
    assert ticket["contact"] == {
        "id": contact["id"],
        "name": "Grace",
        "phone_number": contact["phone_number"],
        "tags": ["vip"],
        "notes": "called twice",
        "custom_fields": {"plan": "pro"},
    }
    fetched = await client.get(f"{TICKETS}/{ticket['id']}", headers=acme.headers)
    assert fetched.status_code == 200
    assert fetched.json() == ticket


async def test_a_contact_with_an_open_ticket_gets_it_back_with_200(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    contact = await inbox.contact(acme)
    first = await inbox.open(acme, contact["id"], expected=201)
    again = await inbox.open(acme, contact["id"], expected=200)
    assert again == first
    # Once it is closed, the next create opens a new one.
    closed = await client.post(f"{TICKETS}/{first['id']}/close", headers=acme.headers)
    assert closed.status_code == 200
    second = await inbox.open(acme, contact["id"], expected=201)
    assert second["id"] != first["id"]
    listed = await client.get(TICKETS, headers=acme.headers)
    assert listed.json()["total_count"] == 2


async def test_create_needs_the_organization_id_header(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    contact = await inbox.contact(acme)
    body = {"contact_id": contact["id"]}
    missing = await client.post(TICKETS, json=body, headers=acme.headers)
    assert (missing.status_code, missing.json()) == (400, ORG_REQUIRED)
    other = await client.post(
        TICKETS, json=body, headers={**acme.headers, "organization_id": globex.organization_id}
    )
    assert (other.status_code, other.json()) == (400, ORG_REQUIRED)
    blank = await client.post(TICKETS, json=body, headers={**acme.headers, "organization_id": ""})
    assert (blank.status_code, blank.json()) == (400, ORG_REQUIRED)
    # The header is checked before the body: an empty body gets the same answer.
    no_body = await client.post(TICKETS, headers=acme.headers)
    assert (no_body.status_code, no_body.json()) == (400, ORG_REQUIRED)
    # The hyphenated spelling (what proxies that drop underscores forward) counts too.
    hyphen = await client.post(
        TICKETS, json=body, headers={**acme.headers, "organization-id": acme.organization_id}
    )
    assert hyphen.status_code == 201, hyphen.text
    assert await inbox.events(acme) != []
    # Other ticket routes follow the general rule: the header is optional, but never wrong.
    listed = await client.get(TICKETS, headers=acme.headers)
    assert listed.status_code == 200
    wrong = await client.get(
        TICKETS, headers={**acme.headers, "organization_id": globex.organization_id}
    )
    assert (wrong.status_code, wrong.json()) == (400, ORG_REQUIRED)


@pytest.mark.parametrize(
    ("body", "loc", "error_type"),
    [
        ({}, ["body", "contact_id"], "missing"),
        ({"contact_id": None}, ["body", "contact_id"], "uuid_type"),
        ({"contact_id": "not-a-uuid"}, ["body", "contact_id"], "uuid_parsing"),
        ({"contact_id": 42}, ["body", "contact_id"], "uuid_type"),
    ],
)
async def test_create_validation_is_422(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, Any], loc: list[str], error_type: str
) -> None:
    response = await client.post(TICKETS, json=body, headers=org_headers(acme))
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == loc
    assert error["type"] == error_type
    assert isinstance(error["msg"], str)


async def test_create_without_a_body_is_422(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(TICKETS, headers=org_headers(acme))
    assert response.status_code == 422
    assert response.json() == {
        "detail": [{"loc": ["body"], "msg": "Field required", "type": "missing"}]
    }


async def test_create_for_an_unknown_or_foreign_contact_is_404(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await inbox.contact(globex, "Secret")
    for contact_id in (UNKNOWN_ID, theirs["id"]):
        response = await client.post(
            TICKETS, json={"contact_id": contact_id}, headers=org_headers(acme)
        )
        assert (response.status_code, response.json()) == (404, {"detail": "Contact not found"})
    assert await inbox.events(acme) == []
    assert (await client.get(TICKETS, headers=globex.headers)).json()["total_count"] == 0


async def test_close_moves_open_to_closed_once(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    ticket = await inbox.ticket(acme)
    closed = await client.post(f"{TICKETS}/{ticket['id']}/close", headers=acme.headers)
    assert closed.status_code == 200
    body = closed.json()
    assert body["status"] == "closed"
    assert body["updated_at"] >= ticket["updated_at"]
    assert {k: v for k, v in body.items() if k not in ("status", "updated_at")} == {
        k: v for k, v in ticket.items() if k not in ("status", "updated_at")
    }
    again = await client.post(f"{TICKETS}/{ticket['id']}/close", headers=acme.headers)
    assert (again.status_code, again.json()) == (
        400,
        {"detail": "cannot close ticket in closed state"},
    )
    fetched = await client.get(f"{TICKETS}/{ticket['id']}", headers=acme.headers)
    assert fetched.json() == body


async def test_assign_to_a_user_of_the_organization(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant, globex: Tenant
) -> None:
    ticket = await inbox.ticket(acme)
    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    outsider = await tenants.user(globex, "agent@globex.test", "correct horse battery")
    path = f"{TICKETS}/{ticket['id']}/assign"

    assigned = await client.post(path, json={"user_id": agent}, headers=acme.headers)
    assert assigned.status_code == 200, assigned.text
    assert assigned.json()["assigned_user_id"] == agent
    assert assigned.json()["status"] == "open"

    for user_id in (outsider, UNKNOWN_ID):
        response = await client.post(path, json={"user_id": user_id}, headers=acme.headers)
        assert (response.status_code, response.json()) == (404, {"detail": "User not found"})

    invalid = await client.post(path, json={"user_id": "bob"}, headers=acme.headers)
    assert invalid.status_code == 422
    assert invalid.json()["detail"][0]["loc"] == ["body", "user_id"]
    missing = await client.post(path, json={}, headers=acme.headers)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["type"] == "missing"

    # The same user again changes nothing (and records no event).
    same = await client.post(path, json={"user_id": agent}, headers=acme.headers)
    assert same.status_code == 200
    assert same.json() == assigned.json()
    assert [kind for kind, _ in await inbox.events(acme)].count("ticket.assigned") == 1

    await client.post(f"{TICKETS}/{ticket['id']}/close", headers=acme.headers)
    late = await client.post(path, json={"user_id": agent}, headers=acme.headers)
    assert (late.status_code, late.json()) == (
        400,
        {"detail": "cannot assign ticket in closed state"},
    )
    fetched = await client.get(f"{TICKETS}/{ticket['id']}", headers=acme.headers)
    assert fetched.json()["assigned_user_id"] == agent


async def test_events_carry_the_ticket_as_rest_returns_it(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant
) -> None:
    contact = await inbox.contact(acme)
    created = await inbox.open(acme, contact["id"])
    after_create = await inbox.events(acme)
    assert sorted(kind for kind, _ in after_create) == ["conversation.started", "ticket.created"]
    assert all(data == created for _, data in after_create)

    await inbox.open(acme, contact["id"], expected=200)
    assert len(await inbox.events(acme)) == 2  # returning the open ticket creates nothing

    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    assigned = (
        await client.post(
            f"{TICKETS}/{created['id']}/assign", json={"user_id": agent}, headers=acme.headers
        )
    ).json()
    closed = (await client.post(f"{TICKETS}/{created['id']}/close", headers=acme.headers)).json()
    events = await inbox.events(acme)
    assert len(events) == 5
    assert events[2] == ("ticket.assigned", assigned)
    assert sorted(events[3:]) == [("conversation.closed", closed), ("ticket.resolved", closed)]


async def test_another_organizations_ticket_is_404_on_every_route(
    inbox: Inbox, client: httpx.AsyncClient, tenants: TenantFactory, acme: Tenant, globex: Tenant
) -> None:
    theirs = await inbox.ticket(globex, "Secret")
    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    for ticket_id in (theirs["id"], UNKNOWN_ID, "not-a-uuid", theirs["id"].upper()):
        responses = [
            await client.get(f"{TICKETS}/{ticket_id}", headers=acme.headers),
            await client.post(f"{TICKETS}/{ticket_id}/close", headers=acme.headers),
            await client.post(
                f"{TICKETS}/{ticket_id}/assign", json={"user_id": agent}, headers=acme.headers
            ),
        ]
        for response in responses:
            assert (response.status_code, response.json()) == (404, TICKET_NOT_FOUND), ticket_id
    # Untouched on their side.
    fetched = await client.get(f"{TICKETS}/{theirs['id']}", headers=globex.headers)
    assert fetched.json() == theirs
    assert await inbox.events(acme) == []


async def test_list_is_envelope_c_filtered_by_status_and_scoped(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    tickets = [await inbox.ticket(acme, f"Person {index}") for index in range(5)]
    await inbox.ticket(globex, "Not yours")
    for ticket in tickets[:2]:
        await client.post(f"{TICKETS}/{ticket['id']}/close", headers=acme.headers)

    everything = (await client.get(TICKETS, headers=acme.headers)).json()
    assert set(everything) == {"object", "data", "has_more", "next_cursor", "total_count"}
    assert everything["object"] == "list"
    assert everything["total_count"] == 5
    assert everything["has_more"] is False
    newest_first = [ticket["id"] for ticket in reversed(tickets)]
    assert [item["id"] for item in everything["data"]] == newest_first
    assert everything["next_cursor"] == newest_first[-1]
    assert everything["data"][0]["contact"]["name"] == "Person 4"

    open_only = (await client.get(f"{TICKETS}?status=open", headers=acme.headers)).json()
    assert [item["id"] for item in open_only["data"]] == newest_first[:3]
    assert open_only["total_count"] == 3
    assert {item["status"] for item in open_only["data"]} == {"open"}
    closed_only = (await client.get(f"{TICKETS}?status=closed", headers=acme.headers)).json()
    assert [item["id"] for item in closed_only["data"]] == newest_first[3:]
    assert closed_only["total_count"] == 2

    bad = await client.get(f"{TICKETS}?status=pending", headers=acme.headers)
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "status"]

    theirs = (await client.get(TICKETS, headers=globex.headers)).json()
    assert theirs["total_count"] == 1
    assert theirs["data"][0]["contact"]["name"] == "Not yours"


async def test_cursor_paging_walks_every_ticket_once(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    ids = [(await inbox.ticket(acme, f"P{index}"))["id"] for index in range(5)]
    seen: list[str] = []
    url = f"{TICKETS}?limit=2"
    while True:
        page = (await client.get(url, headers=acme.headers)).json()
        assert page["total_count"] == 5
        seen.extend(item["id"] for item in page["data"])
        if not page["has_more"]:
            break
        url = f"{TICKETS}?limit=2&starting_after={page['next_cursor']}"
    assert seen == list(reversed(ids))
    back = (
        await client.get(f"{TICKETS}?limit=2&ending_before={seen[3]}", headers=acme.headers)
    ).json()
    assert [item["id"] for item in back["data"]] == seen[1:3]
    filtered = (
        await client.get(
            f"{TICKETS}?limit=1&status=open&starting_after={seen[0]}", headers=acme.headers
        )
    ).json()
    assert [item["id"] for item in filtered["data"]] == [seen[1]]
    assert filtered["has_more"] is True
    for query in ("limit=0", "limit=101", f"starting_after={seen[0]}&ending_before={seen[1]}"):
        response = await client.get(f"{TICKETS}?{query}", headers=acme.headers)
        assert response.status_code in (400, 422), query
        assert "detail" in response.json()
    unknown = await client.get(f"{TICKETS}?starting_after={UNKNOWN_ID}", headers=acme.headers)
    assert unknown.status_code == 400
    assert unknown.json() == {"detail": f"starting_after: no such object: '{UNKNOWN_ID}'"}


ROUTES = [
    ("GET", TICKETS, None),
    ("GET", TICKETS + "/{id}", None),
    ("POST", TICKETS, "create"),
    ("POST", TICKETS + "/{id}/close", None),
    ("POST", TICKETS + "/{id}/assign", "assign"),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_scopes(
    inbox: Inbox,
    client: httpx.AsyncClient,
    tenants: TenantFactory,
    acme: Tenant,
    method: str,
    path: str,
    body: str | None,
) -> None:
    contact = await inbox.contact(acme)
    ticket = await inbox.open(acme, contact["id"])
    agent = await tenants.user(acme, "agent@acme.test", "correct horse battery")
    payload = {"create": {"contact_id": contact["id"]}, "assign": {"user_id": agent}}.get(
        body or ""
    )
    url = path.format(id=ticket["id"])
    for scopes in (["agents:read"], ["webhooks:admin"], ["agents:write", "calls:read"]):
        key = await tenants.key(acme, scopes)
        headers = {**key.headers, "organization_id": acme.organization_id}
        response = await client.request(method, url, json=payload, headers=headers)
        assert response.status_code == 403, (scopes, response.text)
        error = response.json()
        assert error["error"]["code"] == "insufficient_scope"
        assert error["error"]["type"] == "authentication_error"
        assert "full_access" in error["detail"]
    full = await tenants.key(acme, ["full_access"])
    headers = {**full.headers, "organization_id": acme.organization_id}
    response = await client.request(method, url, json=payload, headers=headers)
    assert response.status_code == 200, response.text
    unauthenticated = await client.request(method, url, json=payload)
    assert unauthenticated.status_code == 401


async def test_deleting_the_contact_deletes_its_tickets(
    inbox: Inbox, client: httpx.AsyncClient, acme: Tenant
) -> None:
    ticket = await inbox.ticket(acme)
    deleted = await client.delete(f"/api/v1/contacts/{ticket['contact_id']}", headers=acme.headers)
    assert deleted.status_code == 204
    gone = await client.get(f"{TICKETS}/{ticket['id']}", headers=acme.headers)
    assert (gone.status_code, gone.json()) == (404, TICKET_NOT_FOUND)


async def test_the_database_allows_one_open_ticket_per_contact(
    inbox: Inbox, sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    contact = await inbox.contact(acme)

    def ticket(status: str) -> Ticket:
        return Ticket(
            id=str(uuid.uuid4()),
            organization_id=acme.organization_id,
            contact_id=contact["id"],
            status=status,
        )

    async with sessionmaker() as session:
        # Closed tickets are history: any number of them.
        session.add_all([ticket("closed"), ticket("closed"), ticket("open")])
        await session.commit()
    async with sessionmaker() as session:
        session.add(ticket("open"))
        with pytest.raises(IntegrityError):
            await session.commit()
    async with sessionmaker() as session:
        session.add(ticket("pending"))
        with pytest.raises(IntegrityError):  # the status check constraint
            await session.commit()
