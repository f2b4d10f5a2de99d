"""Call logs over GraphQL: the same service operations as REST, numbered pages, argument
errors, isolation, scopes, and Contact.recentCalls batched into one query per response."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.calls.conftest import CallLogFactory
from tests.conftest import StatementCounter, Tenant, TenantFactory, graphql

FIELDS = """
id organizationId callId agentId chatPhoneNumberId phoneNumberId contactId fromNumber toNumber
direction status durationSeconds startedAt endedAt recordingUrl summary cost endReason
answeredBy analysis livemode createdAt updatedAt transcript { speaker text timestamp }
"""
GET = f"query($id: ID!) {{ callLog(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($page: Int, $pageSize: Int, $direction: String, $status: String, $search: String) {
  callLogs(page: $page, pageSize: $pageSize, direction: $direction, status: $status,
           search: $search) {
    total page pageSize items { id callId }
  }
}"""
CONTACTS_WITH_CALLS = """
query($first: Int, $limit: Int!) {
  contacts(first: $first) {
    nodes { id name recentCalls(limit: $limit) { id callId startedAt } }
  }
}"""
TRANSCRIPT = [
    {"speaker": "agent", "text": "Hello from Acme.", "timestamp": 0.5},
    {"speaker": "caller", "text": "Hi.", "timestamp": 2.0},
]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def as_graphql(rest: dict[str, Any]) -> dict[str, Any]:
    return {camel(key): value for key, value in rest.items()}


async def list_logs(client: httpx.AsyncClient, tenant: Tenant, **variables: Any) -> dict[str, Any]:
    body = await graphql(client, LIST, variables, tenant.headers)
    assert "errors" not in body, body
    return body["data"]["callLogs"]  # type: ignore[no-any-return]


async def create_contact(client: httpx.AsyncClient, tenant: Tenant, name: str) -> str:
    response = await client.post(
        "/api/v1/contacts",
        json={"phone_number": "+14155550123", "name": name},
        headers=tenant.headers,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def test_call_log_matches_rest(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    recorded = await calls.record(
        acme, transcript=TRANSCRIPT, summary="Short call", cost=0.01, duration_seconds=3
    )
    body = await graphql(client, GET, {"id": recorded["id"]}, acme.headers)
    assert body["data"]["callLog"] == as_graphql(recorded)
    assert body["data"]["callLog"]["transcript"] == TRANSCRIPT


async def test_unknown_or_foreign_id_is_null(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, calls: CallLogFactory
) -> None:
    theirs = await calls.record(globex)
    for call_log_id in (theirs["id"], "00000000-0000-0000-0000-000000000000", "nope"):
        body = await graphql(client, GET, {"id": call_log_id}, acme.headers)
        assert body == {"data": {"callLog": None}}


async def test_pages_filters_and_search(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, calls: CallLogFactory
) -> None:
    recorded = [
        await calls.record(
            acme,
            minutes=minute,
            call_id=f"CA_Sales-{minute}",
            direction="inbound" if minute % 2 else "outbound",
            status="busy" if minute == 4 else "completed",
        )
        for minute in range(5)
    ]
    await calls.record(globex, minutes=9, call_id="CA_Sales-globex")
    newest_first = [log["id"] for log in reversed(recorded)]

    default = await list_logs(client, acme)
    assert (default["total"], default["page"], default["pageSize"]) == (5, 1, 20)
    assert [item["id"] for item in default["items"]] == newest_first

    pages = [await list_logs(client, acme, page=page, pageSize=2) for page in (1, 2, 3, 4)]
    assert [len(page["items"]) for page in pages] == [2, 2, 1, 0]
    assert {page["total"] for page in pages} == {5}
    assert [item["id"] for page in pages for item in page["items"]] == newest_first

    inbound = await list_logs(client, acme, direction="inbound")
    assert [item["id"] for item in inbound["items"]] == [recorded[3]["id"], recorded[1]["id"]]
    busy = await list_logs(client, acme, status="busy")
    assert (busy["total"], busy["items"][0]["id"]) == (1, recorded[4]["id"])
    searched = await list_logs(client, acme, search="ca_sales-2")
    assert [item["id"] for item in searched["items"]] == [recorded[2]["id"]]
    underscore_literal = await list_logs(client, acme, search="A_S")
    assert underscore_literal["total"] == 5
    assert (await list_logs(client, acme, search="AxS"))["total"] == 0


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"page": 0}, "page"),
        ({"page": -3}, "page"),
        ({"pageSize": 0}, "pageSize"),
        ({"pageSize": 101}, "pageSize"),
        ({"direction": "sideways"}, "direction"),
        ({"status": "ringing"}, "status"),
        ({"search": "x" * 256}, "search"),
    ],
)
async def test_bad_arguments_are_coded_errors(
    client: httpx.AsyncClient, acme: Tenant, variables: dict[str, Any], field: str
) -> None:
    body = await graphql(client, LIST, variables, acme.headers)
    assert body["data"] == {"callLogs": None}
    error = body["errors"][0]
    assert error["extensions"] == {"code": "invalid_input", "field": field}
    assert error["message"].startswith(f"{field}: ")
    assert error["path"] == ["callLogs"]


@pytest.mark.parametrize(
    ("scopes", "allowed"),
    [
        (["calls:read"], True),
        (["full_access"], True),
        (["agents:read"], False),
        (["calls:dispatch"], False),
    ],
)
async def test_scope_matrix(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    calls: CallLogFactory,
    scopes: list[str],
    allowed: bool,
) -> None:
    recorded = await calls.record(acme)
    key = await tenants.key(acme, scopes)
    for query, variables, field in (
        (LIST, {}, "callLogs"),
        (GET, {"id": recorded["id"]}, "callLog"),
    ):
        body = await graphql(client, query, variables, key.headers)
        if allowed:
            assert "errors" not in body, body
            assert body["data"][field] is not None
            continue
        # Nothing leaks: a non-null field nulls `data`, a nullable one is null itself.
        assert body["data"] in (None, {field: None})
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
        assert body["errors"][0]["path"] == [field]


async def test_unauthenticated(client: httpx.AsyncClient) -> None:
    body = await graphql(client, LIST)
    assert body["errors"][0]["extensions"]["code"] == "unauthenticated"


async def test_recent_calls_of_each_contact(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, calls: CallLogFactory
) -> None:
    ada = await create_contact(client, acme, "Ada")
    grace = await create_contact(client, acme, "Grace")
    alan = await create_contact(client, acme, "Alan")
    ada_calls = [await calls.record(acme, minutes=minute, contact_id=ada) for minute in range(7)]
    grace_call = await calls.record(acme, minutes=3, contact_id=grace)
    await calls.record(acme, minutes=99)  # no contact

    body = await graphql(client, CONTACTS_WITH_CALLS, {"first": 10, "limit": 5}, acme.headers)
    assert "errors" not in body, body
    recent = {node["name"]: node["recentCalls"] for node in body["data"]["contacts"]["nodes"]}
    assert [call["id"] for call in recent["Ada"]] == [log["id"] for log in ada_calls[::-1][:5]]
    assert [call["id"] for call in recent["Grace"]] == [grace_call["id"]]
    assert recent["Alan"] == []
    assert alan  # listed, with no calls

    # The default limit is 5; aliases with different limits share the batch.
    aliased = await graphql(
        client,
        """query($id: ID!) { contact(id: $id) {
             five: recentCalls { id } two: recentCalls(limit: 2) { id }
             twenty: recentCalls(limit: 20) { id } } }""",
        {"id": ada},
        acme.headers,
    )
    contact = aliased["data"]["contact"]
    newest = [log["id"] for log in ada_calls[::-1]]
    assert [call["id"] for call in contact["five"]] == newest[:5]
    assert [call["id"] for call in contact["two"]] == newest[:2]
    assert [call["id"] for call in contact["twenty"]] == newest

    # Another organization's contacts never show these calls, nor theirs ours.
    await create_contact(client, globex, "Globex person")
    theirs = await graphql(client, CONTACTS_WITH_CALLS, {"first": 10, "limit": 20}, globex.headers)
    assert [node["recentCalls"] for node in theirs["data"]["contacts"]["nodes"]] == [[]]


@pytest.mark.parametrize("limit", [0, -1, 21])
async def test_recent_calls_limit_bounds(
    client: httpx.AsyncClient, acme: Tenant, limit: int
) -> None:
    await create_contact(client, acme, "Ada")
    body = await graphql(client, CONTACTS_WITH_CALLS, {"first": 5, "limit": limit}, acme.headers)
    error = body["errors"][0]
    assert error["extensions"] == {"code": "invalid_input", "field": "limit"}
    assert error["message"] == "limit must be between 1 and 20"


async def test_deleting_a_contact_keeps_its_calls(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    ada = await create_contact(client, acme, "Ada")
    recorded = await calls.record(acme, contact_id=ada)
    deleted = await client.delete(f"/api/v1/contacts/{ada}", headers=acme.headers)
    assert deleted.status_code == 204
    kept = await client.get(f"/api/v1/call-logs/{recorded['id']}", headers=acme.headers)
    assert kept.status_code == 200
    assert kept.json()["contact_id"] is None


async def test_recent_calls_cost_one_query_whatever_the_page_size(
    client: httpx.AsyncClient,
    acme: Tenant,
    calls: CallLogFactory,
    sql_counter: StatementCounter,
) -> None:
    for index in range(8):
        contact_id = await create_contact(client, acme, f"Contact {index}")
        for minute in range(2):
            await calls.record(acme, minutes=minute, contact_id=contact_id)
    counts = []
    for first in (2, 8):
        sql_counter.count = 0
        body = await graphql(
            client, CONTACTS_WITH_CALLS, {"first": first, "limit": 5}, acme.headers
        )
        nodes = body["data"]["contacts"]["nodes"]
        assert [len(node["recentCalls"]) for node in nodes] == [2] * first
        counts.append(sql_counter.count)
    assert counts[0] == counts[1]
    # And the batch really runs (the counter sees the call log query).
    assert counts[0] >= 1
