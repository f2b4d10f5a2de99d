"""Channels over GraphQL: the same service operations as REST, typed errors, test mode."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import GRAPHQL, Tenant, TenantFactory, graphql
from tests.integrations.whatsapp.fake_graph import FakeGraph

TOKEN = "EAAGgraphql-secret-upstream-token-987"
FIELDS = (
    "id organizationId displayPhoneNumber phoneNumberId businessAccountId name livemode "
    "createdAt updatedAt"
)
CREATE = f"""
mutation($input: ChannelCreateInput!) {{
  createChannel(input: $input) {{ channel {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
DELETE = "mutation($id: ID!) { deleteChannel(id: $id) { deletedId errors { code message } } }"
GET = f"query($id: ID!) {{ channel(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String) {
  channels(first: $first, after: $after, last: $last, before: $before) {
    totalCount
    nodes { id livemode }
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""


def channel_input(**fields: Any) -> dict[str, Any]:
    return {
        "displayPhoneNumber": "+44 20 7183 8750",
        "phoneNumberId": "106540352242922",
        "businessAccountId": "102290129340398",
        "accessToken": TOKEN,
        **fields,
    }


async def create_payload(
    client: httpx.AsyncClient, tenant: Tenant, **fields: Any
) -> dict[str, Any]:
    body = await graphql(client, CREATE, {"input": channel_input(**fields)}, tenant.headers)
    return body["data"]["createChannel"]  # type: ignore[no-any-return]


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    payload = await create_payload(client, tenant, **fields)
    assert payload["errors"] == [], payload
    return payload["channel"]  # type: ignore[no-any-return]


async def test_crud(client: httpx.AsyncClient, acme: Tenant) -> None:
    channel = await create(client, acme, name="Support")
    assert channel["displayPhoneNumber"] == "+442071838750"
    assert channel["organizationId"] == acme.organization_id
    assert channel["livemode"] is False
    assert channel["name"] == "Support"
    assert channel["createdAt"].endswith("Z")

    fetched = await graphql(client, GET, {"id": channel["id"]}, acme.headers)
    assert fetched["data"]["channel"] == channel
    # The REST surface sees the same record.
    rest = await client.get(f"/api/v1/channels/{channel['id']}", headers=acme.headers)
    assert rest.json()["display_phone_number"] == "+442071838750"

    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["channels"]["totalCount"] == 1

    deleted = await graphql(client, DELETE, {"id": channel["id"]}, acme.headers)
    assert deleted["data"]["deleteChannel"] == {"deletedId": channel["id"], "errors": []}
    gone = await graphql(client, GET, {"id": channel["id"]}, acme.headers)
    assert gone["data"]["channel"] is None


async def test_token_is_write_only(client: httpx.AsyncClient, acme: Tenant) -> None:
    schema = await graphql(
        client,
        '{ __type(name: "Channel") { fields { name } } }',
        headers=acme.headers,
    )
    names = {field["name"] for field in schema["data"]["__type"]["fields"]}
    assert not any("token" in name.lower() for name in names)

    channel = await create(client, acme)
    responses = [
        await client.post(
            GRAPHQL,
            json={"query": GET, "variables": {"id": channel["id"]}},
            headers=acme.headers,
        ),
        await client.post(
            GRAPHQL,
            json={"query": CREATE, "variables": {"input": channel_input()}},
            headers=acme.headers,
        ),  # duplicate
        await client.post(
            GRAPHQL,
            json={"query": CREATE, "variables": {"input": channel_input(phoneNumberId=7)}},
            headers=acme.headers,
        ),  # a variable of the wrong type
        await client.post(
            GRAPHQL,
            json={"query": CREATE, "variables": {"input": channel_input(name="")}},
            headers=acme.headers,
        ),
    ]
    for response in responses:
        assert TOKEN not in response.text, response.text
        assert "sb1." not in response.text


async def test_typed_errors(client: httpx.AsyncClient, acme: Tenant) -> None:
    bad_phone = await create_payload(client, acme, displayPhoneNumber="12")
    assert bad_phone == {
        "channel": None,
        "errors": [
            {
                "code": "invalid_input",
                "message": "Invalid phone number format or length",
                "field": "displayPhoneNumber",
            }
        ],
    }
    bad_id = await create_payload(client, acme, phoneNumberId="a/b")
    assert bad_id["errors"][0]["code"] == "string_pattern_mismatch"
    assert bad_id["errors"][0]["field"] == "phoneNumberId"
    blank_token = await create_payload(client, acme, accessToken="")
    assert blank_token["errors"][0]["field"] == "accessToken"

    await create(client, acme)
    duplicate = await create_payload(client, acme, displayPhoneNumber="+14155550100")
    assert duplicate == {
        "channel": None,
        "errors": [
            {
                "code": "conflict",
                "message": "A channel with this phone_number_id already exists in the organization",
                "field": "phoneNumberId",
            }
        ],
    }
    missing = await graphql(
        client, DELETE, {"id": "00000000-0000-0000-0000-000000000000"}, acme.headers
    )
    assert missing["data"]["deleteChannel"]["errors"] == [
        {"code": "not_found", "message": "Channel not found"}
    ]


async def test_isolation(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    theirs = await create(client, globex)
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "channel": None
    }
    deleted = await graphql(client, DELETE, {"id": theirs["id"]}, acme.headers)
    assert deleted["data"]["deleteChannel"]["errors"][0]["code"] == "not_found"
    listed = await graphql(client, LIST, {}, acme.headers)
    assert listed["data"]["channels"]["totalCount"] == 0
    still = await graphql(client, GET, {"id": theirs["id"]}, globex.headers)
    assert still["data"]["channel"]["id"] == theirs["id"]


async def test_test_mode_credential_on_live_channel(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, platform: FakeGraph
) -> None:
    live_key = await tenants.key(acme, ["full_access"], livemode=True)
    platform.add_phone_number("106540352242922", token=TOKEN)
    live = await create(client, live_key)
    assert live["livemode"] is True

    fetched = await graphql(client, GET, {"id": live["id"]}, acme.headers)
    assert fetched["data"] == {"channel": None}
    assert fetched["errors"][0]["extensions"]["code"] == "livemode_mismatch"
    deleted = await graphql(client, DELETE, {"id": live["id"]}, acme.headers)
    assert deleted["data"]["deleteChannel"] == {
        "deletedId": None,
        "errors": [
            {
                "code": "livemode_mismatch",
                "message": "A test-mode credential cannot act on a live-mode channel; "
                "use a live API key",
            }
        ],
    }
    assert (await graphql(client, LIST, {}, acme.headers))["data"]["channels"]["totalCount"] == 0
    by_live = await graphql(client, LIST, {}, live_key.headers)
    assert [node["id"] for node in by_live["data"]["channels"]["nodes"]] == [live["id"]]
    removed = await graphql(client, DELETE, {"id": live["id"]}, live_key.headers)
    assert removed["data"]["deleteChannel"]["errors"] == []


async def test_paging_forward_and_back(client: httpx.AsyncClient, acme: Tenant) -> None:
    ids = [(await create(client, acme, phoneNumberId=f"n{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 2, "after": after}, acme.headers))["data"][
            "channels"
        ]
        assert page["totalCount"] == 5
        assert [edge["cursor"] for edge in page["edges"]] == [node["id"] for node in page["nodes"]]
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 2, "before": seen[2]}, acme.headers))["data"][
        "channels"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:2]
    assert back["pageInfo"]["hasPreviousPage"] is False
    bad = await graphql(client, LIST, {"first": 101}, acme.headers)
    assert bad["errors"][0]["extensions"]["code"] == "invalid_input"


@pytest.mark.parametrize("scopes", [["agents:read"], ["webhooks:admin", "calls:read"]])
async def test_scopes(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, scopes: list[str]
) -> None:
    channel = await create(client, acme)
    limited = await tenants.key(acme, scopes)
    for query, variables in (
        (LIST, {}),
        (GET, {"id": channel["id"]}),
        (CREATE, {"input": channel_input(phoneNumberId="x1")}),
        (DELETE, {"id": channel["id"]}),
    ):
        body = await graphql(client, query, variables, limited.headers)
        assert not any((body["data"] or {}).values()), body  # null (the field is nullable)
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    assert (await graphql(client, LIST, {}, acme.headers))["data"]["channels"]["totalCount"] == 1


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"phoneNumberId": None}, "phoneNumberId"),  # a required field missing
        ({"unknownField": "x"}, "unknownField"),  # a field the input type does not define
    ],
)
async def test_an_invalid_variable_never_echoes_the_token(
    client: httpx.AsyncClient, acme: Tenant, broken: dict[str, Any], reason: str
) -> None:
    variables = {"input": {k: v for k, v in channel_input(**broken).items() if v is not None}}
    response = await client.post(
        GRAPHQL, json={"query": CREATE, "variables": variables}, headers=acme.headers
    )
    assert TOKEN not in response.text
    [error] = response.json()["errors"]
    assert error["message"].startswith("Variable '$input' has invalid value: ")
    assert reason in error["message"]
