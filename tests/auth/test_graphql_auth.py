"""Login → JWT, and API key management by organization users over GraphQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from app.graphql import schema as graphql_schema
from app.kit.ratelimit import MemoryRateLimiter
from app.main import create_app
from app.resources import Resources
from tests.conftest import GRAPHQL, StatementCounter, Tenant, TenantFactory, graphql

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


def frozen_limiter() -> MemoryRateLimiter:
    """A limiter whose clock stands still: no bucket refills while a slow test runs (each
    login hashes a password, seconds apart on a loaded machine)."""
    return MemoryRateLimiter(clock=lambda: 1_000.0)


async def test_login_is_rate_limited_per_email(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, resources: Resources
) -> None:
    resources.rate_limiter = frozen_limiter()
    await tenants.user(acme, "target@acme.test", PASSWORD)
    codes = [
        (await login(client, "target@acme.test", f"guess {i}"))["errors"][0]["code"]
        for i in range(12)
    ]
    assert codes[:10] == ["invalid_credentials"] * 10
    assert codes[10:] == ["rate_limit_exceeded"] * 2


@pytest.fixture
async def spraying_client(resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    """Four login attempts per minute per client address; the other limits stay generous."""
    settings = resources.settings.model_copy(update={"login_rate_limit_per_address": "4/m"})
    app = create_app(resources=replace(resources, settings=settings, rate_limiter=frozen_limiter()))
    transport = httpx.ASGITransport(app=app, client=("198.51.100.20", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def _attempt(client: httpx.AsyncClient, email: str, **headers: str) -> httpx.Response:
    return await client.post(
        GRAPHQL,
        json={"query": LOGIN, "variables": {"email": email, "password": "Winter2026!"}},
        headers=headers,
    )


async def test_login_is_rate_limited_per_client_address_across_emails(
    spraying_client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    # Password spraying: one password, a different e-mail each time (each under its own limit).
    for i in range(4):
        await tenants.user(acme, f"user{i}@acme.test", PASSWORD)
    answers = [await _attempt(spraying_client, f"user{i}@acme.test") for i in range(4)]
    assert {a.json()["data"]["login"]["errors"][0]["code"] for a in answers} == {
        "invalid_credentials"
    }
    refused = await _attempt(spraying_client, "user5@acme.test")
    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    # Having a credential does not lift it: the attempts are still from this address.
    assert (await _attempt(spraying_client, "user6@acme.test", **acme.headers)).status_code == 429
    # Other requests from the address still go through.
    body = (await spraying_client.post(GRAPHQL, json={"query": "{ viewer { livemode } }"})).json()
    assert body == {"data": {"viewer": None}}


async def test_every_aliased_login_of_a_document_counts(
    spraying_client: httpx.AsyncClient,
) -> None:
    three = (
        "mutation { "
        + " ".join(
            f'a{i}: login(email: "u{i}@acme.test", password: "x") {{ token }}' for i in range(3)
        )
        + " }"
    )
    first = await spraying_client.post(GRAPHQL, json={"query": three})
    assert first.status_code == 200
    assert set(first.json()["data"]) == {"a0", "a1", "a2"}
    # One attempt left; a document of two (one through a fragment) is refused whole.
    two = (
        'mutation { ...Spread b: login(email: "b@acme.test", password: "x") { token } }'
        ' fragment Spread on Mutation { c: login(email: "c@acme.test", password: "x") { token } }'
    )
    refused = await spraying_client.post(GRAPHQL, json={"query": two})
    assert refused.status_code == 429
    one = 'mutation { login(email: "d@acme.test", password: "x") { token } }'
    assert (await spraying_client.post(GRAPHQL, json={"query": one})).status_code == 200
    assert (await spraying_client.post(GRAPHQL, json={"query": one})).status_code == 429


async def test_the_organization_id_header_is_checked_on_graphql(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    """docs/api.md, `organization_id` header: optional on every route; when sent it must name the
    credential's organization, on /graphql as on REST (same 400 body)."""
    query = {"query": "{ viewer { organizationId } }"}
    for name in ("organization_id", "organization-id"):
        matching = await client.post(
            GRAPHQL, json=query, headers={**acme.headers, name: acme.organization_id}
        )
        assert matching.json() == {"data": {"viewer": {"organizationId": acme.organization_id}}}
        for claimed in (globex.organization_id, "", "not-an-id"):
            refused = await client.post(
                GRAPHQL, json=query, headers={**acme.headers, name: claimed}
            )
            assert refused.status_code == 400
            assert refused.json() == {"detail": "A valid organization_id header is required"}
    # Without a credential there is no organization to compare with: the header is ignored.
    anonymous = await client.post(
        GRAPHQL, json=query, headers={"organization_id": globex.organization_id}
    )
    assert anonymous.json() == {"data": {"viewer": None}}


class RecordedLog:
    """Stands in for the GraphQL logger: (level, event, fields) of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def record(event: str, **fields: Any) -> None:
            self.calls.append((level, event, fields))

        return record


@pytest.fixture
def graphql_log(monkeypatch: pytest.MonkeyPatch) -> RecordedLog:
    log = RecordedLog()
    monkeypatch.setattr(graphql_schema, "logger", log)
    return log


async def test_expected_graphql_errors_log_one_line_without_a_traceback(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graphql_log: RecordedLog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = await tenants.key(acme, ["calls:read"])
    body = await graphql(client, "{ contacts { totalCount } }", headers=reader.headers)
    assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    body = await graphql(client, '{ contacts(after: "nope") { totalCount } }', headers=acme.headers)
    not_found = body["errors"][0]["extensions"]["code"]
    body = await graphql(client, "{ viewer { nope } }", headers=acme.headers)
    assert graphql_log.calls == [
        ("info", "graphql error", {"code": code, "message": message, "path": path})
        for code, message, path in [
            (
                "insufficient_scope",
                "This credential does not have the required scope: full_access",
                ["contacts"],
            ),
            (not_found, graphql_log.calls[1][2]["message"], ["contacts"]),
            (None, "Cannot query field 'nope' on type 'Viewer'.", None),
        ]
    ]
    assert all("exc_info" not in fields for _, _, fields in graphql_log.calls)
    # Strawberry's own logger (a traceback per error) stays silent.
    assert not [r for r in caplog.records if r.name == "strawberry.execution"]


async def test_unexpected_graphql_errors_keep_their_traceback(
    client: httpx.AsyncClient,
    acme: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    graphql_log: RecordedLog,
) -> None:
    async def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr("app.contacts.repository.ContactRepository.cursor_page", broken)
    body = await graphql(client, "{ contacts { totalCount } }", headers=acme.headers)
    assert body["errors"][0]["message"] == "Internal server error"
    ((level, event, fields),) = graphql_log.calls
    assert (level, event, fields["path"]) == ("error", "unexpected graphql error", ["contacts"])
    assert isinstance(fields["exc_info"], RuntimeError)


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
