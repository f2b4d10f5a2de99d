"""Rate limits in front of every route: 429 with docs/api.md's body and a Retry-After header."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.kit.ratelimit import MemoryRateLimiter
from app.main import create_app
from app.resources import Resources
from tests.conftest import TEST_SECRET, Tenant, TenantFactory, make_settings


@pytest.fixture
async def tight_client(
    resources: Resources, database_url: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(
        database_url, tmp_path, rate_limit_per_key="3/m", rate_limit_per_org="5/m"
    )
    tight = Resources(
        settings=settings,
        sessionmaker=resources.sessionmaker,
        rate_limiter=MemoryRateLimiter(),
        secret_key=TEST_SECRET,
        dialect_name=resources.dialect_name,
    )
    transport = httpx.ASGITransport(app=create_app(resources=tight))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_per_key_limit(tight_client: httpx.AsyncClient, acme: Tenant) -> None:
    statuses = [
        (await tight_client.get("/api/v1/contacts", headers=acme.headers)).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    response = await tight_client.get("/api/v1/contacts", headers=acme.headers)
    assert response.json() == {
        "error": "rate_limit_exceeded",
        "message": "Rate limit exceeded. Please retry after a backoff.",
        "retry_after": 60,
    }
    assert 1 <= int(response.headers["retry-after"]) <= 20


async def test_per_organization_limit_spans_keys(
    tight_client: httpx.AsyncClient, acme: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    second = await tenants.key(acme, ["full_access"])
    statuses = []
    for tenant in (acme, acme, acme, second, second, second):
        statuses.append(
            (await tight_client.get("/api/v1/contacts", headers=tenant.headers)).status_code
        )
    assert statuses == [200, 200, 200, 200, 200, 429]
    # Another organization has its own buckets.
    assert (await tight_client.get("/api/v1/contacts", headers=globex.headers)).status_code == 200


async def test_graphql_is_limited_too(tight_client: httpx.AsyncClient, acme: Tenant) -> None:
    statuses = [
        (
            await tight_client.post(
                "/graphql", json={"query": "{ viewer { livemode } }"}, headers=acme.headers
            )
        ).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
