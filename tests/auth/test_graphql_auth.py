"""Login → JWT, and API key management by organization users over GraphQL."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import StatementCounter, Tenant, TenantFactory, graphql

LOGIN = """mutation($email: String!, $password: String!) {
  login(email: $email, password: $password) {
    token expiresIn user { id email organizationId } errors { code message }
  }
}"""
CREATE_KEY = """mutation($input: CreateApiKeyInput!) {
  createApiKey(input: $input) {
    secret apiKey { id name scopes livemode displayPrefix createdBy { id email } }
    errors { code message field }
  }
}"""
KEYS = """query($first: Int, $after: String) {
  apiKeys(first: $first, after: $after) {
    totalCount nodes { id name revokedAt createdBy { email } }
    pageInfo { hasNextPage endCursor }
  }
}"""
REVOKE = "mutation($id: ID!) { revokeApiKey(id: $id) { apiKey { id revokedAt } errors { code } } }"
PASSWORD = "correct horse battery staple"


async def login(client: httpx.AsyncClient, email: str, password: str) -> dict[str, Any]:
    body = await graphql(client, LOGIN, {"email": email, "password": password})
    return body["data"]["login"]  # type: ignore[no-any-return]


async def user_headers(
    client: httpx.AsyncClient, tenants: TenantFactory, tenant: Tenant, email: str
) -> dict[str, str]:
    await tenants.user(tenant, email, PASSWORD)
    result = await login(client, email, PASSWORD)
    assert result["errors"] == []
    return {"Authorization": f"Bearer {result['token']}"}


async def test_login(client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory) -> None:
    user_id = await tenants.user(acme, "Ops@Acme.test", PASSWORD)
    result = await login(client, "ops@acme.test", PASSWORD)
    assert result["user"] == {
        "id": user_id,
        "email": "ops@acme.test",
        "organizationId": acme.organization_id,
    }
    assert result["token"].count(".") == 2
    assert result["expiresIn"] > 0
    viewer = await graphql(
        client,
        "{ viewer { principalType organizationId scopes } }",
        headers={"Authorization": f"Bearer {result['token']}"},
    )
    assert viewer["data"]["viewer"] == {
        "principalType": "user",
        "organizationId": acme.organization_id,
        "scopes": ["full_access"],
    }


async def test_bad_login_says_nothing_specific(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    await tenants.user(acme, "ops@acme.test", PASSWORD)
    wrong_password = await login(client, "ops@acme.test", "nope nope nope")
    unknown_user = await login(client, "ghost@acme.test", PASSWORD)
    assert (
        wrong_password
        == unknown_user
        == {
            "token": None,
            "expiresIn": None,
            "user": None,
            "errors": [{"code": "invalid_credentials", "message": "Invalid email or password"}],
        }
    )


async def test_login_is_rate_limited_per_email(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    await tenants.user(acme, "target@acme.test", PASSWORD)
    codes = [
        (await login(client, "target@acme.test", f"guess {i}"))["errors"][0]["code"]
        for i in range(12)
    ]
    assert codes[:10] == ["invalid_credentials"] * 10
    assert codes[10:] == ["rate_limit_exceeded"] * 2


async def test_user_manages_keys(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    headers = await user_headers(client, tenants, acme, "admin@acme.test")
    created = await graphql(
        client, CREATE_KEY, {"input": {"name": "reporting", "scopes": ["calls:read"]}}, headers
    )
    payload = created["data"]["createApiKey"]
    assert payload["errors"] == []
    assert payload["secret"].startswith("service_sk_test_")
    assert payload["apiKey"]["scopes"] == ["calls:read"]
    assert payload["apiKey"]["createdBy"]["email"] == "admin@acme.test"
    assert payload["secret"].startswith(payload["apiKey"]["displayPrefix"])

    # The new key authenticates and carries only its scope.
    key_headers = {"Authorization": f"Bearer {payload['secret']}"}
    assert (await client.get("/api/v1/contacts", headers=key_headers)).status_code == 403

    listed = (await graphql(client, KEYS, {"first": 10}, headers))["data"]["apiKeys"]
    assert listed["totalCount"] == 2  # the org's default key and the new one
    assert all("secret" not in node for node in listed["nodes"])

    revoked = await graphql(client, REVOKE, {"id": payload["apiKey"]["id"]}, headers)
    assert revoked["data"]["revokeApiKey"]["apiKey"]["revokedAt"] is not None
    assert (await client.get("/api/v1/contacts", headers=key_headers)).status_code == 401


async def test_key_management_rules(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    headers = await user_headers(client, tenants, acme, "admin@acme.test")
    bad_scope = await graphql(
        client, CREATE_KEY, {"input": {"name": "x", "scopes": ["root"]}}, headers
    )
    assert bad_scope["data"]["createApiKey"]["errors"][0]["field"] == "scopes"
    past = await graphql(
        client,
        CREATE_KEY,
        {"input": {"name": "x", "scopes": ["full_access"], "expiresAt": "2001-01-01T00:00:00Z"}},
        headers,
    )
    assert past["data"]["createApiKey"]["errors"][0]["field"] == "expiresAt"
    # Another organization's key cannot be revoked (it is simply not found).
    other = await graphql(client, REVOKE, {"id": globex.key_id}, headers)
    assert other["data"]["revokeApiKey"]["errors"] == [{"code": "not_found"}]
    # API keys, even full_access ones, cannot mint keys: only organization users can.
    by_key = await graphql(
        client, CREATE_KEY, {"input": {"name": "x", "scopes": ["full_access"]}}, acme.headers
    )
    assert by_key["errors"][0]["extensions"]["code"] == "insufficient_scope"


async def test_created_by_is_batched(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sql_counter: StatementCounter,
) -> None:
    headers = await user_headers(client, tenants, acme, "admin@acme.test")
    for index in range(8):
        await graphql(
            client, CREATE_KEY, {"input": {"name": f"k{index}", "scopes": ["agents:read"]}}, headers
        )
    counts = []
    for first in (2, 8):
        sql_counter.count = 0
        listed = (await graphql(client, KEYS, {"first": first}, headers))["data"]["apiKeys"]
        assert [node["createdBy"]["email"] for node in listed["nodes"]] == [
            "admin@acme.test"
        ] * first
        counts.append(sql_counter.count)
    # One users query for the whole page, whatever its size.
    assert counts[0] == counts[1]
