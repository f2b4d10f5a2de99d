"""Failed credential checks are limited per client address (key spraying): past the limit the
address gets 429 in the spec's shape, for a valid credential too, on REST and GraphQL alike;
other addresses are not affected, and the address may try again once its bucket has room."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.auth.failures import FailedAuthentications
from app.kit.errors import RateLimited
from app.kit.ratelimit import MemoryRateLimiter, RateLimit
from app.main import create_app
from app.resources import Resources
from tests.conftest import GRAPHQL, TEST_SECRET, Tenant, make_settings

RATE_LIMITED = {
    "error": "rate_limit_exceeded",
    "message": "Rate limit exceeded. Please retry after a backoff.",
    "retry_after": 60,
}
BAD_KEY = {"Authorization": "Bearer service_sk_test_" + "x" * 40}
BAD_JWT = {"Authorization": "Bearer not.a.jwt"}
VIEWER = {"query": "{ viewer { organizationId } }"}


@pytest.fixture
def limited(
    database_url: str, tmp_path: Path, sessionmaker: async_sessionmaker[AsyncSession], dialect: str
) -> Resources:
    settings = make_settings(database_url, tmp_path, auth_failure_rate_limit_per_address="3/2s")
    return Resources(
        settings=settings,
        sessionmaker=sessionmaker,
        rate_limiter=MemoryRateLimiter(),
        secret_key=TEST_SECRET,
        dialect_name=dialect,
    )


@asynccontextmanager
async def client_at(resources: Resources, address: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(resources=resources), client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_rest_refuses_an_address_after_its_failed_checks(
    limited: Resources, acme: Tenant
) -> None:
    async with client_at(limited, "203.0.113.7") as sprayer:
        failures = [
            (await sprayer.get("/api/v1/contacts", headers=headers)).status_code
            for headers in (BAD_KEY, BAD_JWT, {})
        ]
        assert failures == [401, 401, 401]
        refused = await sprayer.get("/api/v1/contacts", headers=BAD_KEY)
        assert refused.status_code == 429
        assert refused.json() == RATE_LIMITED
        assert 1 <= int(refused.headers["retry-after"]) <= 2
        # Refused whatever it sends, so keys cannot be tested at full speed.
        valid = await sprayer.get("/api/v1/contacts", headers=acme.headers)
        assert (valid.status_code, valid.json()) == (429, RATE_LIMITED)
        write = await sprayer.post(
            "/api/v1/contacts",
            json={"name": "Ada", "phone_number": "+14155550100"},
            headers=acme.headers,
        )
        assert write.status_code == 429

    async with client_at(limited, "198.51.100.1") as neighbour:
        assert (await neighbour.get("/api/v1/contacts", headers=acme.headers)).status_code == 200
        assert (await neighbour.get("/api/v1/contacts", headers=BAD_KEY)).status_code == 401

    await asyncio.sleep(float(refused.headers["retry-after"]))
    async with client_at(limited, "203.0.113.7") as sprayer:
        assert (await sprayer.get("/api/v1/contacts", headers=acme.headers)).status_code == 200


async def test_graphql_refuses_an_address_after_its_failed_checks(
    limited: Resources, acme: Tenant
) -> None:
    async with client_at(limited, "203.0.113.8") as sprayer:
        for headers in (BAD_KEY, BAD_JWT, BAD_KEY):
            response = await sprayer.post(GRAPHQL, json=VIEWER, headers=headers)
            assert response.status_code == 401
        refused = await sprayer.post(GRAPHQL, json=VIEWER, headers=BAD_JWT)
        assert (refused.status_code, refused.json()) == (429, RATE_LIMITED)
        assert int(refused.headers["retry-after"]) >= 1
        valid = await sprayer.post(GRAPHQL, json=VIEWER, headers=acme.headers)
        assert valid.status_code == 429
        # REST and GraphQL share the address's bucket.
        assert (await sprayer.get("/api/v1/contacts", headers=acme.headers)).status_code == 429
    async with client_at(limited, "198.51.100.2") as neighbour:
        response = await neighbour.post(GRAPHQL, json=VIEWER, headers=acme.headers)
        assert response.json() == {"data": {"viewer": {"organizationId": acme.organization_id}}}


async def test_successful_checks_never_spend_from_the_bucket(
    limited: Resources, acme: Tenant
) -> None:
    async with client_at(limited, "203.0.113.9") as client:
        for _ in range(10):
            assert (await client.get("/api/v1/contacts", headers=acme.headers)).status_code == 200
        statuses = [
            (await client.get("/api/v1/contacts", headers=BAD_KEY)).status_code for _ in range(4)
        ]
    assert statuses == [401, 401, 401, 429]


async def test_refusals_are_remembered_without_asking_the_limiter() -> None:
    now = [100.0]
    failures = FailedAuthentications(max_addresses=2, clock=lambda: now[0])
    limiter = MemoryRateLimiter(clock=lambda: now[0])
    limit = RateLimit(limit=1, period=10.0)
    await failures.failed(limiter, "a", limit)
    with pytest.raises(RateLimited) as refused:
        await failures.failed(limiter, "a", limit)
    assert refused.value.retry_after == pytest.approx(10.0)
    with pytest.raises(RateLimited):
        failures.check("a")
    failures.check("b")  # another address is not refused
    now[0] += 10.0
    failures.check("a")  # may try again
    # Over `max_addresses` refused at once, the oldest knowledge is dropped, never the newest.
    for address in ("x", "y", "z"):
        await failures.failed(limiter, address, limit)
        with pytest.raises(RateLimited):
            await failures.failed(limiter, address, limit)
    with pytest.raises(RateLimited):
        failures.check("z")
