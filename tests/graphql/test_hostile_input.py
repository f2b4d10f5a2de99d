"""Hostile documents and bodies on /graphql: refused with a GraphQL error or a 400, never a 5xx,
and never after the server did the work the document asks for."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest
from graphql import get_introspection_query, parse

from app.graphql import cost
from app.graphql.cost import CostLimits, cost_errors, measure
from app.graphql.schema import MAX_DOCUMENT_LENGTH, MAX_SELECTIONS, MAX_TOKENS
from app.kit.ratelimit import MemoryRateLimiter
from app.main import create_app
from app.resources import Resources
from tests.conftest import GRAPHQL, Tenant, graphql


def fan_out(n: int, prefix: str = "G", *, define_last: bool = False) -> str:
    """`{ ...G0 }` with `fragment Gi on Query { viewer { organizationId } ...Gi+1 ...Gi+1 }`
    for i < n: 2^n selections from a body linear in n (issue 10's reproduction)."""
    fragments = [
        f"fragment {prefix}{i} on Query {{ viewer {{ organizationId }} "
        f"...{prefix}{i + 1} ...{prefix}{i + 1} }}"
        for i in range(n)
    ]
    if define_last:
        fragments.append(f"fragment {prefix}{n} on Query {{ viewer {{ organizationId }} }}")
    return f"{{ ...{prefix}0 }} " + " ".join(fragments)


@pytest.mark.parametrize(
    "query",
    [
        pytest.param(fan_out(30), id="exact-input"),
        pytest.param(fan_out(30, define_last=True), id="every-fragment-defined"),
        pytest.param(fan_out(30, "Renamed", define_last=True), id="renamed"),
        pytest.param(fan_out(30, "R2_", define_last=True), id="renamed-again"),
    ],
)
async def test_fragment_fan_out_is_refused_before_it_runs(
    client: httpx.AsyncClient, query: str
) -> None:
    started = time.perf_counter()
    response = await client.post(GRAPHQL, json={"query": query})  # no credential
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    body = response.json()
    assert body["data"] is None
    assert [error["extensions"]["code"] for error in body["errors"]] == ["query_too_complex"]
    assert "fragments are expanded" in body["errors"][0]["message"]
    # Not a timing test (bench/graphql_cost.py prints the figure): a guard against the
    # exponential case, which takes minutes at n = 30.
    assert elapsed < 2


def test_each_fragment_is_measured_once(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []
    original = cost._Measure.fragment

    def counting(self: Any, name: str) -> Any:
        if name not in self.memo:
            walked.append(name)
        return original(self, name)

    monkeypatch.setattr(cost._Measure, "fragment", counting)
    (totals,) = measure(parse(fan_out(30, define_last=True))).values()
    assert sorted(walked) == sorted(f"G{i}" for i in range(31))
    # Each level selects `viewer`, `organizationId` and twice the next level.
    assert totals.selections == 2 * (2**31 - 1)
    assert totals.depth == 1


LIMITS = CostLimits(max_depth=3, max_aliases=2, max_selections=6)


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        ("{ a { b { c { d } } } }", False),  # depth 3
        ("{ a { b { c { d { e } } } } }", True),  # depth 4
        ("{ ...F } fragment F on Q { a { ...G } } fragment G on Q { b { c { d { e } } } }", True),
        ("{ __schema { types { fields { type { name } } } } }", False),  # introspection: its rule
        ("{ x: a y: b }", False),
        ("{ ...F } fragment F on Q { x: a y: b }", False),
        ("{ ...F ...F } fragment F on Q { x: a y: b }", True),  # per spread: an upper bound
        ("{ a { ...F } b { ...F } } fragment F on Q { x: a y: b }", True),  # 4 aliases run
        ("{ a b c d e f }", False),
        ("{ a b c d e f g }", True),
        ("{ a { ...F } b { ...F } } fragment F on Q { c d }", False),  # 6 selections
        ("{ a { ...F } b { ...F } } fragment F on Q { c d e }", True),  # 8 selections
        ("{ ...F } fragment F on Q { a ...F }", False),  # a cycle: NoFragmentCyclesRule's
        ("{ ...Missing }", False),  # KnownFragmentNamesRule's
    ],
)
def test_limits_count_what_execution_would_run(query: str, refused: bool) -> None:
    assert bool(cost_errors(parse(query), LIMITS)) is refused


def test_fields_spread_twice_at_one_level_count_once_per_place_they_run() -> None:
    # `...F ...F` at one level runs F once (collect_fields); measured as spread twice, which
    # may only overcount: never lets through what execution would do.
    (totals,) = measure(parse("{ ...F ...F } fragment F on Q { a }")).values()
    assert totals.selections == 2


def test_nesting_beyond_the_recursion_limit_is_an_error_not_a_crash() -> None:
    document = parse("{ a }")
    # The parser stops nesting at ~200 levels; a chain of fragments nests without it.
    chain = " ".join(f"fragment F{i} on Q {{ a {{ ...F{i + 1} }} }}" for i in range(600))
    deep = parse("{ ...F0 } " + chain + " fragment F600 on Q { b }")
    assert cost_errors(document, LIMITS) == []
    errors = cost_errors(deep, replace(LIMITS, max_depth=10_000))
    assert errors
    assert errors[0].extensions == {"code": "query_too_complex"}


async def test_the_selection_cap_counts_after_expansion(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    # fan_out(n) with its last fragment defined selects 2 * (2^(n+1) - 1) fields.
    assert 2 * (2**8 - 1) <= MAX_SELECTIONS < 2 * (2**9 - 1)
    within = await graphql(client, fan_out(7, define_last=True), headers=acme.headers)
    assert within == {"data": {"viewer": {"organizationId": acme.organization_id}}}
    over = await graphql(client, fan_out(8, define_last=True), headers=acme.headers)
    assert over["data"] is None
    assert over["errors"][0]["message"] == (
        "'anonymous' selects 1022 fields once fragments are expanded. Allowed: 1000"
    )


async def test_graphiql_introspection_fits_the_limits(client: httpx.AsyncClient) -> None:
    query = get_introspection_query(descriptions=True, input_value_deprecation=True)
    body = await graphql(client, query)
    assert "errors" not in body
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("{ viewer { livemode } }\n" + "# comment\n" * MAX_TOKENS, id="comments"),
        pytest.param("{ viewer { livemode } }" + " " * MAX_DOCUMENT_LENGTH, id="whitespace"),
        pytest.param(
            '{ viewer { livemode } } query Q($s: String = "' + "x" * MAX_DOCUMENT_LENGTH + '") '
            "{ viewer { livemode } }",
            id="string-literal",
        ),
    ],
)
async def test_the_token_limit_counts_the_whole_document(
    client: httpx.AsyncClient, acme: Tenant, query: str
) -> None:
    for _ in range(2):  # refused documents are not cached: refused the second time too
        body = await graphql(client, query, headers=acme.headers)
        assert body["data"] is None
        assert "Syntax Error" in body["errors"][0]["message"]


async def test_a_document_within_the_length_limit_runs(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    query = "{ viewer { livemode } }" + " " * (MAX_DOCUMENT_LENGTH - 100)
    body = await graphql(client, query, headers=acme.headers)
    assert body == {"data": {"viewer": {"livemode": False}}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b'{"query": "{ viewer { livemode } }\xff"}', "not valid UTF-8", id="utf8"),
        pytest.param(b"\xff\xfe{", "not valid UTF-8", id="utf8-bom-like"),
        pytest.param(b"[" * 1000 + b"]" * 1000, "nested deeper", id="arrays-1000"),
        pytest.param(
            b'{"query": "{ viewer { livemode } }", "variables": '
            + b'{"a": ' * 1000
            + b"1"
            + b"}" * 1000
            + b"}",
            "nested deeper",
            id="variables-1000",
        ),
        pytest.param(b"[" * 5000 + b"]" * 5000, "Unable to parse", id="arrays-5000"),
        pytest.param(b"{", "Unable to parse", id="truncated"),
        pytest.param(b'"{ viewer { livemode } }"', "JSON object", id="a-string"),
        pytest.param(b"[]", "Batching", id="a-list"),
        pytest.param(b'{"query": 5}', "must be a string", id="query-not-a-string"),
        pytest.param(b'{"query": "{ viewer { livemode } }", "variables": []}', "object", id="vars"),
    ],
)
@pytest.mark.parametrize("authenticated", [False, True])
async def test_bodies_that_are_not_graphql_requests_get_400_in_the_graphql_shape(
    client: httpx.AsyncClient, acme: Tenant, content: bytes, message: str, authenticated: bool
) -> None:
    headers = {"Content-Type": "application/json"}
    if authenticated:
        headers.update(acme.headers)
    response = await client.post(GRAPHQL, content=content, headers=headers)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert len(response.headers["x-request-id"]) == 32
    body = response.json()
    assert list(body) == ["errors"]
    (error,) = body["errors"]
    assert error["extensions"] == {"code": "bad_request"}
    assert message in error["message"]


async def test_a_body_of_another_content_type_gets_400_in_the_graphql_shape(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        GRAPHQL, content=b"{ viewer { livemode } }", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 400
    assert response.json() == {
        "errors": [{"message": "Unsupported content type", "extensions": {"code": "bad_request"}}]
    }
    assert "x-request-id" in response.headers


async def test_variables_nested_within_the_limit_reach_validation(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    variables: Any = 1
    for _ in range(100):
        variables = {"a": variables}
    response = await client.post(
        GRAPHQL,
        content=orjson.dumps({"query": "{ viewer { livemode } }", "variables": variables}),
        headers={**acme.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 200
    assert response.json() == {"data": {"viewer": {"livemode": False}}}


TWO_OPERATIONS = "query A { viewer { livemode } } query B { viewer { organizationId } }"


async def test_two_operations_without_an_operation_name_are_an_error(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    body = await graphql(client, TWO_OPERATIONS, headers=acme.headers)
    assert body == {
        "data": None,
        "errors": [
            {
                "message": "Must provide operation name if query contains multiple operations.",
                "extensions": {"code": "bad_request"},
            }
        ],
    }
    response = await client.post(
        GRAPHQL, json={"query": TWO_OPERATIONS, "operationName": "B"}, headers=acme.headers
    )
    assert response.json() == {"data": {"viewer": {"organizationId": acme.organization_id}}}


async def test_two_plannable_operations_without_a_name_are_an_error_too(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    query = "query A { contacts { totalCount } } query B { agents { totalCount } }"
    body = await graphql(client, query, headers=acme.headers)
    assert body["data"] is None
    assert body["errors"][0]["extensions"] == {"code": "bad_request"}


@pytest.fixture
async def strict_client(resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    """The app with small per-address limits, and a way to pick the client's address."""
    settings = resources.settings.model_copy(
        update={"rate_limit_per_address": "3/m", "login_rate_limit_per_address": "4/m"}
    )
    # A clock that stands still: no bucket refills however slowly the test runs.
    limiter = MemoryRateLimiter(clock=lambda: 1_000.0)
    app = create_app(resources=replace(resources, settings=settings, rate_limiter=limiter))
    transport = httpx.ASGITransport(app=app, client=("198.51.100.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_requests_without_a_credential_are_limited_per_address(
    strict_client: httpx.AsyncClient, resources: Resources, acme: Tenant
) -> None:
    introspection = {"query": "{ __schema { queryType { name } } }"}
    statuses = [(await strict_client.post(GRAPHQL, json=introspection)).status_code for _ in "1234"]
    assert statuses == [200, 200, 200, 429]
    refused = await strict_client.post(GRAPHQL, json=introspection)
    assert refused.json()["error"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    # A credential spends its own buckets, not the address's.
    with_key = await strict_client.post(GRAPHQL, json=introspection, headers=acme.headers)
    assert with_key.status_code == 200
    # Another address has a bucket of its own.
    app = strict_client._transport.app  # type: ignore[attr-defined]
    other = httpx.ASGITransport(app=app, client=("203.0.113.9", 40000))
    async with httpx.AsyncClient(transport=other, base_url="http://testserver") as client:
        assert (await client.post(GRAPHQL, json=introspection)).status_code == 200


class _PartlyUnreachableLimiter(MemoryRateLimiter):
    """A rate limiter whose store is down (e.g. Redis unreachable) for one kind of bucket."""

    def __init__(self, failing_prefix: str) -> None:
        super().__init__()
        self.failing_prefix = failing_prefix

    async def hit(self, key: str, limit: Any, cost: int = 1) -> Any:
        if key.startswith(self.failing_prefix):
            raise ConnectionError("rate limit store unreachable")
        return await super().hit(key, limit, cost)


LOGIN_ATTEMPT = 'mutation { login(email: "a@acme.test", password: "x") { token } }'


@pytest.mark.parametrize(
    ("failing_prefix", "query", "authenticated"),
    [
        ("addr:", "{ __schema { queryType { name } } }", False),
        ("login-addr:", LOGIN_ATTEMPT, False),
        ("login-addr:", LOGIN_ATTEMPT, True),
    ],
)
async def test_an_unreachable_rate_limit_store_is_a_logged_json_500(
    resources: Resources, acme: Tenant, failing_prefix: str, query: str, authenticated: bool
) -> None:
    limiter = _PartlyUnreachableLimiter(failing_prefix)
    app = create_app(resources=replace(resources, rate_limiter=limiter))
    transport = httpx.ASGITransport(app=app)
    headers = acme.headers if authenticated else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        response = await client.post(GRAPHQL, json={"query": query}, headers=headers)
    assert response.status_code == 500
    assert response.json() == {"detail": "Internal server error"}
    assert "x-request-id" in response.headers
