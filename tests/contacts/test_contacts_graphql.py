"""Contacts over GraphQL: the same service operations as REST, typed errors, paging."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Tenant, graphql

FIELDS = "id organizationId phoneNumber name tags notes customFields createdAt updatedAt"
CREATE = f"""
mutation($input: ContactCreateInput!) {{
  createContact(input: $input) {{ contact {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UPDATE = f"""
mutation($id: ID!, $input: ContactUpdateInput!) {{
  updateContact(id: $id, input: $input) {{ contact {{ {FIELDS} }} errors {{ code field }} }}
}}"""
DELETE = "mutation($id: ID!) { deleteContact(id: $id) { deletedId errors { code message } } }"
GET = f"query($id: ID!) {{ contact(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String, $tag: String, $search: String) {
  contacts(first: $first, after: $after, last: $last, before: $before, tag: $tag,
           search: $search) {
    totalCount
    nodes { id name }
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    variables = {"input": {"phoneNumber": "+14155550100", "name": "Ada", **fields}}
    body = await graphql(client, CREATE, variables, tenant.headers)
    payload = body["data"]["createContact"]
    assert payload["errors"] == [], payload
    return payload["contact"]  # type: ignore[no-any-return]


async def test_crud(client: httpx.AsyncClient, acme: Tenant) -> None:
    contact = await create(
        client, acme, phoneNumber="+44 20 7183 8750", tags=["vip"], customFields={"tier": 2}
    )
    assert contact["phoneNumber"] == "+442071838750"
    assert contact["organizationId"] == acme.organization_id
    assert contact["customFields"] == {"tier": 2}
    assert contact["createdAt"].endswith("Z")

    fetched = await graphql(client, GET, {"id": contact["id"]}, acme.headers)
    assert fetched["data"]["contact"] == contact

    updated = await graphql(
        client, UPDATE, {"id": contact["id"], "input": {"tags": []}}, acme.headers
    )
    assert updated["data"]["updateContact"]["contact"]["tags"] == []
    assert updated["data"]["updateContact"]["contact"]["name"] == "Ada"

    # The REST surface sees the same record.
    rest = await client.get(f"/api/v1/contacts/{contact['id']}", headers=acme.headers)
    assert rest.json()["tags"] == []

    deleted = await graphql(client, DELETE, {"id": contact["id"]}, acme.headers)
    assert deleted["data"]["deleteContact"] == {"deletedId": contact["id"], "errors": []}
    gone = await graphql(client, GET, {"id": contact["id"]}, acme.headers)
    assert gone["data"]["contact"] is None


async def test_typed_errors(client: httpx.AsyncClient, acme: Tenant) -> None:
    bad_phone = await graphql(
        client, CREATE, {"input": {"phoneNumber": "12", "name": "X"}}, acme.headers
    )
    assert bad_phone["data"]["createContact"] == {
        "contact": None,
        "errors": [
            {
                "code": "invalid_input",
                "message": "Invalid phone number format or length",
                "field": "phoneNumber",
            }
        ],
    }
    long_name = await graphql(
        client, CREATE, {"input": {"phoneNumber": "+14155550100", "name": "x" * 256}}, acme.headers
    )
    error = long_name["data"]["createContact"]["errors"][0]
    assert error["field"] == "name"
    assert error["code"] == "string_too_long"
    missing = await graphql(
        client, DELETE, {"id": "00000000-0000-0000-0000-000000000000"}, acme.headers
    )
    assert missing["data"]["deleteContact"]["errors"] == [
        {"code": "not_found", "message": "Contact not found"}
    ]
    null_name = await graphql(client, UPDATE, {"id": "x", "input": {"name": None}}, acme.headers)
    assert null_name["data"]["updateContact"]["errors"][0]["code"] == "value_error"


async def test_isolation(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    theirs = await create(client, globex, name="Secret")
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "contact": None
    }
    update = await graphql(
        client, UPDATE, {"id": theirs["id"], "input": {"name": "pwned"}}, acme.headers
    )
    assert update["data"]["updateContact"]["errors"][0]["code"] == "not_found"
    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["contacts"]["totalCount"] == 0


async def test_paging_forward_and_back(client: httpx.AsyncClient, acme: Tenant) -> None:
    ids = [(await create(client, acme, name=f"N{i}"))["id"] for i in range(7)]
    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 3, "after": after}, acme.headers))["data"][
            "contacts"
        ]
        assert page["totalCount"] == 7
        assert [edge["cursor"] for edge in page["edges"]] == [node["id"] for node in page["nodes"]]
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 3, "before": seen[3]}, acme.headers))["data"][
        "contacts"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:3]
    assert back["pageInfo"]["hasPreviousPage"] is False
    assert back["pageInfo"]["hasNextPage"] is True


async def test_bad_paging_arguments(client: httpx.AsyncClient, acme: Tenant) -> None:
    for variables in (
        {"first": 0},
        {"first": 101},
        {"last": 2},
        {"first": 1, "last": 1},
        {"after": "not-an-id"},
    ):
        body = await graphql(client, LIST, variables, acme.headers)
        assert body["data"] == {"contacts": None}  # the root field is nullable
        assert body["errors"][0]["extensions"]["code"] == "invalid_input", variables


async def test_filters(client: httpx.AsyncClient, acme: Tenant) -> None:
    await create(client, acme, name="Grace", tags=["vip"])
    await create(client, acme, name="Alan", tags=["lead"])
    vip = (await graphql(client, LIST, {"tag": "vip"}, acme.headers))["data"]["contacts"]
    assert [node["name"] for node in vip["nodes"]] == ["Grace"]
    found = (await graphql(client, LIST, {"search": "ALA"}, acme.headers))["data"]["contacts"]
    assert [node["name"] for node in found["nodes"]] == ["Alan"]
