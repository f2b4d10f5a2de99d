"""Failed credential checks are limited per client address (key spraying): past the limit the
address's failures get 429 in the documented shape, on REST and GraphQL alike, while a valid
credential from the same address (a neighbour behind one NAT) is always served; other addresses
are not affected, and the address's failures are answered 401 again once its bucket has room."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.access.failures import FailedAuthentications
from app.kit.errors import RateLimited
from app.kit.ratelimit import MemoryRateLimiter, RateLimit
from app.main import create_app
from app.resources import Resources
from tests.conftest import (
    GRAPHQL,
    StatementCounter,
    Tenant,
    make_resources,
    make_settings,
)

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
    return make_resources(settings, sessionmaker, dialect)


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
        for headers in (BAD_JWT, {}, {"Authorization": "Basic eA=="}):
            again = await sprayer.get("/api/v1/contacts", headers=headers)
            assert (again.status_code, again.json()) == (429, RATE_LIMITED)
        # Only failures are refused: a valid key from the same address is served.
        valid = await sprayer.get("/api/v1/contacts", headers=acme.headers)
        assert valid.status_code == 200
        write = await sprayer.post(
            "/api/v1/contacts",
            json={"name": "Ada", "phone_number": "+14155550100"},
            headers=acme.headers,
        )
        assert write.status_code == 200

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
        assert valid.json() == {"data": {"viewer": {"organizationId": acme.organization_id}}}
        # REST and GraphQL share the address's bucket.
        assert (await sprayer.get("/api/v1/contacts", headers=BAD_KEY)).status_code == 429
        assert (await sprayer.get("/api/v1/contacts", headers=acme.headers)).status_code == 200
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
    assert failures.refused_for("a") == pytest.approx(10.0)
    assert failures.refused_for("b") is None  # another address is not refused
    now[0] += 10.0
    assert failures.refused_for("a") is None  # may try again
    # Over `max_addresses` refused at once, the oldest knowledge is dropped, never the newest.
    for address in ("x", "y", "z"):
        await failures.failed(limiter, address, limit)
        with pytest.raises(RateLimited):
            await failures.failed(limiter, address, limit)
    assert failures.refused_for("z") is not None


async def test_a_hundred_failures_never_lock_out_a_valid_key(
    database_url: str,
    tmp_path: Path,
    sessionmaker: async_sessionmaker[AsyncSession],
    dialect: str,
    acme: Tenant,
) -> None:
    """Fuzzers' unauthenticated probes, or a neighbour behind the same NAT, spraying keys:
    the address's failures are throttled at the production-like limit, its valid key is not."""
    settings = make_settings(database_url, tmp_path, auth_failure_rate_limit_per_address="30/60s")
    resources = make_resources(settings, sessionmaker, dialect)
    kinds = (BAD_KEY, BAD_JWT, {}, {"Authorization": "Bearer service_sk_test_short"})
    async with client_at(resources, "192.0.2.50") as shared_nat:
        statuses = [
            (await shared_nat.get("/api/v1/contacts", headers=kinds[n % len(kinds)])).status_code
            for n in range(100)
        ]
        assert statuses == [401] * 30 + [429] * 70
        valid = await shared_nat.get("/api/v1/contacts", headers=acme.headers)
        assert valid.status_code == 200, valid.text
        graph = await shared_nat.post(GRAPHQL, json=VIEWER, headers=acme.headers)
        assert graph.json() == {"data": {"viewer": {"organizationId": acme.organization_id}}}


async def test_a_refused_address_costs_no_lookup_for_credentials_that_cannot_be_valid(
    limited: Resources, acme: Tenant, sql_counter: StatementCounter
) -> None:
    async with client_at(limited, "203.0.113.10") as sprayer:
        for _ in range(3):
            await sprayer.get("/api/v1/contacts", headers=BAD_KEY)
        assert (await sprayer.get("/api/v1/contacts", headers=BAD_KEY)).status_code == 429
        before = sql_counter.count
        for headers in ({}, BAD_JWT, {"Authorization": "Bearer service_sk_test_short"}):
            assert (await sprayer.get("/api/v1/contacts", headers=headers)).status_code == 429
        assert sql_counter.count == before  # refused before any database work
        # A well-formed key is looked up (it may be a neighbour's valid one), then refused.
        assert (await sprayer.get("/api/v1/contacts", headers=BAD_KEY)).status_code == 429
        assert sql_counter.count > before
