"""Templates over REST: the documented shapes and error rows, and the simulator's
review (docs/api.md, Test mode) through the submission job and the signed status callbacks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.models import Event
from app.integrations.whatsapp.simulator_models import SimulatedTemplate
from app.kit.outbox_models import OutboxJob
from tests.conftest import Tenant, TenantFactory
from tests.integrations.whatsapp.fake_graph import FakeGraph
from tests.templates.conftest import (
    TEMPLATES,
    VALID_BODY,
    WABA,
    Jobs,
    create_channel,
    template_body,
)

FIELDS = {
    "id",
    "account_id",
    "channel_id",
    "business_account_id",
    "platform_template_id",
    "name",
    "language",
    "category",
    "status",
    "components",
    "quality_score",
    "rejected_reason",
    "submission_error",
    "platform_status",
    "previous_category",
    "category_updated_at",
    "created_at",
    "updated_at",
}
CHANNEL_NOT_FOUND = {"detail": "Channel/phone number not found"}
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"

# Globex registers a number of its own (a number belongs to one organization).
GLOBEX_NUMBER = "106540352249999"


async def create(
    client: httpx.AsyncClient, tenant: Tenant, channel_id: str, **fields: Any
) -> dict[str, Any]:
    response = await client.post(
        TEMPLATES, json=template_body(channel_id, **fields), headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def fetch(client: httpx.AsyncClient, tenant: Tenant, template_id: str) -> dict[str, Any]:
    response = await client.get(f"{TEMPLATES}/{template_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_create_stores_pending_and_schedules_submission(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    template = await create(client, acme, channel["id"])
    assert set(template) == FIELDS
    assert template["status"] == "PENDING"
    assert template["platform_template_id"] is None
    assert template["quality_score"] == ""
    assert template["account_id"] == acme.organization_id
    assert template["channel_id"] == channel["id"]
    assert template["business_account_id"] == WABA
    assert template["components"] == [VALID_BODY]
    async with sessionmaker() as session:
        scheduled = await session.scalar(
            select(func.count()).where(OutboxJob.actor == "templates.submit")
        )
    assert scheduled == 1
    assert await fetch(client, acme, template["id"]) == template


async def test_valid_template_is_approved_green_with_a_platform_id(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    template = await create(client, acme, channel["id"])
    ran = await jobs.drain()
    # Submission, then the simulator's two signed callbacks (status, quality).
    assert ran == ["templates.submit", "whatsapp.callback", "whatsapp.callback"]
    settled = await fetch(client, acme, template["id"])
    assert settled["status"] == "APPROVED"
    assert settled["quality_score"] == "GREEN"
    assert settled["platform_template_id"]
    assert settled["platform_template_id"].isdigit()
    assert settled["rejected_reason"] is None
    assert settled["submission_error"] is None


@pytest.mark.parametrize(
    ("components", "rule"),
    [
        (
            [
                {
                    "type": "BODY",
                    "text": "Hi {{1}}, code {{3}}",
                    "example": {"body_text": [["a", "b"]]},
                }
            ],
            "variables_out_of_order",
        ),
        ([{"type": "BODY", "text": "x" * 1100}], "body_too_long"),
        ([{"type": "HEADER", "format": "TEXT", "text": "Hello"}], "body_required"),
        ([{"type": "BODY", "text": "Hi {{1}}"}], "variable_examples_missing"),
        ([VALID_BODY, {"type": "FOOTER", "text": "f" * 61}], "footer_too_long"),
        (
            [
                VALID_BODY,
                {
                    "type": "BUTTONS",
                    "buttons": [
                        {"type": "QUICK_REPLY", "text": "Yes"},
                        {"type": "URL", "text": "Site", "url": "https://example.com"},
                        {"type": "QUICK_REPLY", "text": "No"},
                    ],
                },
            ],
            "quick_replies_not_grouped",
        ),
    ],
)
async def test_rule_breaking_template_is_rejected_without_an_upstream_call(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
    components: list[dict[str, Any]],
    rule: str,
) -> None:
    template = await create(client, acme, channel["id"], components=components)
    assert template["status"] == "PENDING"
    assert await jobs.drain() == ["templates.submit"]  # no callback: nothing went upstream
    settled = await fetch(client, acme, template["id"])
    assert settled["status"] == "REJECTED"
    assert rule in settled["rejected_reason"]
    assert settled["platform_template_id"] is None
    async with sessionmaker() as session:
        assert await session.scalar(select(func.count()).select_from(SimulatedTemplate)) == 0
        events = await session.scalars(select(Event.type).where(Event.type.like("template.%")))
        assert list(events) == ["template.status_updated"]


async def test_authentication_rules(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    template = await create(
        client,
        acme,
        channel["id"],
        name="login_code",
        category="AUTHENTICATION",
        components=[
            {
                "type": "BODY",
                "text": "Code {{1}} at https://x.example {{2}}",
                "example": {"body_text": [["1", "2"]]},
            },
            {
                "type": "BUTTONS",
                "buttons": [{"type": "URL", "text": "Go", "url": "https://x.example"}],
            },
        ],
    )
    await jobs.drain()
    reason = (await fetch(client, acme, template["id"]))["rejected_reason"]
    for rule in ("authentication_code_variable", "authentication_urls", "authentication_buttons"):
        assert rule in reason


async def test_unknown_or_foreign_channel_is_the_seeds_400(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    foreign = await create_channel(client, globex, GLOBEX_NUMBER)
    for channel_id in (UNKNOWN_ID, foreign["id"]):
        response = await client.post(
            TEMPLATES, json=template_body(channel_id), headers=acme.headers
        )
        assert response.status_code == 400
        assert response.json() == CHANNEL_NOT_FOUND
        response = await client.post(
            f"{TEMPLATES}/sync", json={"channel_id": channel_id}, headers=acme.headers
        )
        assert response.status_code == 400
        assert response.json() == CHANNEL_NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "location"),
    [
        ({"name": "Order Shipped"}, ["body", "name"]),
        ({"name": "x" * 256}, ["body", "name"]),
        ({"name": ""}, ["body", "name"]),
        ({"category": "PROMO"}, ["body", "category"]),
        ({"components": {"type": "BODY"}}, ["body", "components"]),
        ({"components": [{"text": "no type"}]}, ["body", "components", 0, "type"]),
        ({"channel_id": "not-a-uuid"}, ["body", "channel_id"]),
        ({"language": None}, ["body", "language"]),
    ],
)
async def test_bad_fields_answer_422(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    fields: dict[str, Any],
    location: list[Any],
) -> None:
    response = await client.post(
        TEMPLATES, json={**template_body(channel["id"]), **fields}, headers=acme.headers
    )
    assert response.status_code == 422, response.text
    assert location in [error["loc"] for error in response.json()["detail"]]


async def test_missing_fields_answer_422(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(TEMPLATES, json={}, headers=acme.headers)
    assert response.status_code == 422
    missing = {tuple(e["loc"]) for e in response.json()["detail"] if e["type"] == "missing"}
    assert missing == {
        ("body", field) for field in ("channel_id", "name", "language", "category", "components")
    }


async def test_duplicate_name_and_language_is_409(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    await create(client, acme, channel["id"])
    response = await client.post(TEMPLATES, json=template_body(channel["id"]), headers=acme.headers)
    assert response.status_code == 409
    await create(client, acme, channel["id"], language="es_ES")  # another language is fine


async def test_list_is_envelope_a_newest_first(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, channel: dict[str, Any]
) -> None:
    names = [f"template_{index}" for index in range(3)]
    for name in names:
        await create(client, acme, channel["id"], name=name)
    other = await create_channel(client, globex, GLOBEX_NUMBER)
    await create(client, globex, other["id"], name="globex_only")
    response = await client.get(TEMPLATES, params={"limit": 2}, headers=acme.headers)
    assert response.status_code == 200
    page = response.json()
    assert set(page) == {"has_more", "total", "page", "limit", "items"}
    assert (page["has_more"], page["total"], page["page"], page["limit"]) == (True, 3, 1, 2)
    assert [t["name"] for t in page["items"]] == ["template_2", "template_1"]
    second = (
        await client.get(TEMPLATES, params={"limit": 2, "page": 2}, headers=acme.headers)
    ).json()
    assert [t["name"] for t in second["items"]] == ["template_0"]
    assert second["has_more"] is False
    for bad in ({"limit": 0}, {"limit": 101}, {"page": 0}):
        assert (await client.get(TEMPLATES, params=bad, headers=acme.headers)).status_code == 422


async def test_get_and_delete_other_tenants_template_is_404(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, channel: dict[str, Any]
) -> None:
    template = await create(client, acme, channel["id"])
    for method in ("GET", "DELETE"):
        for template_id in (template["id"], UNKNOWN_ID, "nope"):
            response = await client.request(
                method, f"{TEMPLATES}/{template_id}", headers=globex.headers
            )
            assert response.status_code == 404
            assert response.json() == {"detail": "Template not found"}
    await fetch(client, acme, template["id"])


async def test_delete_removes_it_here_and_upstream(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    template = await create(client, acme, channel["id"])
    await jobs.drain()
    response = await client.delete(f"{TEMPLATES}/{template['id']}", headers=acme.headers)
    assert response.status_code == 204
    assert (
        await client.get(f"{TEMPLATES}/{template['id']}", headers=acme.headers)
    ).status_code == 404
    async with sessionmaker() as session:
        assert await session.scalar(select(func.count()).select_from(SimulatedTemplate)) == 0


async def test_sync_upserts_everything_the_business_account_holds(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    mine = await create(client, acme, channel["id"])
    await jobs.drain()
    async with sessionmaker() as session:
        # Made upstream by other means; and the approved one's quality dropped meanwhile.
        session.add(
            SimulatedTemplate(
                id="5550001",
                business_account_id=WABA,
                name="made_elsewhere",
                language="en_US",
                category="MARKETING",
                components=[{"type": "BODY", "text": "Sale!"}],
                status="APPROVED",
                quality_score="YELLOW",
            )
        )
        upstream = await session.scalar(select(SimulatedTemplate))
        assert upstream is not None
        upstream.quality_score = "RED"
        await session.commit()
    response = await client.post(
        f"{TEMPLATES}/sync", json={"channel_id": channel["id"]}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["success"] is True
    assert result["synced_count"] == 2
    assert isinstance(result["message"], str)
    listed = (await client.get(TEMPLATES, headers=acme.headers)).json()["items"]
    by_name = {t["name"]: t for t in listed}
    assert set(by_name) == {"order_shipped", "made_elsewhere"}
    assert by_name["order_shipped"]["id"] == mine["id"]  # upserted, not duplicated
    assert by_name["order_shipped"]["quality_score"] == "RED"
    made = by_name["made_elsewhere"]
    assert (made["status"], made["quality_score"], made["platform_template_id"]) == (
        "APPROVED",
        "YELLOW",
        "5550001",
    )
    # A second sync changes nothing and creates nothing.
    again = await client.post(
        f"{TEMPLATES}/sync", json={"channel_id": channel["id"]}, headers=acme.headers
    )
    assert again.json()["synced_count"] == 2
    assert (await client.get(TEMPLATES, headers=acme.headers)).json()["total"] == 2


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"name": "payment_reminder"}, {"payment_reminder"}),
        ({"topic": "Payments"}, {"payment_reminder", "payment_received", "payment_failed"}),
        ({"usecase": "Welcome offer", "language": "es_ES"}, {"oferta_de_bienvenida"}),
        (
            {"industry": "Healthcare", "language": "en_US"},
            {"appointment_reminder", "appointment_confirmation"},
        ),
        ({"search": "cart"}, {"abandoned_cart"}),
        ({"search": "nothing-like-this"}, set()),
    ],
)
async def test_library_filters(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    query: dict[str, str],
    expected: set[str],
) -> None:
    response = await client.get(
        f"{TEMPLATES}/library", params={"channel_id": channel["id"], **query}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert {entry["name"] for entry in data} == expected
    for entry in data:
        assert set(entry) == {
            "id",
            "name",
            "language",
            "category",
            "topic",
            "usecase",
            "industry",
            "header",
            "body",
            "body_params",
            "buttons",
        }


async def test_library_catalog_spans_marketing_and_utility(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    response = await client.get(
        f"{TEMPLATES}/library", params={"channel_id": channel["id"]}, headers=acme.headers
    )
    data = response.json()["data"]
    assert len(data) >= 20
    assert {entry["category"] for entry in data} == {"MARKETING", "UTILITY"}
    assert len({entry["language"] for entry in data}) >= 3


async def test_library_without_an_access_token_is_400(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    foreign = await create_channel(client, globex, GLOBEX_NUMBER)
    for channel_id in (UNKNOWN_ID, foreign["id"]):
        response = await client.get(
            f"{TEMPLATES}/library", params={"channel_id": channel_id}, headers=acme.headers
        )
        assert response.status_code == 400
        assert "access token" in response.json()["detail"]
    response = await client.get(f"{TEMPLATES}/library", headers=acme.headers)
    assert response.status_code == 422


async def test_create_from_library(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    response = await client.post(
        f"{TEMPLATES}/library/payment_reminder/create",
        json={
            "channel_id": channel["id"],
            "name": "my_reminder",
            "body_params": ["Ada", "$10", "May 1"],
        },
        headers=acme.headers,
    )
    assert response.status_code == 201, response.text
    template = response.json()
    assert (template["status"], template["category"], template["language"]) == (
        "PENDING",
        "UTILITY",
        "en_US",
    )
    (body,) = [c for c in template["components"] if c["type"] == "BODY"]
    assert body["example"] == {"body_text": [["Ada", "$10", "May 1"]]}
    await jobs.drain()
    assert (await fetch(client, acme, template["id"]))["status"] == "APPROVED"
    missing = await client.post(
        f"{TEMPLATES}/library/no_such_entry/create",
        json={"channel_id": channel["id"], "name": "x"},
        headers=acme.headers,
    )
    assert missing.status_code == 404


async def test_validate_is_a_dry_run(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    body = template_body(UNKNOWN_ID)
    del body["channel_id"]
    ok = await client.post(f"{TEMPLATES}/validate", json=body, headers=acme.headers)
    assert ok.status_code == 200
    assert ok.json() == {"valid": True, "violations": []}
    body["components"] = [{"type": "BODY", "text": "Hi {{2}}"}]
    bad = await client.post(f"{TEMPLATES}/validate", json=body, headers=acme.headers)
    result = bad.json()
    assert result["valid"] is False
    assert {v["rule"] for v in result["violations"]} == {
        "variables_out_of_order",
        "variable_examples_missing",
    }
    async with sessionmaker() as session:
        assert await session.scalar(select(func.count()).select_from(OutboxJob)) == 0
    invalid = await client.post(f"{TEMPLATES}/validate", json={}, headers=acme.headers)
    assert invalid.status_code == 422


async def test_scope_is_full_access(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, channel: dict[str, Any]
) -> None:
    narrow = await tenants.key(acme, ["agents:read", "campaigns:manage", "webhooks:admin"])
    for method, path in (
        ("GET", TEMPLATES),
        ("POST", TEMPLATES),
        ("POST", f"{TEMPLATES}/sync"),
        ("GET", f"{TEMPLATES}/library"),
        ("POST", f"{TEMPLATES}/validate"),
    ):
        response = await client.request(method, path, headers=narrow.headers, json={})
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["code"] == "insufficient_scope"
    assert (await client.get(TEMPLATES)).status_code == 401


async def test_test_key_cannot_touch_a_live_template(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, platform: FakeGraph
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    channel = await create_channel(client, live, phone_number_id="999", platform=platform)
    assert channel["livemode"] is True
    template = await create(client, live, channel["id"])
    response = await client.get(f"{TEMPLATES}/{template['id']}", headers=acme.headers)
    assert response.status_code == 403
    assert (await client.get(TEMPLATES, headers=acme.headers)).json()["total"] == 0
    assert (await client.get(TEMPLATES, headers=live.headers)).json()["total"] == 1
