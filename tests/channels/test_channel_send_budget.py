"""A channel's send budget (`messages_per_second`) on REST and GraphQL: default, bounds,
updates, isolation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.channels.test_channels_graphql import channel_input
from tests.channels.test_channels_rest import BASE, NOT_FOUND, body, create
from tests.conftest import Tenant, graphql

GQL_FIELDS = "id name messagesPerSecond"
GQL_CREATE = f"""
mutation($input: ChannelCreateInput!) {{
  createChannel(input: $input) {{ channel {{ {GQL_FIELDS} }} errors {{ code message field }} }}
}}"""
GQL_UPDATE = f"""
mutation($id: ID!, $input: ChannelUpdateInput!) {{
  updateChannel(id: $id, input: $input) {{
    channel {{ {GQL_FIELDS} }} errors {{ code message field }}
  }}
}}"""
GQL_GET = f"query($id: ID!) {{ channel(id: $id) {{ {GQL_FIELDS} }} }}"


async def put(client: httpx.AsyncClient, tenant: Tenant, channel_id: str, **fields: Any) -> Any:
    return await client.put(f"{BASE}/{channel_id}", json=fields, headers=tenant.headers)


async def test_default_is_80_and_1000_is_accepted(client: httpx.AsyncClient, acme: Tenant) -> None:
    default = await create(client, acme)
    assert default["messages_per_second"] == 80
    fast = await create(client, acme, phone_number_id="fast", messages_per_second=1000)
    assert fast["messages_per_second"] == 1000
    slow = await create(client, acme, phone_number_id="slow", messages_per_second=1)
    assert slow["messages_per_second"] == 1
    # JSON Schema's integer: 425.0 is one.
    whole = await create(client, acme, phone_number_id="whole", messages_per_second=425.0)
    assert whole["messages_per_second"] == 425
    fetched = await client.get(f"{BASE}/{fast['id']}", headers=acme.headers)
    assert fetched.json()["messages_per_second"] == 1000
    listed = (await client.get(BASE, headers=acme.headers)).json()["data"]
    assert sorted(item["messages_per_second"] for item in listed) == [1, 80, 425, 1000]


@pytest.mark.parametrize(
    ("value", "error_type"),
    [
        (0, "greater_than_equal"),
        (1001, "less_than_equal"),
        (-5, "greater_than_equal"),
        ("80", "int_type"),
        (80.5, "int_from_float"),
        (True, "int_type"),
        (None, "int_type"),
    ],
)
async def test_out_of_range_or_not_an_integer_is_422(
    client: httpx.AsyncClient, acme: Tenant, value: Any, error_type: str
) -> None:
    created = await client.post(BASE, json=body(messages_per_second=value), headers=acme.headers)
    assert created.status_code == 422, created.text
    detail = created.json()["detail"]
    assert detail == [
        {"loc": ["body", "messages_per_second"], "msg": detail[0]["msg"], "type": error_type}
    ]
    channel = await create(client, acme)
    updated = await put(client, acme, channel["id"], messages_per_second=value)
    assert updated.status_code == 422, updated.text
    assert updated.json()["detail"][0]["loc"] == ["body", "messages_per_second"]
    # Nothing changed.
    fetched = await client.get(f"{BASE}/{channel['id']}", headers=acme.headers)
    assert fetched.json()["messages_per_second"] == 80


async def test_update_changes_only_the_fields_sent(client: httpx.AsyncClient, acme: Tenant) -> None:
    channel = await create(client, acme, name="Support")
    raised = await put(client, acme, channel["id"], messages_per_second=1000)
    assert raised.status_code == 200, raised.text
    assert raised.json() == {
        **channel,
        "messages_per_second": 1000,
        "updated_at": raised.json()["updated_at"],
    }
    renamed = await put(client, acme, channel["id"], name="Sales")
    assert (renamed.json()["name"], renamed.json()["messages_per_second"]) == ("Sales", 1000)
    cleared = await put(client, acme, channel["id"], name=None)
    assert cleared.json()["name"] is None
    unchanged = await put(client, acme, channel["id"])
    assert unchanged.status_code == 200
    assert unchanged.json()["messages_per_second"] == 1000


async def test_other_organizations_channel_is_404(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, messages_per_second=500)
    response = await put(client, acme, theirs["id"], messages_per_second=1000)
    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    unknown = await put(client, acme, "00000000-0000-0000-0000-000000000000", name="x")
    assert unknown.json() == NOT_FOUND
    still = await client.get(f"{BASE}/{theirs['id']}", headers=globex.headers)
    assert still.json()["messages_per_second"] == 500


async def test_graphql_default_update_and_errors(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    created = await graphql(client, GQL_CREATE, {"input": channel_input()}, acme.headers)
    channel = created["data"]["createChannel"]["channel"]
    assert channel["messagesPerSecond"] == 80

    updated = await graphql(
        client,
        GQL_UPDATE,
        {"id": channel["id"], "input": {"messagesPerSecond": 1000}},
        acme.headers,
    )
    assert updated["data"]["updateChannel"] == {
        "channel": {**channel, "messagesPerSecond": 1000},
        "errors": [],
    }
    rest = await client.get(f"{BASE}/{channel['id']}", headers=acme.headers)
    assert rest.json()["messages_per_second"] == 1000

    for value, code in ((0, "greater_than_equal"), (1001, "less_than_equal")):
        refused = await graphql(
            client,
            GQL_UPDATE,
            {"id": channel["id"], "input": {"messagesPerSecond": value}},
            acme.headers,
        )
        payload = refused["data"]["updateChannel"]
        assert payload["channel"] is None
        assert [(e["code"], e["field"]) for e in payload["errors"]] == [
            (code, "messagesPerSecond")
        ], payload
        too_fast = await graphql(
            client,
            GQL_CREATE,
            {"input": channel_input(phoneNumberId="other", messagesPerSecond=value)},
            acme.headers,
        )
        assert too_fast["data"]["createChannel"]["channel"] is None
        assert too_fast["data"]["createChannel"]["errors"][0]["field"] == "messagesPerSecond"

    fetched = await graphql(client, GQL_GET, {"id": channel["id"]}, acme.headers)
    assert fetched["data"]["channel"]["messagesPerSecond"] == 1000

    hidden = await graphql(
        client, GQL_UPDATE, {"id": channel["id"], "input": {"messagesPerSecond": 5}}, globex.headers
    )
    assert hidden["data"]["updateChannel"]["channel"] is None
    assert hidden["data"]["updateChannel"]["errors"][0]["code"] == "not_found"
