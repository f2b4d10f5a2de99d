"""GraphQL safety limits are part of the schema: aliases, tokens, masked errors."""

from __future__ import annotations

import httpx
import pytest

from app.graphql.schema import MAX_ALIASES, MAX_TOKENS
from tests.conftest import Tenant, graphql


async def test_too_many_aliases_are_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    fields = " ".join(f"a{i}: viewer {{ livemode }}" for i in range(MAX_ALIASES + 1))
    body = await graphql(client, f"{{ {fields} }}", headers=acme.headers)
    assert body.get("data") is None
    assert "aliases" in body["errors"][0]["message"].lower()


async def test_aliases_within_the_limit_work(client: httpx.AsyncClient, acme: Tenant) -> None:
    fields = " ".join(f"a{i}: viewer {{ livemode }}" for i in range(MAX_ALIASES))
    body = await graphql(client, f"{{ {fields} }}", headers=acme.headers)
    assert "errors" not in body
    assert len(body["data"]) == MAX_ALIASES


async def test_too_many_tokens_are_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    padding = " ".join("livemode" for _ in range(MAX_TOKENS))
    body = await graphql(client, f"{{ viewer {{ {padding} }} }}", headers=acme.headers)
    assert body.get("data") is None
    assert "token" in body["errors"][0]["message"].lower()


async def test_deep_introspection_is_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    """Nested `fields { type { fields … } }` introspection is the classic amplification query."""
    nested = "name"
    for _ in range(5):
        nested = f"fields {{ type {{ {nested} }} }}"
    body = await graphql(client, f"{{ __schema {{ types {{ {nested} }} }} }}", headers=acme.headers)
    assert body.get("data") is None
    assert "introspection" in body["errors"][0]["message"].lower()


async def test_unexpected_errors_are_masked_and_logged(
    client: httpx.AsyncClient,
    acme: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("password=hunter2 in a stack trace")

    monkeypatch.setattr("app.contacts.repository.ContactRepository.cursor_page", broken)
    response = await client.post(
        "/graphql", json={"query": "{ contacts { totalCount } }"}, headers=acme.headers
    )
    assert "hunter2" not in response.text
    errors = response.json()["errors"]
    assert errors == [
        {
            "message": "Internal server error",
            "locations": [{"line": 1, "column": 3}],
            "path": ["contacts"],
        }
    ]
    assert "unexpected graphql error" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("{ viewer { livemode }", "Syntax Error"),  # not cached: parsed again each time
        ("{ viewer { noSuchField } }", "noSuchField"),  # cached with its validation errors
    ],
)
async def test_refused_documents_are_refused_every_time(
    client: httpx.AsyncClient, acme: Tenant, query: str, expected: str
) -> None:
    for _ in range(2):
        body = await graphql(client, query, headers=acme.headers)
        assert body.get("data") is None
        assert expected in body["errors"][0]["message"]
