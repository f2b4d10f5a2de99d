"""CORS for browser dashboards: SWITCHBOARD_CORS_ORIGINS opens /graphql and /api/v1 (preflight
included) to the named origins, without credentialed (cookie) CORS, exposing the headers clients
read; other origins, other paths, and a service without the setting get no CORS headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.main import create_app
from tests.conftest import GRAPHQL, Tenant, make_resources, make_settings

DASHBOARD = "https://dashboard.example.com"
PREFLIGHT = {
    "Origin": DASHBOARD,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(database_url, tmp_path, cors_origins=f"{DASHBOARD}, http://localhost:5173")


@pytest.fixture
async def closed(
    database_url: str,
    tmp_path: Path,
    sessionmaker: async_sessionmaker[AsyncSession],
    dialect: str,
) -> AsyncIterator[httpx.AsyncClient]:
    """The service as it ships: no SWITCHBOARD_CORS_ORIGINS."""
    app = create_app(
        resources=make_resources(make_settings(database_url, tmp_path), sessionmaker, dialect)
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


@pytest.mark.parametrize("path", [GRAPHQL, "/api/v1/contacts", "/api/v1/inbox/tickets"])
async def test_preflight_is_answered_for_an_allowed_origin(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.options(path, headers=PREFLIGHT)
    assert response.status_code == 200, response.text
    headers = response.headers
    assert headers["access-control-allow-origin"] == DASHBOARD
    assert "POST" in headers["access-control-allow-methods"]
    allowed = headers["access-control-allow-headers"].lower()
    for name in ("authorization", "content-type", "idempotency-key", "organization_id"):
        assert name in allowed
    assert "access-control-allow-credentials" not in headers
    assert headers["access-control-max-age"] == "600"


async def test_responses_expose_the_headers_clients_read(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    body = {"name": "Ada", "phone_number": "+14155550100"}
    headers = {**acme.headers, "Origin": DASHBOARD, "Idempotency-Key": "k1"}
    await client.post("/api/v1/contacts", json=body, headers=headers)
    replayed = await client.post("/api/v1/contacts", json=body, headers=headers)
    assert replayed.headers["idempotent-replayed"] == "true"
    assert replayed.headers["access-control-allow-origin"] == DASHBOARD
    exposed = {
        h.strip().lower() for h in replayed.headers["access-control-expose-headers"].split(",")
    }
    assert {"retry-after", "idempotent-replayed", "x-request-id"} <= exposed
    query = {"query": "{ viewer { organizationId } }"}
    answered = await client.post(GRAPHQL, json=query, headers={**acme.headers, "Origin": DASHBOARD})
    assert answered.headers["access-control-allow-origin"] == DASHBOARD
    assert answered.json()["data"]["viewer"]["organizationId"] == acme.organization_id


async def test_other_origins_and_paths_get_no_cors(client: httpx.AsyncClient) -> None:
    refused = await client.options(
        "/api/v1/contacts", headers={**PREFLIGHT, "Origin": "https://evil.example"}
    )
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
    for path in ("/healthz", "/metrics", "/webhooks/whatsapp"):
        response = await client.get(path, headers={"Origin": DASHBOARD})
        assert "access-control-allow-origin" not in response.headers, path


async def test_without_the_setting_there_is_no_cross_origin_access(
    closed: httpx.AsyncClient,
) -> None:
    preflight = await closed.options(GRAPHQL, headers=PREFLIGHT)
    assert preflight.status_code == 405
    assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize(
    "value", ["dashboard.example.com", "https://dashboard.example.com/app", "ftp://x.example"]
)
def test_origins_must_be_origins(value: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="is not an origin"):
        make_settings("sqlite+aiosqlite:///:memory:", tmp_path, cors_origins=value)
    settings = make_settings("sqlite+aiosqlite:///:memory:", tmp_path, cors_origins=" * ")
    assert settings.cors_origin_list == ["*"]
