"""Webhook subscriptions over REST: the documented shapes and errors, SSRF, isolation, paging.

The sandbox has no DNS, so valid URLs here use public IP literals (the guard judges a literal
without a lookup); names that must resolve are covered in test_subscriptions_service.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.models import Event
from app.events.types import SUBSCRIBABLE_EVENTS
from app.main import create_app
from app.resources import Resources
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription
from app.webhooks.ssrf import FORBIDDEN_ADDRESS_MESSAGE
from tests.conftest import Tenant, TenantFactory, make_settings

BASE = "/api/v1/webhooks"
PUBLIC_URL = "https://93.184.216.34/hooks"
SHAPE = {
    "id",
    "disabled_reason",
    "organization_id",
    "url",
    "secret",
    "events",
    "is_active",
    "created_at",
    "updated_at",
}
ALLOWED = ", ".join(SUBSCRIBABLE_EVENTS)
SCHEME_ERROR = {"detail": "URL must start with http:// or https://"}
NOT_FOUND = {"detail": "Webhook not found"}


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    body = {"url": PUBLIC_URL, "events": ["lead.created"], **fields}
    response = await client.post(BASE, json=body, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_create_returns_subscription_shape(client: httpx.AsyncClient, acme: Tenant) -> None:
    webhook = await create(
        client,
        acme,
        url="  https://93.184.216.34:8443/in  ",
        events=["lead.created", "call.started"],
    )
    assert set(webhook) == SHAPE
    assert webhook["organization_id"] == acme.organization_id
    assert webhook["url"] == "https://93.184.216.34:8443/in"
    assert webhook["events"] == ["lead.created", "call.started"]
    assert webhook["is_active"] is True
    assert webhook["secret"].startswith("whsec_")
    assert webhook["created_at"].endswith("Z")
    assert webhook["created_at"] == webhook["updated_at"]
    other = await create(client, acme)
    assert other["secret"] != webhook["secret"]


async def test_repeated_events_are_stored_once(client: httpx.AsyncClient, acme: Tenant) -> None:
    webhook = await create(client, acme, events=["lead.updated", "lead.created", "lead.updated"])
    assert webhook["events"] == ["lead.updated", "lead.created"]


@pytest.mark.parametrize(
    "url", ["ftp://93.184.216.34/x", "93.184.216.34/x", "", "   ", "javascript:alert(1)", "http:/x"]
)
async def test_bad_scheme_is_400(client: httpx.AsyncClient, acme: Tenant, url: str) -> None:
    response = await client.post(
        BASE, json={"url": url, "events": ["lead.created"]}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == SCHEME_ERROR


async def test_bad_events_are_400_naming_them_and_the_allowed_ones(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.post(
        BASE,
        json={"url": PUBLIC_URL, "events": ["lead.created", "lead.deleted", "webhook.test"]},
        headers=acme.headers,
    )
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"Invalid event(s): lead.deleted, webhook.test. Allowed events: {ALLOWED}"
    }


async def test_empty_events_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(BASE, json={"url": PUBLIC_URL, "events": []}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == {"detail": "At least one event is required"}


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"events": ["lead.created"]}, ["body", "url"]),
        ({"url": PUBLIC_URL}, ["body", "events"]),
        ({"url": 42, "events": ["lead.created"]}, ["body", "url"]),
        ({"url": PUBLIC_URL, "events": "lead.created"}, ["body", "events"]),
        ({"url": PUBLIC_URL, "events": [1]}, ["body", "events", 0]),
        ({"url": PUBLIC_URL, "events": ["lead.created"] * 101}, ["body", "events"]),
        ({"url": PUBLIC_URL, "events": ["x" * 101]}, ["body", "events", 0]),
    ],
)
async def test_invalid_body_is_422_array(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, Any], loc: list[Any]
) -> None:
    response = await client.post(BASE, json=body, headers=acme.headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail[0]["loc"] == loc
    assert {"loc", "msg", "type"} <= set(detail[0])


async def test_missing_body_is_422(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(BASE, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://10.0.0.1/",
        "http://localhost/",
        "http://api.localhost:8080/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[::ffff:192.168.0.1]/",
        "http://2130706433/",
        "https://192.168.1.20:8443/hooks",
    ],
)
async def test_private_urls_are_refused(client: httpx.AsyncClient, acme: Tenant, url: str) -> None:
    response = await client.post(
        BASE, json={"url": url, "events": ["lead.created"]}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": FORBIDDEN_ADDRESS_MESSAGE}

    webhook = await create(client, acme)
    response = await client.put(f"{BASE}/{webhook['id']}", json={"url": url}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == {"detail": FORBIDDEN_ADDRESS_MESSAGE}
    stored = await client.get(f"{BASE}/{webhook['id']}", headers=acme.headers)
    assert stored.json()["url"] == PUBLIC_URL
    assert (await client.get(BASE, headers=acme.headers)).json()["webhooks"] == [stored.json()]


async def test_malformed_urls_are_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    for url in ("http://user:pw@93.184.216.34/", "http://93.184.216.34\\@evil/", "https:///x"):
        response = await client.post(
            BASE, json={"url": url, "events": ["lead.created"]}, headers=acme.headers
        )
        assert response.status_code == 400, url
        assert isinstance(response.json()["detail"], str)


@pytest.fixture
async def private_client(
    resources: Resources, database_url: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """The same database, served with SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS=true."""
    settings = make_settings(database_url, tmp_path, allow_private_webhook_urls=True)
    app = create_app(
        resources=Resources(
            settings=settings,
            sessionmaker=resources.sessionmaker,
            rate_limiter=resources.rate_limiter,
            secret_key=resources.secret_key,
            dialect_name=resources.dialect_name,
        )
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_private_urls_allowed_when_configured(
    private_client: httpx.AsyncClient, acme: Tenant
) -> None:
    webhook = await create(private_client, acme, url="http://127.0.0.1:9000/hook")
    assert webhook["url"] == "http://127.0.0.1:9000/hook"
    updated = await private_client.put(
        f"{BASE}/{webhook['id']}", json={"url": "http://localhost/x"}, headers=acme.headers
    )
    assert updated.status_code == 200
    assert updated.json()["url"] == "http://localhost/x"
    # The prefix rule and the URL's form still apply.
    response = await private_client.post(
        BASE, json={"url": "ftp://127.0.0.1/", "events": ["lead.created"]}, headers=acme.headers
    )
    assert response.json() == SCHEME_ERROR
    response = await private_client.post(
        BASE,
        json={"url": "http://u:p@127.0.0.1/", "events": ["lead.created"]},
        headers=acme.headers,
    )
    assert response.status_code == 400


async def test_get_update_delete(client: httpx.AsyncClient, acme: Tenant) -> None:
    webhook = await create(client, acme, events=["lead.created", "lead.updated"])
    url = f"{BASE}/{webhook['id']}"
    assert (await client.get(url, headers=acme.headers)).json() == webhook

    response = await client.put(url, json={"events": ["call.completed"]}, headers=acme.headers)
    assert response.status_code == 200
    updated = response.json()
    assert set(updated) == SHAPE
    assert updated["events"] == ["call.completed"]
    assert updated["url"] == PUBLIC_URL  # untouched fields stay
    assert updated["secret"] == webhook["secret"]
    assert updated["updated_at"] >= webhook["updated_at"]

    response = await client.put(
        url,
        json={"url": "http://93.184.216.35/new", "is_active": False},
        headers=acme.headers,
    )
    assert response.status_code == 200
    assert response.json()["url"] == "http://93.184.216.35/new"
    assert response.json()["is_active"] is False
    assert (await client.put(url, json={}, headers=acme.headers)).json()["is_active"] is False

    response = await client.put(url, json={"url": "ws://93.184.216.34/"}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == SCHEME_ERROR
    response = await client.put(url, json={"events": ["nope"]}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json()["detail"] == f"Invalid event(s): nope. Allowed events: {ALLOWED}"
    response = await client.put(url, json={"events": []}, headers=acme.headers)
    assert response.status_code == 400
    for body in ({"url": None}, {"events": None}, {"is_active": None}, {"is_active": "maybe"}):
        response = await client.put(url, json=body, headers=acme.headers)
        assert response.status_code == 422, body
        assert isinstance(response.json()["detail"], list)

    assert (await client.delete(url, headers=acme.headers)).status_code == 204
    missing = await client.get(url, headers=acme.headers)
    assert missing.status_code == 404
    assert missing.json() == NOT_FOUND
    assert (await client.delete(url, headers=acme.headers)).status_code == 404


async def test_reenabling_clears_the_service_reason_and_failures(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    webhook = await create(client, acme)
    async with sessionmaker() as session:
        stored = await session.get(WebhookSubscription, webhook["id"])
        assert stored is not None
        stored.is_active = False
        stored.disabled_reason = "Endpoint answered 410 Gone"
        stored.failing_since = datetime.now(UTC) - timedelta(days=3)
        await session.commit()

    listed = (await client.get(BASE, headers=acme.headers)).json()["webhooks"]
    assert [item["is_active"] for item in listed] == [False]  # paused ones are listed too

    response = await client.put(
        f"{BASE}/{webhook['id']}", json={"is_active": True}, headers=acme.headers
    )
    assert response.status_code == 200
    assert response.json()["is_active"] is True
    async with sessionmaker() as session:
        row = (
            await session.execute(
                select(
                    WebhookSubscription.disabled_reason, WebhookSubscription.failing_since
                ).where(WebhookSubscription.id == webhook["id"])
            )
        ).one()
    assert tuple(row) == (None, None)


async def test_rotate_secret_keeps_the_previous_one_for_a_day(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    webhook = await create(client, acme)
    url = f"{BASE}/{webhook['id']}/rotate-secret"

    async def stored() -> WebhookSubscription:
        async with sessionmaker() as session:
            row = await session.get(WebhookSubscription, webhook["id"])
            assert row is not None
            return row

    before = datetime.now(UTC)
    response = await client.post(url, headers=acme.headers)
    assert response.status_code == 200
    rotated = response.json()
    assert set(rotated) == SHAPE
    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != webhook["secret"]
    assert {k: v for k, v in rotated.items() if k not in ("secret", "updated_at")} == {
        k: v for k, v in webhook.items() if k not in ("secret", "updated_at")
    }
    row = await stored()
    assert row.secret == rotated["secret"]
    assert row.previous_secret == webhook["secret"]
    assert row.previous_secret_expires_at is not None
    expires = row.previous_secret_expires_at
    assert before + timedelta(hours=24) <= expires <= datetime.now(UTC) + timedelta(hours=24)

    # A second rotation within the day keeps the then-current secret, not the first one.
    again = (await client.post(url, headers=acme.headers)).json()
    row = await stored()
    assert row.secret == again["secret"]
    assert row.previous_secret == rotated["secret"]
    assert row.previous_secret_expires_at is not None
    assert row.previous_secret_expires_at >= expires
    assert (await client.get(f"{BASE}/{webhook['id']}", headers=acme.headers)).json()[
        "secret"
    ] == again["secret"]


async def test_idempotency_key_replays_create(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Idempotency-Key": "create-hook-1"}
    body = {"url": PUBLIC_URL, "events": ["ticket.created"]}
    first = await client.post(BASE, json=body, headers=headers)
    second = await client.post(BASE, json=body, headers=headers)
    assert first.status_code == second.status_code == 200
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    assert len((await client.get(BASE, headers=acme.headers)).json()["webhooks"]) == 1


@pytest.mark.parametrize("webhook_id", ["nope", "00000000-0000-0000-0000-000000000000", "1" * 40])
async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant, webhook_id: str) -> None:
    for method, suffix, body in (
        ("GET", "", None),
        ("PUT", "", {"is_active": False}),
        ("DELETE", "", None),
        ("POST", "/rotate-secret", None),
        ("GET", "/deliveries", None),
    ):
        response = await client.request(
            method, f"{BASE}/{webhook_id}{suffix}", json=body, headers=acme.headers
        )
        assert response.status_code == 404, (method, suffix)
        assert response.json() == NOT_FOUND


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, url="https://93.184.216.99/globex")
    mine = await create(client, acme)
    base = f"{BASE}/{theirs['id']}"
    for method, suffix, body in (
        ("GET", "", None),
        ("PUT", "", {"url": "https://93.184.216.34/hijack", "is_active": False}),
        ("DELETE", "", None),
        ("POST", "/rotate-secret", None),
        ("GET", "/deliveries", None),
    ):
        response = await client.request(method, base + suffix, json=body, headers=acme.headers)
        assert response.status_code == 404, (method, suffix)
        assert response.json() == NOT_FOUND
    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["webhooks"]] == [mine["id"]]
    response = await client.get(BASE, params={"starting_after": theirs["id"]}, headers=acme.headers)
    assert response.status_code == 400
    # Nothing of theirs changed.
    still_theirs = (await client.get(base, headers=globex.headers)).json()
    assert still_theirs == theirs


async def test_scope_webhooks_admin(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    admin = await tenants.key(acme, ["webhooks:admin"])
    webhook = await create(client, admin)
    assert (await client.get(f"{BASE}/{webhook['id']}", headers=admin.headers)).status_code == 200
    assert (await client.get(f"{BASE}/{webhook['id']}", headers=acme.headers)).status_code == 200

    outsider = await tenants.key(acme, ["agents:read", "campaigns:manage", "calls:read"])
    for method, suffix, body in (
        ("POST", "", {"url": PUBLIC_URL, "events": ["lead.created"]}),
        ("GET", "", None),
        ("GET", f"/{webhook['id']}", None),
        ("PUT", f"/{webhook['id']}", {"is_active": False}),
        ("DELETE", f"/{webhook['id']}", None),
        ("POST", f"/{webhook['id']}/rotate-secret", None),
        ("GET", f"/{webhook['id']}/deliveries", None),
    ):
        response = await client.request(method, BASE + suffix, json=body, headers=outsider.headers)
        assert response.status_code == 403, (method, suffix)
        error = response.json()["error"]
        assert error["code"] == "insufficient_scope"
        assert "webhooks:admin" in error["message"]
    # webhooks:admin is not full_access.
    assert (await client.get("/api/v1/contacts", headers=admin.headers)).status_code == 403
    response = await client.get(BASE, headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401


async def test_list_pages_with_limit_and_starting_after(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    created = [
        (await create(client, acme, url=f"https://93.184.216.34/{i}"))["id"] for i in range(7)
    ]
    newest_first = list(reversed(created))

    everything = (await client.get(BASE, headers=acme.headers)).json()
    assert set(everything) == {"webhooks", "has_more", "next_cursor"}
    assert [item["id"] for item in everything["webhooks"]] == newest_first
    assert everything["has_more"] is False
    assert everything["next_cursor"] == newest_first[-1]

    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    while True:
        page = (await client.get(BASE, params=params, headers=acme.headers)).json()
        seen.extend(item["id"] for item in page["webhooks"])
        if not page["has_more"]:
            break
        assert page["next_cursor"] == page["webhooks"][-1]["id"]
        params = {"limit": 3, "starting_after": page["next_cursor"]}
    assert seen == newest_first

    back = (
        await client.get(
            BASE, params={"limit": 2, "ending_before": newest_first[3]}, headers=acme.headers
        )
    ).json()
    assert [item["id"] for item in back["webhooks"]] == newest_first[1:3]
    assert back["has_more"] is True

    for limit in ("0", "101", "x"):
        response = await client.get(BASE, params={"limit": limit}, headers=acme.headers)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "limit"]
    response = await client.get(BASE, params={"starting_after": "nope"}, headers=acme.headers)
    assert response.status_code == 400

    empty = await tenants.organization("Empty")
    assert (await client.get(BASE, headers=empty.headers)).json() == {
        "webhooks": [],
        "has_more": False,
        "next_cursor": None,
    }


async def add_attempts(
    sessionmaker: async_sessionmaker[AsyncSession],
    tenant: Tenant,
    subscription_id: str,
    count: int,
) -> list[str]:
    """`count` attempts of one delivery, one a minute apart (oldest first); their ids."""
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    event_id = f"evt_{uuid.uuid4().hex}"
    delivery_id = f"msg_{uuid.uuid4().hex}"
    ids = [str(uuid.uuid4()) for _ in range(count)]
    async with sessionmaker() as session:
        session.add(
            Event(
                id=event_id,
                organization_id=tenant.organization_id,
                type="lead.created",
                livemode=False,
                data={"id": "x"},
                created_at=start,
            )
        )
        session.add(
            WebhookDelivery(
                id=delivery_id,
                organization_id=tenant.organization_id,
                subscription_id=subscription_id,
                event_id=event_id,
                event_type="lead.created",
                status="succeeded",
                attempt_count=count,
            )
        )
        await session.flush()
        for number, attempt_id in enumerate(ids, start=1):
            last = number == count
            session.add(
                WebhookDeliveryAttempt(
                    id=attempt_id,
                    organization_id=tenant.organization_id,
                    subscription_id=subscription_id,
                    delivery_id=delivery_id,
                    event_id=event_id,
                    event_type="lead.created",
                    attempt=number,
                    status_code=200 if last else 503,
                    success=last,
                    duration_ms=10 * number,
                    error=None if last else "HTTP 503",
                    response_body="secret internals",
                    created_at=start + timedelta(minutes=number),
                )
            )
        await session.commit()
    return ids


async def test_deliveries_page_newest_first(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    webhook = await create(client, acme)
    other = await create(client, acme)
    ids = await add_attempts(sessionmaker, acme, webhook["id"], 5)
    await add_attempts(sessionmaker, acme, other["id"], 2)
    url = f"{BASE}/{webhook['id']}/deliveries"

    page = (await client.get(url, headers=acme.headers)).json()
    assert page["object"] == "list"
    assert page["total_count"] == 5
    assert page["has_more"] is False
    assert [item["id"] for item in page["data"]] == list(reversed(ids))
    newest = page["data"][0]
    assert newest == {
        "id": ids[-1],
        "event_id": newest["event_id"],
        "event_type": "lead.created",
        "status_code": 200,
        "success": True,
        "attempt": 5,
        "duration_ms": 50,
        "error": None,
        "created_at": "2026-01-01T12:05:00Z",
    }
    assert newest["event_id"].startswith("evt_")
    assert page["data"][-1]["error"] == "HTTP 503"
    assert page["data"][-1]["success"] is False

    first = (await client.get(url, params={"limit": 2}, headers=acme.headers)).json()
    assert [item["id"] for item in first["data"]] == [ids[4], ids[3]]
    assert first["has_more"] is True
    assert first["next_cursor"] == ids[3]
    second = (
        await client.get(
            url, params={"limit": 2, "starting_after": first["next_cursor"]}, headers=acme.headers
        )
    ).json()
    assert [item["id"] for item in second["data"]] == [ids[2], ids[1]]
    last = (
        await client.get(
            url, params={"limit": 2, "starting_after": second["next_cursor"]}, headers=acme.headers
        )
    ).json()
    assert [item["id"] for item in last["data"]] == [ids[0]]
    assert last["has_more"] is False
    back = (
        await client.get(url, params={"limit": 2, "ending_before": ids[2]}, headers=acme.headers)
    ).json()
    assert [item["id"] for item in back["data"]] == [ids[4], ids[3]]

    response = await client.get(url, params={"limit": 101}, headers=acme.headers)
    assert response.status_code == 422
    empty = (await client.get(f"{BASE}/{other['id']}/deliveries", headers=acme.headers)).json()
    assert empty["total_count"] == 2


async def test_deleting_a_webhook_deletes_its_attempts(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    webhook = await create(client, acme)
    await add_attempts(sessionmaker, acme, webhook["id"], 2)
    assert (await client.delete(f"{BASE}/{webhook['id']}", headers=acme.headers)).status_code == 204
    async with sessionmaker() as session:
        left = await session.execute(
            select(WebhookDeliveryAttempt.id).where(
                WebhookDeliveryAttempt.subscription_id == webhook["id"]
            )
        )
        assert left.all() == []
