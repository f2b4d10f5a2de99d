"""Provider credentials over REST and GraphQL: set, list, replace, delete; keys sealed at rest
and never shown; unknown providers, provider-specific fields, the URL guard, scopes, tenants."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.provider_credentials.models import ProviderCredential
from app.provider_credentials.service import credential_box, credential_for_use
from tests.conftest import TEST_SECRET, Tenant, TenantFactory, graphql

BASE = "/api/v1/provider-credentials"
KEY = "sk-live-abcdefghijklmnop9876"


async def put(
    client: httpx.AsyncClient, tenant: Tenant, provider: str, **body: Any
) -> httpx.Response:
    return await client.put(f"{BASE}/{provider}", json=body, headers=tenant.headers)


async def test_set_list_replace_and_delete(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    response = await put(client, acme, "openai", api_key=KEY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"provider", "base_url", "api_key_last4", "updated_at"}
    assert body["provider"] == "openai"
    assert body["base_url"] is None
    assert body["api_key_last4"] == "9876"
    assert KEY not in response.text

    response = await put(
        client,
        acme,
        "cal_com",
        api_key="cal_live_0000",
        base_url="https://93.184.216.35",
        event_type_id=42,
    )
    assert response.status_code == 200, response.text
    listed = await client.get(BASE, headers=acme.headers)
    assert listed.status_code == 200
    assert [item["provider"] for item in listed.json()["data"]] == ["cal_com", "openai"]
    assert KEY not in listed.text

    replaced = await put(
        client, acme, "openai", api_key="sk-other-1111", base_url="https://93.184.216.34/v1"
    )
    assert replaced.json()["api_key_last4"] == "1111"
    assert replaced.json()["base_url"] == "https://93.184.216.34/v1"
    async with sessionmaker() as session:
        rows = (await session.scalars(select(ProviderCredential))).all()
        assert len([row for row in rows if row.organization_id == acme.organization_id]) == 2
        for row in rows:  # sealed at rest: the key is nowhere in the row
            assert "sk-other-1111" not in row.secret_encrypted
            assert row.secret_encrypted.startswith("sb1.")
        opened = await credential_for_use(
            session, acme.organization_id, "cal_com", credential_box(TEST_SECRET)
        )
        assert opened is not None
        assert (opened.api_key, opened.options) == ("cal_live_0000", {"event_type_id": 42})
        assert "cal_live_0000" not in repr(opened)

    assert (await client.delete(f"{BASE}/openai", headers=acme.headers)).status_code == 204
    again = await client.delete(f"{BASE}/openai", headers=acme.headers)
    assert again.status_code == 404
    assert again.json() == {"detail": "Credential not found"}


async def test_unknown_providers_bad_input_and_the_url_guard(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    for method in ("PUT", "DELETE"):
        response = await client.request(
            method, f"{BASE}/mistral", json={"api_key": KEY}, headers=acme.headers
        )
        assert response.status_code == 404
        assert response.json() == {"detail": "Unknown provider"}
    missing = await put(client, acme, "openai")
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "api_key"]
    blank = await put(client, acme, "openai", api_key="   ")
    assert blank.status_code == 422
    # Another provider's field is ignored, as any unknown field is.
    foreign = await put(client, acme, "openai", api_key=KEY, event_type_id=3)
    assert foreign.status_code == 200
    assert (await client.delete(f"{BASE}/openai", headers=acme.headers)).status_code == 204
    too_long = await put(client, acme, "openai", api_key="k" * 4097)
    assert too_long.status_code == 422
    private = await put(client, acme, "openai", api_key=KEY, base_url="http://127.0.0.1:11434/v1")
    assert private.status_code == 400
    assert private.json() == {
        "detail": "base_url: URL must not resolve to a private, loopback or link-local address"
    }
    metadata = await put(
        client,
        acme,
        "google_calendar",
        api_key="ya29",
        client_id="c",
        client_secret="s",
        refresh_token="r",
        token_url="http://169.254.169.254/token",
    )
    assert metadata.status_code == 400
    assert (await client.get(BASE, headers=acme.headers)).json() == {"data": []}


async def test_scope_and_tenants(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    assert (await put(client, acme, "anthropic", api_key=KEY)).status_code == 200
    agents_only = await tenants.key(acme, ["agents:read", "agents:write"])
    refused = await put(client, agents_only, "anthropic", api_key=KEY)
    assert refused.status_code == 403
    assert (await client.get(BASE, headers=agents_only.headers)).status_code == 403
    assert (await client.get(BASE, headers=globex.headers)).json() == {"data": []}
    other = await client.delete(f"{BASE}/anthropic", headers=globex.headers)
    assert other.status_code == 404
    assert len((await client.get(BASE, headers=acme.headers)).json()["data"]) == 1


DELETE = (
    'mutation { deleteProviderCredential(provider: "groq") '
    "{ deletedProvider errors { code message } } }"
)
SET = """
mutation Set($provider: String!, $input: ProviderCredentialInput!) {
  setProviderCredential(provider: $provider, input: $input) {
    providerCredential { provider baseUrl apiKeyLast4 updatedAt }
    errors { code message field }
  }
}"""


async def test_graphql(client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory) -> None:
    done = await graphql(
        client, SET, {"provider": "groq", "input": {"apiKey": "gsk_0123456789"}}, acme.headers
    )
    credential = done["data"]["setProviderCredential"]["providerCredential"]
    assert credential["provider"] == "groq"
    assert credential["apiKeyLast4"] == "6789"
    unknown = await graphql(
        client, SET, {"provider": "mistral", "input": {"apiKey": "x"}}, acme.headers
    )
    assert unknown["data"]["setProviderCredential"]["errors"] == [
        {"code": "not_found", "message": "Unknown provider", "field": "provider"}
    ]
    bad = await graphql(
        client,
        SET,
        {"provider": "groq", "input": {"apiKey": "x", "baseUrl": "http://10.0.0.1/"}},
        acme.headers,
    )
    assert bad["data"]["setProviderCredential"]["errors"][0]["code"] == "invalid_input"
    listed = await graphql(
        client, "{ providerCredentials { provider apiKeyLast4 } }", headers=acme.headers
    )
    assert listed["data"]["providerCredentials"] == [{"provider": "groq", "apiKeyLast4": "6789"}]
    deleted = await graphql(
        client,
        DELETE,
        headers=acme.headers,
    )
    assert deleted["data"]["deleteProviderCredential"] == {"deletedProvider": "groq", "errors": []}
    missing = await graphql(
        client,
        DELETE,
        headers=acme.headers,
    )
    assert missing["data"]["deleteProviderCredential"]["errors"] == [
        {"code": "not_found", "message": "Credential not found"}
    ]
    reader = await tenants.key(acme, ["agents:read"])
    refused = await graphql(client, "{ providerCredentials { provider } }", headers=reader.headers)
    assert refused["data"]["providerCredentials"] is None
    assert refused["errors"][0]["extensions"]["code"] == "insufficient_scope"
