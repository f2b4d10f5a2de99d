"""docs/api.md's Authentication on REST: 401/403 bodies, key lifecycle, organization_id header."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.access.jwt import TokenClaims, issue_token
from app.access.models import ApiKey
from app.auth.service import revoke_api_key
from app.core.clock import utcnow
from tests.conftest import TEST_SECRET, Tenant, TenantFactory

CONTACTS = "/api/v1/contacts"


def assert_auth_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"]["code"] == code
    assert body["error"]["type"] == "authentication_error"
    assert isinstance(body["error"]["message"], str)
    assert body["detail"] == body["error"]["message"]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer service_sk_test_short",
        "Bearer service_sk_prod_" + "a" * 40,
        "Bearer sk_test_" + "a" * 40,
        "Bearer service_sk_test_" + "a" * 40,
        "Bearer service_sk_live_" + "b" * 40,
        "Bearer service_sk_test_" + "!" * 40,
        "Bearer not-a-jwt",
        "Bearer eyJhbGciOiJIUzI1NiJ9.e30.ZRrHA1JJJW8opsbCGfG_HACGpVUMN_a9IV7pAx_Zmeo",
    ],
)
async def test_bad_credentials_are_401(
    client: httpx.AsyncClient, acme: Tenant, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("GET", CONTACTS), ("POST", CONTACTS), ("GET", f"{CONTACTS}/x")):
        response = await client.request(method, path, headers=headers, json={})
        assert_auth_error(response, 401, "invalid_api_key")


async def test_wrong_prefix_of_a_real_key_is_401(client: httpx.AsyncClient, acme: Tenant) -> None:
    swapped = acme.api_key.replace("service_sk_test_", "service_sk_live_")
    response = await client.get(CONTACTS, headers={"Authorization": f"Bearer {swapped}"})
    assert_auth_error(response, 401, "invalid_api_key")


async def test_expired_key_is_401(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    async with sessionmaker() as session:
        key = await session.get(ApiKey, acme.key_id)
        assert key is not None
        key.expires_at = utcnow() - timedelta(seconds=1)
        await session.commit()
    response = await client.get(CONTACTS, headers=acme.headers)
    assert_auth_error(response, 401, "invalid_api_key")
    assert "expired" in response.json()["detail"]


async def test_key_with_future_expiry_works(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    key = await tenants.key(acme, ["full_access"], expires_at=utcnow() + timedelta(hours=1))
    assert (await client.get(CONTACTS, headers=key.headers)).status_code == 200


async def test_revoked_key_stops_at_once(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    assert (await client.get(CONTACTS, headers=acme.headers)).status_code == 200
    async with sessionmaker() as session:
        await revoke_api_key(session, acme.organization_id, acme.key_id)
        await session.commit()
    response = await client.get(CONTACTS, headers=acme.headers)
    assert_auth_error(response, 401, "invalid_api_key")
    assert "revoked" in response.json()["detail"]


async def test_live_key_works_and_reports_livemode(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    assert live.api_key.startswith("service_sk_live_")
    assert (await client.get(CONTACTS, headers=live.headers)).status_code == 200
    body = (
        await client.post(
            "/graphql", json={"query": "{ viewer { livemode } }"}, headers=live.headers
        )
    ).json()
    assert body["data"]["viewer"]["livemode"] is True


@pytest.mark.parametrize(
    "scopes",
    [["agents:read"], ["agents:write", "calls:read"], ["webhooks:admin", "campaigns:manage"]],
)
async def test_missing_scope_is_403(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, scopes: list[str]
) -> None:
    limited = await tenants.key(acme, scopes)
    for method, path in (("GET", CONTACTS), ("POST", CONTACTS), ("DELETE", f"{CONTACTS}/x")):
        response = await client.request(method, path, headers=limited.headers)
        assert_auth_error(response, 403, "insufficient_scope")
        assert "full_access" in response.json()["detail"]


async def test_graphql_applies_the_same_scopes(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    limited = await tenants.key(acme, ["agents:read"])
    body = (
        await client.post(
            "/graphql", json={"query": "{ contacts { totalCount } }"}, headers=limited.headers
        )
    ).json()
    assert body["data"] == {"contacts": None}
    assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    anonymous = (
        await client.post("/graphql", json={"query": "{ contacts { totalCount } }"})
    ).json()
    assert anonymous["errors"][0]["extensions"]["code"] == "unauthenticated"
    bad = await client.post(
        "/graphql",
        json={"query": "{ viewer { livemode } }"},
        headers={"Authorization": "Bearer service_sk_test_" + "z" * 40},
    )
    assert_auth_error(bad, 401, "invalid_api_key")


async def test_organization_id_header_rule(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    same = await client.get(
        CONTACTS, headers={**acme.headers, "organization_id": acme.organization_id}
    )
    assert same.status_code == 200
    for claimed in (globex.organization_id, "garbage", ""):
        response = await client.get(CONTACTS, headers={**acme.headers, "organization_id": claimed})
        assert response.status_code == 400
        assert response.json() == {"detail": "A valid organization_id header is required"}


async def test_last_used_at_is_recorded(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    async def last_used() -> object:
        async with sessionmaker() as session:
            result = await session.execute(
                select(ApiKey.last_used_at).where(ApiKey.id == acme.key_id)
            )
            return result.scalar_one()

    assert await last_used() is None
    before = utcnow()
    assert (await client.get(CONTACTS, headers=acme.headers)).status_code == 200
    recorded = await last_used()
    assert recorded is not None
    assert recorded >= before - timedelta(seconds=1)  # type: ignore[operator]


async def test_jwt_of_a_user_authenticates(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    user_id = await tenants.user(acme, "ops@acme.test", "correct horse battery")
    token = issue_token(TokenClaims(user_id, acme.organization_id), TEST_SECRET, 300)
    response = await client.get(CONTACTS, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    forged = issue_token(
        TokenClaims(user_id, acme.organization_id),
        "another-secret-that-is-long-enough-for-hs256",
        300,
    )
    response = await client.get(CONTACTS, headers={"Authorization": f"Bearer {forged}"})
    assert_auth_error(response, 401, "invalid_api_key")
    expired = issue_token(TokenClaims(user_id, acme.organization_id), TEST_SECRET, -10)
    response = await client.get(CONTACTS, headers={"Authorization": f"Bearer {expired}"})
    assert_auth_error(response, 401, "invalid_api_key")


async def test_only_a_hash_is_stored(
    acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    async with sessionmaker() as session:
        key = await session.get(ApiKey, acme.key_id)
    assert key is not None
    assert acme.api_key not in (key.key_hash, key.display_prefix)
    assert len(key.key_hash) == 64
    assert acme.api_key.startswith(key.display_prefix)


async def test_graphql_applies_the_organization_id_header_rule(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    query = {"query": "{ viewer { organizationId } }"}
    ok = await client.post(
        "/graphql", json=query, headers={**acme.headers, "organization_id": acme.organization_id}
    )
    assert ok.json()["data"]["viewer"]["organizationId"] == acme.organization_id
    wrong = await client.post(
        "/graphql", json=query, headers={**acme.headers, "organization_id": globex.organization_id}
    )
    assert wrong.status_code == 400
    assert wrong.json() == {"detail": "A valid organization_id header is required"}


async def test_wrong_method_lists_every_allowed_one(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.patch(CONTACTS, headers=acme.headers)
    assert response.status_code == 405
    assert {"GET", "POST"} <= {m.strip() for m in response.headers["allow"].split(",")}
