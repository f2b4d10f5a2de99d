"""Campaigns over GraphQL: the same service operations, typed errors in payloads, the same
scope and tenancy rules as REST."""

from __future__ import annotations

from typing import Any

import httpx

from tests.campaigns.conftest import Jobs, create_contact
from tests.conftest import Tenant, TenantFactory, graphql

FIELDS = (
    "id name status audienceType audienceTags audienceContactIds templateParameters"
    " totalContactsCount sentCount deliveredCount readCount failedCount"
)
CREATE = f"""
mutation($input: CampaignCreateInput!) {{
  createCampaign(input: $input) {{ campaign {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UPDATE = f"""
mutation($id: ID!, $input: CampaignUpdateInput!) {{
  updateCampaign(id: $id, input: $input) {{ campaign {{ {FIELDS} }} errors {{ code message }} }}
}}"""
MOVE = """
mutation($id: ID!) {{
  {name}(id: $id) {{ campaign {{ id status totalContactsCount }} errors {{ code message }} }}
}}"""
DELETE = """
mutation($id: ID!) { deleteCampaign(id: $id) { deletedId errors { code message } } }"""
GET = f"query($id: ID!) {{ campaign(id: $id) {{ {FIELDS} }} }}"


def create_input(
    channel: dict[str, Any], template: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    return {
        "name": "Spring sale",
        "chatPhoneNumberId": channel["id"],
        "messageTemplateId": template["id"],
        "audienceType": "all",
        "templateParameters": {"1": "{{contact.name}}", "2": "A-1"},
        **fields,
    }


async def move(
    client: httpx.AsyncClient, tenant: Tenant, name: str, campaign_id: str
) -> dict[str, Any]:
    result = await graphql(client, MOVE.format(name=name), {"id": campaign_id}, tenant.headers)
    payload: dict[str, Any] = result["data"][name]
    return payload


async def test_lifecycle_and_typed_errors(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada", tags=["vip"])
    await create_contact(client, acme, "+15005550010", "Never reads", tags=["vip"])
    result = await graphql(
        client,
        CREATE,
        {"input": create_input(channel, template, audienceType="tags", audienceTags=["vip"])},
        acme.headers,
    )
    payload = result["data"]["createCampaign"]
    assert payload["errors"] == []
    campaign = payload["campaign"]
    assert (campaign["status"], campaign["audienceTags"], campaign["audienceContactIds"]) == (
        "draft",
        ["vip"],
        None,
    )
    updated = await graphql(
        client, UPDATE, {"id": campaign["id"], "input": {"name": "Renamed"}}, acme.headers
    )
    assert updated["data"]["updateCampaign"]["campaign"]["name"] == "Renamed"
    refused = await move(client, acme, "pauseCampaign", campaign["id"])
    assert refused == {
        "campaign": None,
        "errors": [{"code": "invalid_state", "message": "Cannot pause campaign in draft state"}],
    }
    launched = await move(client, acme, "launchCampaign", campaign["id"])
    assert launched["campaign"]["status"] == "sending"
    assert launched["campaign"]["totalContactsCount"] == 2
    late = await graphql(
        client, UPDATE, {"id": campaign["id"], "input": {"name": "Late"}}, acme.headers
    )
    assert late["data"]["updateCampaign"]["errors"] == [
        {"code": "invalid_state", "message": "Cannot update campaign in sending state"}
    ]
    await jobs.drain()
    settled = (await graphql(client, GET, {"id": campaign["id"]}, acme.headers))["data"]["campaign"]
    assert (settled["status"], settled["sentCount"], settled["deliveredCount"]) == (
        "completed",
        2,
        2,
    )
    assert (settled["readCount"], settled["failedCount"]) == (1, 0)
    assert (await move(client, acme, "cancelCampaign", campaign["id"]))["errors"][0][
        "message"
    ] == "Cannot cancel campaign in completed state"
    listed = await graphql(
        client,
        "{ campaigns(statusFilter: COMPLETED, limit: 5)"
        " { total page limit hasMore items { id } } }",
        headers=acme.headers,
    )
    assert listed["data"]["campaigns"] == {
        "total": 1,
        "page": 1,
        "limit": 5,
        "hasMore": False,
        "items": [{"id": campaign["id"]}],
    }
    deleted = await graphql(client, DELETE, {"id": campaign["id"]}, acme.headers)
    assert deleted["data"]["deleteCampaign"] == {"deletedId": campaign["id"], "errors": []}


async def test_bad_input_and_other_tenants(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    result = await graphql(
        client,
        CREATE,
        {"input": create_input(channel, template, audienceType="manual")},
        acme.headers,
    )
    errors = result["data"]["createCampaign"]["errors"]
    assert errors[0]["code"] == "invalid_input"
    assert errors[0]["field"] == "audienceContactIds"
    result = await graphql(
        client,
        CREATE,
        {"input": create_input(channel, template, audienceType="everyone")},
        acme.headers,
    )
    assert result["data"]["createCampaign"]["errors"][0]["field"] == "audienceType"
    theirs = await graphql(
        client, CREATE, {"input": create_input(channel, template)}, globex.headers
    )
    assert theirs["data"]["createCampaign"]["errors"][0]["code"] == "channel_not_found"
    ours = await graphql(client, CREATE, {"input": create_input(channel, template)}, acme.headers)
    campaign_id = ours["data"]["createCampaign"]["campaign"]["id"]
    assert (await graphql(client, GET, {"id": campaign_id}, globex.headers))["data"] == {
        "campaign": None
    }
    refused = await move(client, globex, "launchCampaign", campaign_id)
    assert refused["errors"] == [{"code": "not_found", "message": "Campaign not found"}]


async def test_template_parameters_keys_are_the_templates_own_numbers(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    result = await graphql(
        client,
        CREATE,
        {"input": create_input(channel, template, templateParameters={"01": "A-1"})},
        acme.headers,
    )
    payload = result["data"]["createCampaign"]
    assert payload["campaign"] is None
    (error,) = payload["errors"]
    assert (error["code"], error["field"]) == ("value_error", "templateParameters")
    assert "no leading zero" in error["message"]


async def test_scope(client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory) -> None:
    narrow = await tenants.key(acme, ["agents:read"])
    result = await graphql(client, "{ campaigns { total } }", headers=narrow.headers)
    assert result["data"]["campaigns"] is None
    assert result["errors"][0]["extensions"]["code"] == "insufficient_scope"
    result = await graphql(
        client,
        'mutation { pauseCampaign(id: "x") { errors { code } } }',
        headers=narrow.headers,
    )
    assert result["errors"][0]["extensions"]["code"] == "insufficient_scope"
    manager = await tenants.key(acme, ["campaigns:manage"])
    result = await graphql(client, "{ campaigns { total } }", headers=manager.headers)
    assert result["data"]["campaigns"] == {"total": 0}
