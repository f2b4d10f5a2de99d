"""Quick replies over GraphQL: the same operations as REST, typed errors, shortcut expansion."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Tenant, TenantFactory, graphql
from tests.quick_replies.conftest import EXPAND, create, expand

FIELDS = "id shortcut content createdAt updatedAt"
CREATE = f"""
mutation($input: QuickReplyCreateInput!) {{
  createQuickReply(input: $input) {{ quickReply {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UPDATE = f"""
mutation($id: ID!, $input: QuickReplyUpdateInput!) {{
  updateQuickReply(id: $id, input: $input) {{
    quickReply {{ {FIELDS} }} errors {{ code message field }}
  }}
}}"""
DELETE = "mutation($id: ID!) { deleteQuickReply(id: $id) { deletedId errors { code message } } }"
GET = f"query($id: ID!) {{ quickReply(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String) {
  quickReplies(first: $first, after: $after, last: $last, before: $before) {
    totalCount
    nodes { id shortcut }
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""


async def mutate(
    client: httpx.AsyncClient, tenant: Tenant, query: str, **variables: Any
) -> dict[str, Any]:
    body = await graphql(client, query, variables, tenant.headers)
    assert "errors" not in body, body
    [payload] = body["data"].values()
    return payload  # type: ignore[no-any-return]


async def gql_create(
    client: httpx.AsyncClient, tenant: Tenant, shortcut: str, content: str
) -> dict[str, Any]:
    payload = await mutate(client, tenant, CREATE, input={"shortcut": shortcut, "content": content})
    assert payload["errors"] == [], payload
    return payload["quickReply"]  # type: ignore[no-any-return]


async def test_crud(client: httpx.AsyncClient, acme: Tenant) -> None:
    reply = await gql_create(client, acme, "/hi", "Hello!")
    assert reply["shortcut"] == "/hi"
    assert reply["createdAt"].endswith("Z")
    assert reply["updatedAt"] == reply["createdAt"]

    fetched = await graphql(client, GET, {"id": reply["id"]}, acme.headers)
    assert fetched["data"]["quickReply"] == reply
    rest = await client.get(f"/api/v1/quick-replies/{reply['id']}", headers=acme.headers)
    assert rest.json()["content"] == "Hello!"

    updated = await mutate(client, acme, UPDATE, id=reply["id"], input={"content": "Hey"})
    assert updated["errors"] == []
    assert updated["quickReply"]["content"] == "Hey"
    assert updated["quickReply"]["shortcut"] == "/hi"
    assert updated["quickReply"]["updatedAt"] >= reply["updatedAt"]

    deleted = await mutate(client, acme, DELETE, id=reply["id"])
    assert deleted == {"deletedId": reply["id"], "errors": []}
    gone = await graphql(client, GET, {"id": reply["id"]}, acme.headers)
    assert gone["data"]["quickReply"] is None


async def test_typed_errors(client: httpx.AsyncClient, acme: Tenant) -> None:
    no_slash = await mutate(client, acme, CREATE, input={"shortcut": "hi", "content": "x"})
    assert no_slash == {
        "quickReply": None,
        "errors": [
            {
                "code": "value_error",
                "message": "Value error, shortcut must start with '/'",
                "field": "shortcut",
            }
        ],
    }
    empty = await mutate(client, acme, CREATE, input={"shortcut": "/x", "content": ""})
    assert empty["errors"][0]["code"] == "string_too_short"
    assert empty["errors"][0]["field"] == "content"

    first = await gql_create(client, acme, "/hi", "Hello")
    duplicate = await mutate(client, acme, CREATE, input={"shortcut": "/hi", "content": "Again"})
    assert duplicate == {
        "quickReply": None,
        "errors": [
            {
                "code": "conflict",
                "message": "A quick reply with the shortcut '/hi' already exists",
                "field": "shortcut",
            }
        ],
    }
    second = await gql_create(client, acme, "/bye", "Bye")
    clash = await mutate(client, acme, UPDATE, id=second["id"], input={"shortcut": "/hi"})
    assert clash["errors"][0]["code"] == "conflict"
    null = await mutate(client, acme, UPDATE, id=first["id"], input={"content": None})
    assert null["errors"] == [
        {
            "code": "value_error",
            "message": "Value error, content cannot be null",
            "field": "content",
        }
    ]
    missing = await mutate(client, acme, DELETE, id="00000000-0000-0000-0000-000000000000")
    assert missing["errors"] == [{"code": "not_found", "message": "Quick reply not found"}]


async def test_isolation(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    theirs = await gql_create(client, globex, "/secret", "Globex only")
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "quickReply": None
    }
    for query, variables in (
        (UPDATE, {"id": theirs["id"], "input": {"content": "pwned"}}),
        (DELETE, {"id": theirs["id"]}),
    ):
        payload = await mutate(client, acme, query, **variables)
        assert payload["errors"][0]["code"] == "not_found"
    assert await expand(client, acme, "/secret") is None
    assert await expand(client, globex, "/secret") == "Globex only"
    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["quickReplies"]["totalCount"] == 0


async def test_paging_forward_and_back(client: httpx.AsyncClient, acme: Tenant) -> None:
    ids = [(await gql_create(client, acme, f"/p{i}", f"P{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 2, "after": after}, acme.headers))["data"][
            "quickReplies"
        ]
        assert page["totalCount"] == 5
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 2, "before": seen[2]}, acme.headers))["data"][
        "quickReplies"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:2]
    for variables in ({"first": 0}, {"last": 2}, {"after": "not-an-id"}):
        body = await graphql(client, LIST, variables, acme.headers)
        assert body["errors"][0]["extensions"]["code"] == "invalid_input", variables


async def test_expansion(client: httpx.AsyncClient, acme: Tenant) -> None:
    await create(client, acme, "/hi", "Hello, how can I help?")
    await create(client, acme, "/" + "a" * 99, "long shortcut")
    assert await expand(client, acme, "/hi") == "Hello, how can I help?"
    assert await expand(client, acme, "/" + "a" * 99) == "long shortcut"
    for unknown in ("/HI", "hi", "/hi ", "", "/" + "a" * 200):
        assert await expand(client, acme, unknown) is None


async def test_expansion_next_to_other_fields(client: httpx.AsyncClient, acme: Tenant) -> None:
    """Sibling root fields resolve concurrently; the expansion's own session waits its turn."""
    await create(client, acme, "/hi", "Hello")
    query = """query {
      quickReplies(first: 5) { totalCount }
      a: quickReplyExpansion(shortcut: "/hi")
      b: quickReplyExpansion(shortcut: "/nope")
      channels { totalCount }
    }"""
    body = await graphql(client, query, headers=acme.headers)
    assert body == {
        "data": {
            "quickReplies": {"totalCount": 1},
            "a": "Hello",
            "b": None,
            "channels": {"totalCount": 0},
        }
    }


@pytest.mark.parametrize("scopes", [["agents:read"], ["calls:read", "webhooks:admin"]])
async def test_scopes(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, scopes: list[str]
) -> None:
    reply = await create(client, acme)
    limited = await tenants.key(acme, scopes)
    for query, variables in (
        (LIST, {}),
        (GET, {"id": reply["id"]}),
        (EXPAND, {"shortcut": "/hi"}),
        (CREATE, {"input": {"shortcut": "/new", "content": "x"}}),
        (UPDATE, {"id": reply["id"], "input": {"content": "changed"}}),
        (DELETE, {"id": reply["id"]}),
    ):
        body = await graphql(client, query, variables, limited.headers)
        assert not any((body["data"] or {}).values()), body
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    assert await expand(client, acme, "/hi") == "Hello!"
