"""Templates over GraphQL: the same service operations, typed errors in payloads."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Tenant, TenantFactory, graphql
from tests.templates.conftest import VALID_BODY, Jobs

FIELDS = (
    "id accountId channelId platformTemplateId name language category status components"
    " qualityScore rejectedReason submissionError"
)
CREATE = f"""
mutation($input: TemplateCreateInput!) {{
  createTemplate(input: $input) {{ template {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


def create_input(channel_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "channelId": channel_id,
        "name": "order_shipped",
        "language": "en_US",
        "category": "UTILITY",
        "components": [VALID_BODY],
        **fields,
    }


async def test_create_get_list_and_settle(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    result = await graphql(client, CREATE, {"input": create_input(channel["id"])}, acme.headers)
    payload = result["data"]["createTemplate"]
    assert payload["errors"] == []
    template = payload["template"]
    assert (template["status"], template["platformTemplateId"], template["qualityScore"]) == (
        "PENDING",
        None,
        "",
    )
    await jobs.drain()
    fetched = await graphql(
        client,
        f"query($id: ID!) {{ messageTemplate(id: $id) {{ {FIELDS} }} }}",
        {"id": template["id"]},
        acme.headers,
    )
    settled = fetched["data"]["messageTemplate"]
    assert (settled["status"], settled["qualityScore"]) == ("APPROVED", "GREEN")
    listed = await graphql(
        client,
        "{ messageTemplates(limit: 10) { total page limit hasMore items { id } } }",
        headers=acme.headers,
    )
    assert listed["data"]["messageTemplates"] == {
        "total": 1,
        "page": 1,
        "limit": 10,
        "hasMore": False,
        "items": [{"id": template["id"]}],
    }


async def test_typed_errors(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, channel: dict[str, Any]
) -> None:
    unknown = await graphql(client, CREATE, {"input": create_input(UNKNOWN_ID)}, acme.headers)
    assert unknown["data"]["createTemplate"]["errors"] == [
        {
            "code": "channel_not_found",
            "message": "Channel/phone number not found",
            "field": "channelId",
        }
    ]
    bad = await graphql(
        client, CREATE, {"input": create_input(channel["id"], name="Bad Name")}, acme.headers
    )
    (error,) = bad["data"]["createTemplate"]["errors"]
    assert (error["code"], error["field"]) == ("string_pattern_mismatch", "name")
    await graphql(client, CREATE, {"input": create_input(channel["id"])}, acme.headers)
    duplicate = await graphql(client, CREATE, {"input": create_input(channel["id"])}, acme.headers)
    assert duplicate["data"]["createTemplate"]["errors"][0]["code"] == "conflict"
    other = await graphql(
        client,
        "query($id: ID!) { messageTemplate(id: $id) { id } }",
        {"id": UNKNOWN_ID},
        globex.headers,
    )
    assert other["data"]["messageTemplate"] is None


async def test_validate_sync_library_and_delete(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    validated = await graphql(
        client,
        """mutation($input: TemplateContentInput!) {
          validateTemplate(input: $input) { valid violations { rule message } errors { code } }
        }""",
        {
            "input": {
                "name": "x",
                "language": "en_US",
                "category": "MARKETING",
                "components": [{"type": "BODY", "text": "y" * 1100}],
            }
        },
        acme.headers,
    )
    result = validated["data"]["validateTemplate"]
    assert result["valid"] is False
    assert [v["rule"] for v in result["violations"]] == ["body_too_long"]

    library = await graphql(
        client,
        """query($channel: ID!) {
          templateLibrary(channelId: $channel, topic: "Payments", language: "en_US") {
            name category body bodyParams
          }
        }""",
        {"channel": channel["id"]},
        acme.headers,
    )
    names = {entry["name"] for entry in library["data"]["templateLibrary"]}
    assert names == {"payment_reminder", "payment_received", "payment_failed"}
    refused = await graphql(
        client,
        "query($channel: ID!) { templateLibrary(channelId: $channel) { name } }",
        {"channel": UNKNOWN_ID},
        acme.headers,
    )
    assert refused["errors"][0]["extensions"]["code"] == "access_token_unavailable"

    created = await graphql(
        client,
        """mutation($input: TemplateFromLibraryInput!) {
          createTemplateFromLibrary(libraryTemplateId: "payment_failed", input: $input) {
            template { id status category } errors { code }
          }
        }""",
        {"input": {"channelId": channel["id"], "name": "card_declined"}},
        acme.headers,
    )
    template = created["data"]["createTemplateFromLibrary"]["template"]
    assert (template["status"], template["category"]) == ("PENDING", "UTILITY")
    await jobs.drain()
    synced = await graphql(
        client,
        """mutation($input: TemplateSyncInput!) {
          syncTemplates(input: $input) { success message syncedCount errors { code } }
        }""",
        {"input": {"channelId": channel["id"]}},
        acme.headers,
    )
    assert synced["data"]["syncTemplates"]["success"] is True
    assert synced["data"]["syncTemplates"]["syncedCount"] == 1
    deleted = await graphql(
        client,
        "mutation($id: ID!) { deleteTemplate(id: $id) { deletedId errors { code } } }",
        {"id": template["id"]},
        acme.headers,
    )
    assert deleted["data"]["deleteTemplate"] == {"deletedId": template["id"], "errors": []}


async def test_scope(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, channel: dict[str, Any]
) -> None:
    narrow = await tenants.key(acme, ["agents:read"])
    result = await graphql(client, "{ messageTemplates { total } }", headers=narrow.headers)
    assert result["data"]["messageTemplates"] is None
    assert result["errors"][0]["extensions"]["code"] == "insufficient_scope"
    created = await graphql(client, CREATE, {"input": create_input(channel["id"])}, narrow.headers)
    assert created["data"]["createTemplate"] is None
