"""Webhook subscriptions over GraphQL: the same service operations as REST, typed errors,
scopes, isolation and paging."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.types import SUBSCRIBABLE_EVENTS
from app.webhooks.models import WebhookSubscription
from app.webhooks.ssrf import FORBIDDEN_ADDRESS_MESSAGE
from tests.conftest import Tenant, TenantFactory, graphql
from tests.webhooks.test_subscriptions_rest import add_attempts

PUBLIC_URL = "https://93.184.216.34/hooks"
FIELDS = "id organizationId url secret events isActive disabledReason createdAt updatedAt"
CREATE = f"""
mutation($input: WebhookCreateInput!) {{
  createWebhook(input: $input) {{ webhook {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UPDATE = f"""
mutation($id: ID!, $input: WebhookUpdateInput!) {{
  updateWebhook(id: $id, input: $input) {{ webhook {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
DELETE = "mutation($id: ID!) { deleteWebhook(id: $id) { deletedId errors { code message } } }"
ROTATE = f"""
mutation($id: ID!) {{
  rotateWebhookSecret(id: $id) {{ webhook {{ {FIELDS} }} errors {{ code message }} }}
}}"""
GET = f"query($id: ID!) {{ webhook(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String) {
  webhooks(first: $first, after: $after, last: $last, before: $before) {
    totalCount
    nodes { id url isActive }
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""
DELIVERIES = """
query($webhookId: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  webhookDeliveries(webhookId: $webhookId, first: $first, after: $after, last: $last,
                    before: $before) {
    totalCount
    nodes { id eventId eventType statusCode success attempt durationMs error createdAt }
    edges { cursor }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    variables = {"input": {"url": PUBLIC_URL, "events": ["lead.created"], **fields}}
    body = await graphql(client, CREATE, variables, tenant.headers)
    payload = body["data"]["createWebhook"]
    assert payload["errors"] == [], payload
    return payload["webhook"]  # type: ignore[no-any-return]


async def test_crud(client: httpx.AsyncClient, acme: Tenant) -> None:
    webhook = await create(client, acme, events=["lead.created", "ticket.resolved"])
    assert webhook["organizationId"] == acme.organization_id
    assert webhook["url"] == PUBLIC_URL
    assert webhook["events"] == ["lead.created", "ticket.resolved"]
    assert webhook["isActive"] is True
    assert webhook["disabledReason"] is None
    assert webhook["secret"].startswith("whsec_")
    assert webhook["createdAt"].endswith("Z")

    fetched = await graphql(client, GET, {"id": webhook["id"]}, acme.headers)
    assert fetched["data"]["webhook"] == webhook

    updated = await graphql(
        client,
        UPDATE,
        {"id": webhook["id"], "input": {"isActive": False, "events": ["call.started"]}},
        acme.headers,
    )
    payload = updated["data"]["updateWebhook"]
    assert payload["errors"] == []
    assert payload["webhook"]["isActive"] is False
    assert payload["webhook"]["events"] == ["call.started"]
    assert payload["webhook"]["url"] == PUBLIC_URL

    # The REST surface sees the same record.
    rest = await client.get(f"/api/v1/webhooks/{webhook['id']}", headers=acme.headers)
    assert rest.json()["is_active"] is False
    assert rest.json()["secret"] == webhook["secret"]

    deleted = await graphql(client, DELETE, {"id": webhook["id"]}, acme.headers)
    assert deleted["data"]["deleteWebhook"] == {"deletedId": webhook["id"], "errors": []}
    gone = await graphql(client, GET, {"id": webhook["id"]}, acme.headers)
    assert gone["data"]["webhook"] is None
    again = await graphql(client, DELETE, {"id": webhook["id"]}, acme.headers)
    assert again["data"]["deleteWebhook"] == {
        "deletedId": None,
        "errors": [{"code": "not_found", "message": "Webhook not found"}],
    }


async def test_typed_errors(client: httpx.AsyncClient, acme: Tenant) -> None:
    async def create_errors(url: str, events: list[str]) -> list[dict[str, Any]]:
        body = await graphql(
            client, CREATE, {"input": {"url": url, "events": events}}, acme.headers
        )
        payload = body["data"]["createWebhook"]
        assert payload["webhook"] is None
        return payload["errors"]  # type: ignore[no-any-return]

    assert await create_errors("ftp://x/", ["lead.created"]) == [
        {
            "code": "invalid_input",
            "message": "URL must start with http:// or https://",
            "field": "url",
        }
    ]
    assert await create_errors(PUBLIC_URL, ["nope"]) == [
        {
            "code": "invalid_input",
            "message": f"Invalid event(s): nope. Allowed events: {', '.join(SUBSCRIBABLE_EVENTS)}",
            "field": "events",
        }
    ]
    assert await create_errors(PUBLIC_URL, []) == [
        {"code": "invalid_input", "message": "At least one event is required", "field": "events"}
    ]
    assert await create_errors("http://127.0.0.1/x", ["lead.created"]) == [
        {"code": "invalid_input", "message": FORBIDDEN_ADDRESS_MESSAGE, "field": "url"}
    ]
    too_many = await create_errors(PUBLIC_URL, ["lead.created"] * 101)
    assert too_many[0]["code"] == "too_long"
    assert too_many[0]["field"] == "events"

    webhook = await create(client, acme)
    for variables, code, field in (
        ({"url": "http://10.0.0.1/"}, "invalid_input", "url"),
        ({"url": None}, "value_error", "url"),
        ({"isActive": None}, "value_error", "isActive"),
    ):
        body = await graphql(
            client, UPDATE, {"id": webhook["id"], "input": variables}, acme.headers
        )
        error = body["data"]["updateWebhook"]["errors"][0]
        assert (error["code"], error["field"]) == (code, field), variables
    unchanged = await graphql(client, GET, {"id": webhook["id"]}, acme.headers)
    assert unchanged["data"]["webhook"] == webhook


async def test_rotate_secret(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    webhook = await create(client, acme)
    body = await graphql(client, ROTATE, {"id": webhook["id"]}, acme.headers)
    payload = body["data"]["rotateWebhookSecret"]
    assert payload["errors"] == []
    assert payload["webhook"]["secret"] != webhook["secret"]
    async with sessionmaker() as session:
        stored = await session.get(WebhookSubscription, webhook["id"])
        assert stored is not None
        assert stored.previous_secret == webhook["secret"]
        assert stored.previous_secret_expires_at is not None
    missing = await graphql(
        client, ROTATE, {"id": "00000000-0000-0000-0000-000000000000"}, acme.headers
    )
    assert missing["data"]["rotateWebhookSecret"] == {
        "webhook": None,
        "errors": [{"code": "not_found", "message": "Webhook not found"}],
    }


async def test_isolation(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    theirs = await create(client, globex)
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "webhook": None
    }
    for query, name, variables in (
        (UPDATE, "updateWebhook", {"id": theirs["id"], "input": {"isActive": False}}),
        (ROTATE, "rotateWebhookSecret", {"id": theirs["id"]}),
        (DELETE, "deleteWebhook", {"id": theirs["id"]}),
    ):
        body = await graphql(client, query, variables, acme.headers)
        assert body["data"][name]["errors"][0]["code"] == "not_found", name
    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["webhooks"]["totalCount"] == 0
    deliveries = await graphql(client, DELIVERIES, {"webhookId": theirs["id"]}, acme.headers)
    assert deliveries["data"] == {"webhookDeliveries": None}
    assert deliveries["errors"][0]["extensions"]["code"] == "not_found"
    still = await graphql(client, GET, {"id": theirs["id"]}, globex.headers)
    assert still["data"]["webhook"] == theirs


async def test_scope(client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory) -> None:
    admin = await tenants.key(acme, ["webhooks:admin"])
    webhook = await create(client, admin)
    listed = await graphql(client, LIST, {}, admin.headers)
    assert [node["id"] for node in listed["data"]["webhooks"]["nodes"]] == [webhook["id"]]

    outsider = await tenants.key(acme, ["agents:read"])
    for query, variables in (
        (LIST, {}),
        (GET, {"id": webhook["id"]}),
        (DELIVERIES, {"webhookId": webhook["id"]}),
        (CREATE, {"input": {"url": PUBLIC_URL, "events": ["lead.created"]}}),
        (UPDATE, {"id": webhook["id"], "input": {"isActive": False}}),
        (ROTATE, {"id": webhook["id"]}),
        (DELETE, {"id": webhook["id"]}),
    ):
        body = await graphql(client, query, variables, outsider.headers)
        # Non-null fields null the whole result; the nullable `webhook` field is null itself.
        assert not any((body["data"] or {}).values()), query
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
        assert "webhooks:admin" in body["errors"][0]["message"]
    still = await graphql(client, GET, {"id": webhook["id"]}, admin.headers)
    assert still["data"]["webhook"] == webhook


async def test_paging_forward_and_back(client: httpx.AsyncClient, acme: Tenant) -> None:
    ids = [(await create(client, acme, url=f"https://93.184.216.34/{i}"))["id"] for i in range(7)]
    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 3, "after": after}, acme.headers))["data"][
            "webhooks"
        ]
        assert page["totalCount"] == 7
        assert [edge["cursor"] for edge in page["edges"]] == [node["id"] for node in page["nodes"]]
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 3, "before": seen[3]}, acme.headers))["data"][
        "webhooks"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:3]
    assert back["pageInfo"]["hasPreviousPage"] is False
    assert back["pageInfo"]["hasNextPage"] is True
    for variables in ({"first": 0}, {"first": 101}, {"last": 2}, {"after": "not-an-id"}):
        body = await graphql(client, LIST, variables, acme.headers)
        assert body["data"] == {"webhooks": None}
        assert body["errors"][0]["extensions"]["code"] == "invalid_input", variables


async def test_deliveries(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    webhook = await create(client, acme)
    ids = await add_attempts(sessionmaker, acme, webhook["id"], 5)
    first = (
        await graphql(client, DELIVERIES, {"webhookId": webhook["id"], "first": 2}, acme.headers)
    )["data"]["webhookDeliveries"]
    assert first["totalCount"] == 5
    assert [node["id"] for node in first["nodes"]] == [ids[4], ids[3]]
    assert first["pageInfo"]["hasNextPage"] is True
    newest = first["nodes"][0]
    assert newest["statusCode"] == 200
    assert newest["success"] is True
    assert newest["attempt"] == 5
    assert newest["durationMs"] == 50
    assert newest["eventType"] == "lead.created"
    assert newest["createdAt"] == "2026-01-01T12:05:00Z"
    rest = (
        await graphql(
            client,
            DELIVERIES,
            {"webhookId": webhook["id"], "first": 10, "after": first["pageInfo"]["endCursor"]},
            acme.headers,
        )
    )["data"]["webhookDeliveries"]
    assert [node["id"] for node in rest["nodes"]] == [ids[2], ids[1], ids[0]]
    assert rest["nodes"][0]["error"] == "HTTP 503"
    assert rest["pageInfo"]["hasNextPage"] is False
    missing = await graphql(
        client, DELIVERIES, {"webhookId": "00000000-0000-0000-0000-000000000000"}, acme.headers
    )
    assert missing["errors"][0]["message"] == "Webhook not found"
