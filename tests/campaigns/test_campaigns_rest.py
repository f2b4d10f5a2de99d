"""Campaigns over REST: lifecycle, the documented transition table and its rejected moves,
audience rules, tenancy and scope, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from app.core.clock import utcnow
from tests.campaigns.conftest import (
    CAMPAIGNS,
    Jobs,
    campaign_body,
    create_contact,
    create_template,
)
from tests.conftest import Tenant, TenantFactory
from tests.templates.conftest import create_channel


async def create(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def move(
    client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, action: str
) -> httpx.Response:
    return await client.post(f"{CAMPAIGNS}/{campaign_id}/{action}", headers=tenant.headers)


async def test_create_is_a_draft_with_audience_lists_null_unless_their_type(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    created = await create(client, acme, campaign_body(channel, template))
    assert created["status"] == "draft"
    assert created["organization_id"] == acme.organization_id
    assert created["audience_type"] == "all"
    assert created["audience_tags"] is None
    assert created["audience_contact_ids"] is None
    assert created["scheduled_at"] is None
    assert [
        created[name]
        for name in (
            "total_contacts_count",
            "sent_count",
            "delivered_count",
            "read_count",
            "failed_count",
        )
    ] == [0, 0, 0, 0, 0]
    tagged = await create(
        client, acme, campaign_body(channel, template, audience_type="tags", audience_tags=["vip"])
    )
    assert tagged["audience_tags"] == ["vip"]
    assert tagged["audience_contact_ids"] is None
    fetched = await client.get(f"{CAMPAIGNS}/{created['id']}", headers=acme.headers)
    assert fetched.status_code == 200
    assert fetched.json() == created


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"audience_type": "all", "audience_tags": ["vip"]}, "audience_tags is only accepted"),
        ({"audience_type": "tags"}, "needs at least one audience tag"),
        ({"audience_type": "manual"}, "needs at least one contact id"),
        (
            {"audience_type": "tags", "audience_contact_ids": [], "audience_tags": ["a"]},
            "audience_contact_ids is only accepted",
        ),
    ],
)
async def test_audience_fields_must_match_their_type(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    fields: dict[str, Any],
    detail: str,
) -> None:
    response = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template, **fields), headers=acme.headers
    )
    assert response.status_code == 400, response.text
    assert detail in response.json()["detail"]


async def test_create_refuses_other_organizations_channel_template_and_contacts(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    theirs = await create_contact(client, globex, "+14155550999", "Not yours")
    ours = await create_contact(client, acme, "+14155550100", "Ada")
    response = await client.post(
        CAMPAIGNS,
        json=campaign_body(
            channel,
            template,
            audience_type="manual",
            audience_contact_ids=[ours["id"], theirs["id"]],
        ),
        headers=acme.headers,
    )
    assert response.status_code == 400
    assert theirs["id"] in response.json()["detail"]
    # Globex cannot use Acme's channel or template.
    response = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=globex.headers
    )
    assert response.status_code == 400
    assert response.json()["detail"] == "Channel/phone number not found"
    their_channel = await create_channel(client, globex, "999000111")
    response = await client.post(
        CAMPAIGNS, json=campaign_body(their_channel, template), headers=globex.headers
    )
    assert response.status_code == 400
    assert response.json()["detail"] == "Message template not found"
    # A template parameter naming something that is not a contact field is bad input.
    response = await client.post(
        CAMPAIGNS,
        json=campaign_body(channel, template, template_parameters={"1": "{{contact.email}}"}),
        headers=acme.headers,
    )
    assert response.status_code == 422


async def test_unknown_and_other_organizations_campaigns_are_not_found(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    created = await create(client, acme, campaign_body(channel, template))
    for path in (f"{CAMPAIGNS}/{created['id']}", f"{CAMPAIGNS}/not-a-uuid"):
        response = await client.get(path, headers=globex.headers)
        assert response.status_code == 404
        assert response.json() == {"detail": "Campaign not found"}
    for action in ("launch", "pause", "resume", "cancel"):
        response = await move(client, globex, created["id"], action)
        assert response.status_code == 404
    response = await client.put(
        f"{CAMPAIGNS}/{created['id']}", json={"name": "x"}, headers=globex.headers
    )
    assert response.status_code == 404
    response = await client.delete(f"{CAMPAIGNS}/{created['id']}", headers=globex.headers)
    assert response.status_code == 404
    listed = await client.get(CAMPAIGNS, headers=globex.headers)
    assert listed.json()["total"] == 0


async def test_every_campaign_endpoint_needs_campaigns_manage(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    created = await create(client, acme, campaign_body(channel, template))
    reader = await tenants.key(acme, ["agents:read", "webhooks:admin"])
    calls = [
        client.post(CAMPAIGNS, json=campaign_body(channel, template), headers=reader.headers),
        client.get(CAMPAIGNS, headers=reader.headers),
        client.get(f"{CAMPAIGNS}/{created['id']}", headers=reader.headers),
        client.put(f"{CAMPAIGNS}/{created['id']}", json={"name": "x"}, headers=reader.headers),
        client.delete(f"{CAMPAIGNS}/{created['id']}", headers=reader.headers),
        *(move(client, reader, created["id"], action) for action in ("launch", "pause")),
    ]
    for call in calls:
        response = await call
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "insufficient_scope"
    manager = await tenants.key(acme, ["campaigns:manage"])
    response = await client.get(f"{CAMPAIGNS}/{created['id']}", headers=manager.headers)
    assert response.status_code == 200


async def test_list_is_envelope_a_with_status_filter_and_bounds(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    ids = [
        (await create(client, acme, campaign_body(channel, template, name=f"c{n}")))["id"]
        for n in range(3)
    ]
    assert (await move(client, acme, ids[0], "launch")).status_code == 200
    page = (await client.get(CAMPAIGNS, params={"limit": 2}, headers=acme.headers)).json()
    assert set(page) == {"has_more", "total", "page", "limit", "items"}
    assert (page["total"], page["page"], page["limit"], page["has_more"]) == (3, 1, 2, True)
    assert [item["id"] for item in page["items"]] == [ids[2], ids[1]]
    second = (
        await client.get(CAMPAIGNS, params={"limit": 2, "page": 2}, headers=acme.headers)
    ).json()
    assert [item["id"] for item in second["items"]] == [ids[0]]
    assert second["has_more"] is False
    drafts = (
        await client.get(CAMPAIGNS, params={"status_filter": "draft"}, headers=acme.headers)
    ).json()
    assert drafts["total"] == 2
    assert {item["status"] for item in drafts["items"]} == {"draft"}
    sending = (
        await client.get(CAMPAIGNS, params={"status_filter": "sending"}, headers=acme.headers)
    ).json()
    assert [item["id"] for item in sending["items"]] == [ids[0]]
    for params in ({"limit": 0}, {"limit": 101}, {"page": 0}, {"status_filter": "done"}):
        response = await client.get(CAMPAIGNS, params=params, headers=acme.headers)
        assert response.status_code == 422, params


async def test_update_only_a_draft_and_delete_per_state(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    contact = await create_contact(client, acme, "+14155550100", "Ada", tags=["vip"])
    created = await create(client, acme, campaign_body(channel, template))
    response = await client.put(
        f"{CAMPAIGNS}/{created['id']}",
        json={
            "name": "Renamed",
            "audience_type": "manual",
            "audience_contact_ids": [contact["id"]],
        },
        headers=acme.headers,
    )
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "Renamed"
    assert response.json()["audience_contact_ids"] == [contact["id"]]
    # Switching type drops the other type's list.
    response = await client.put(
        f"{CAMPAIGNS}/{created['id']}",
        json={"audience_type": "tags", "audience_tags": ["vip"]},
        headers=acme.headers,
    )
    assert response.json()["audience_contact_ids"] is None
    assert response.json()["audience_tags"] == ["vip"]
    launched = await move(client, acme, created["id"], "launch")
    assert launched.json()["status"] == "sending"
    response = await client.put(
        f"{CAMPAIGNS}/{created['id']}", json={"name": "Late"}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "Cannot update campaign in sending state"}
    response = await client.delete(f"{CAMPAIGNS}/{created['id']}", headers=acme.headers)
    assert response.status_code == 400
    assert response.json()["detail"].startswith("Cannot delete campaign in sending state")
    assert (await move(client, acme, created["id"], "cancel")).json()["status"] == "cancelled"
    assert (
        await client.delete(f"{CAMPAIGNS}/{created['id']}", headers=acme.headers)
    ).status_code == 204
    draft = await create(client, acme, campaign_body(channel, template))
    assert (
        await client.delete(f"{CAMPAIGNS}/{draft['id']}", headers=acme.headers)
    ).status_code == 204
    assert (await client.get(f"{CAMPAIGNS}/{draft['id']}", headers=acme.headers)).status_code == 404


async def test_launch_needs_an_approved_template(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    rejected = await create_template(
        client,
        acme,
        channel["id"],
        jobs,
        name="broken",
        components=[{"type": "BODY", "text": "Hi {{2}}", "example": {"body_text": [["a"]]}}],
    )
    assert rejected["status"] == "REJECTED"
    created = await create(client, acme, campaign_body(channel, rejected))
    response = await move(client, acme, created["id"], "launch")
    assert response.status_code == 400
    assert "REJECTED" in response.json()["detail"]
    assert (await client.get(f"{CAMPAIGNS}/{created['id']}", headers=acme.headers)).json()[
        "status"
    ] == "draft"


async def test_launch_resolves_each_audience_type(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    ada = await create_contact(client, acme, "+14155550100", "Ada", tags=["vip", "eu"])
    await create_contact(client, acme, "+14155550101", "Bob", tags=["us"])
    cy = await create_contact(client, acme, "+14155550102", "Cy", tags=["eu"])
    await create_contact(client, globex, "+14155550103", "Other org", tags=["vip"])
    everyone = await create(client, acme, campaign_body(channel, template))
    tagged = await create(
        client,
        acme,
        campaign_body(channel, template, audience_type="tags", audience_tags=["vip", "eu"]),
    )
    manual = await create(
        client,
        acme,
        campaign_body(
            channel, template, audience_type="manual", audience_contact_ids=[ada["id"], cy["id"]]
        ),
    )
    counts = []
    for campaign in (everyone, tagged, manual):
        launched = await move(client, acme, campaign["id"], "launch")
        assert launched.status_code == 200, launched.text
        assert launched.json()["status"] == "sending"
        counts.append(launched.json()["total_contacts_count"])
    assert counts == [3, 2, 2]


async def test_seed_transition_table_and_rejected_moves(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    created = await create(client, acme, campaign_body(channel, template))
    campaign_id = created["id"]

    async def refused(action: str, state: str) -> None:
        response = await move(client, acme, campaign_id, action)
        assert response.status_code == 400, response.text
        assert response.json() == {"detail": f"Cannot {action} campaign in {state} state"}

    for action in ("pause", "resume", "cancel"):
        await refused(action, "draft")
    assert (await move(client, acme, campaign_id, "launch")).json()["status"] == "sending"
    await refused("launch", "sending")
    await refused("resume", "sending")
    assert (await move(client, acme, campaign_id, "pause")).json()["status"] == "paused"
    await refused("pause", "paused")
    # An immediate campaign resumes into sending.
    assert (await move(client, acme, campaign_id, "resume")).json()["status"] == "sending"
    assert (await move(client, acme, campaign_id, "pause")).json()["status"] == "paused"
    assert (await move(client, acme, campaign_id, "cancel")).json()["status"] == "cancelled"
    for action in ("pause", "resume", "cancel", "launch"):
        await refused(action, "cancelled")


async def test_scheduled_campaign_pause_resume_and_cancel(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    await create_contact(client, acme, "+14155550100", "Ada")
    later = utcnow() + timedelta(hours=1)
    created = await create(
        client, acme, campaign_body(channel, template, scheduled_at=later.isoformat())
    )
    launched = (await move(client, acme, created["id"], "launch")).json()
    assert launched["status"] == "scheduled"
    assert launched["total_contacts_count"] == 1
    assert (await move(client, acme, created["id"], "pause")).json()["status"] == "paused"
    # scheduled_at still in the future: back to scheduled.
    assert (await move(client, acme, created["id"], "resume")).json()["status"] == "scheduled"
    assert (await move(client, acme, created["id"], "cancel")).json()["status"] == "cancelled"


async def test_scheduled_at_without_offset_is_utc_and_a_deleted_manual_contact_is_skipped(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], template: dict[str, Any]
) -> None:
    ada = await create_contact(client, acme, "+14155550100", "Ada")
    bob = await create_contact(client, acme, "+14155550101", "Bob")
    later = (utcnow() + timedelta(hours=2)).replace(tzinfo=None, microsecond=0)
    created = await create(
        client,
        acme,
        campaign_body(
            channel,
            template,
            audience_type="manual",
            audience_contact_ids=[ada["id"], bob["id"]],
            scheduled_at=later.isoformat(),
        ),
    )
    assert created["scheduled_at"].startswith(later.isoformat())
    assert created["scheduled_at"].endswith(("+00:00", "Z"))
    deleted = await client.delete(f"/api/v1/contacts/{bob['id']}", headers=acme.headers)
    assert deleted.status_code == 204
    launched = await move(client, acme, created["id"], "launch")
    assert launched.status_code == 200, launched.text
    assert (launched.json()["status"], launched.json()["total_contacts_count"]) == (
        "scheduled",
        1,
    )


@pytest.mark.parametrize("key", ["01", "001", "0", "+1", "1 ", "\uff11"])
async def test_template_parameters_take_the_templates_own_variable_numbers(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    key: str,
) -> None:
    """`"01"` never fills `{{1}}` (every recipient would fail): refused at create and update."""
    message = (
        "Value error, parameter names are positional variable numbers as the template writes"
        f" them (1, 2…, no leading zero), not {key!r}"
    )
    refused = await client.post(
        CAMPAIGNS,
        json=campaign_body(channel, template, template_parameters={key: "{{contact.name}}"}),
        headers=acme.headers,
    )
    assert refused.status_code == 422
    assert refused.json() == {
        "detail": [{"loc": ["body", "template_parameters"], "msg": message, "type": "value_error"}]
    }
    draft = await create(client, acme, campaign_body(channel, template))
    updated = await client.put(
        f"{CAMPAIGNS}/{draft['id']}",
        json={"template_parameters": {key: "A-1"}},
        headers=acme.headers,
    )
    assert updated.status_code == 422
    assert updated.json()["detail"][0]["loc"] == ["body", "template_parameters"]
    fine = await client.put(
        f"{CAMPAIGNS}/{draft['id']}",
        json={"template_parameters": {"1": "A-1", "10": "x"}},
        headers=acme.headers,
    )
    assert fine.status_code == 200
    assert fine.json()["template_parameters"] == {"1": "A-1", "10": "x"}
