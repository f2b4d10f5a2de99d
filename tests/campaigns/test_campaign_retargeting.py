"""Retargeting: POST /campaigns/{id}/recipients/tag and tagCampaignRecipients tag the contacts
whose ledger status matches; repeats change nothing; bad input, other tenants, scopes."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.models import Event
from tests.campaigns.conftest import (
    CAMPAIGNS,
    CONTACTS,
    Jobs,
    campaign_body,
    create_contact,
    launch_campaign,
)
from tests.conftest import Tenant, TenantFactory, graphql

# The simulator: …01 refused at send, …09 failed later, …10 delivered, others read.
NUMBERS = ["+15005550001", "+15005550009", "+15005550010", "+14155550100"]


async def sent_campaign(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
) -> tuple[str, dict[str, str]]:
    contacts = {}
    for n, phone in enumerate(NUMBERS):
        contacts[phone] = (await create_contact(client, acme, phone, f"P{n}", tags=["x"]))["id"]
    campaign_id: str = (await launch_campaign(client, acme, campaign_body(channel, template)))["id"]
    await jobs.drain()
    return campaign_id, contacts


async def tags_of(client: httpx.AsyncClient, tenant: Tenant, contact_id: str) -> list[str]:
    response = await client.get(f"{CONTACTS}/{contact_id}", headers=tenant.headers)
    tags: list[str] = response.json()["tags"]
    return tags


async def test_tags_contacts_whose_status_matches(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    campaign_id, contacts = await sent_campaign(client, acme, channel, template, jobs)
    url = f"{CAMPAIGNS}/{campaign_id}/recipients/tag"
    response = await client.post(
        url, json={"statuses": ["failed", "failed"], "tag": " retry "}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "campaign_id": campaign_id,
        "tag": "retry",
        "statuses": ["failed"],
        "matched_count": 2,
        "tagged_count": 2,
        "skipped_count": 0,
    }
    assert await tags_of(client, acme, contacts["+15005550001"]) == ["x", "retry"]
    assert await tags_of(client, acme, contacts["+15005550009"]) == ["x", "retry"]
    assert await tags_of(client, acme, contacts["+15005550010"]) == ["x"]
    assert await tags_of(client, acme, contacts["+14155550100"]) == ["x"]
    async with sessionmaker() as session:
        events = list(await session.scalars(select(Event).where(Event.type == "lead.updated")))
    assert sorted(event.data["id"] for event in events) == sorted(
        [contacts["+15005550001"], contacts["+15005550009"]]
    )
    # Filtering contacts by the new tag finds them.
    listed = await client.get(CONTACTS, params={"tag": "retry"}, headers=acme.headers)
    assert listed.json()["total_count"] == 2

    # Again, with more statuses: the tagged ones are matched, not changed.
    again = await client.post(
        url, json={"statuses": ["failed", "delivered"], "tag": "retry"}, headers=acme.headers
    )
    assert again.json()["matched_count"] == 3
    assert again.json()["tagged_count"] == 1
    assert await tags_of(client, acme, contacts["+15005550010"]) == ["x", "retry"]

    # A deleted contact is matched but skipped.
    await client.delete(f"{CONTACTS}/{contacts['+14155550100']}", headers=acme.headers)
    read = await client.post(url, json={"statuses": ["read"], "tag": "fans"}, headers=acme.headers)
    assert read.json()["matched_count"] == 1
    assert read.json()["tagged_count"] == 0
    assert read.json()["skipped_count"] == 1


async def test_bad_input_other_tenants_and_scopes(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
) -> None:
    campaign_id, _ = await sent_campaign(client, acme, channel, template, jobs)
    url = f"{CAMPAIGNS}/{campaign_id}/recipients/tag"
    for body in (
        {"statuses": [], "tag": "a"},
        {"statuses": ["bogus"], "tag": "a"},
        {"statuses": ["read"], "tag": "   "},
        {"statuses": ["read"], "tag": "t" * 101},
        {"tag": "a"},
        {"statuses": ["read"]},
    ):
        response = await client.post(url, json=body, headers=acme.headers)
        assert response.status_code == 422, body
    foreign = await client.post(
        url, json={"statuses": ["read"], "tag": "a"}, headers=globex.headers
    )
    assert foreign.status_code == 404
    assert foreign.json() == {"detail": "Campaign not found"}
    unknown = await client.post(
        f"{CAMPAIGNS}/not-a-uuid/recipients/tag",
        json={"statuses": ["read"], "tag": "a"},
        headers=acme.headers,
    )
    assert unknown.status_code == 404
    narrow = await tenants.key(acme, ["calls:read"])
    refused = await client.post(
        url, json={"statuses": ["read"], "tag": "a"}, headers=narrow.headers
    )
    assert refused.status_code == 403
    manager = await tenants.key(acme, ["campaigns:manage"])
    allowed = await client.post(
        url, json={"statuses": ["read"], "tag": "a"}, headers=manager.headers
    )
    assert allowed.status_code == 200


async def test_graphql_tags_recipients(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
) -> None:
    campaign_id, contacts = await sent_campaign(client, acme, channel, template, jobs)
    mutation = """
    mutation($id: ID!, $input: RecipientTaggingInput!) {
      tagCampaignRecipients(id: $id, input: $input) {
        tagging { campaignId tag statuses matchedCount taggedCount skippedCount }
        errors { code field }
      }
    }"""
    result = await graphql(
        client,
        mutation,
        {"id": campaign_id, "input": {"statuses": ["read"], "tag": "fans"}},
        acme.headers,
    )
    assert result["data"]["tagCampaignRecipients"]["tagging"] == {
        "campaignId": campaign_id,
        "tag": "fans",
        "statuses": ["read"],
        "matchedCount": 1,
        "taggedCount": 1,
        "skippedCount": 0,
    }
    assert await tags_of(client, acme, contacts["+14155550100"]) == ["x", "fans"]
    bad = await graphql(
        client,
        mutation,
        {"id": campaign_id, "input": {"statuses": ["x"], "tag": "a"}},
        acme.headers,
    )
    assert bad["data"]["tagCampaignRecipients"]["errors"][0]["field"].startswith("statuses")
    foreign = await graphql(
        client,
        mutation,
        {"id": campaign_id, "input": {"statuses": ["read"], "tag": "a"}},
        globex.headers,
    )
    assert foreign["data"]["tagCampaignRecipients"]["errors"] == [
        {"code": "not_found", "field": None}
    ]
