"""Service endpoints outside the REST resources: health, readiness, metrics, errors of the
router itself, request ids, the OpenAPI document, GraphiQL and the checked-in GraphQL SDL."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
import schemathesis
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from schemathesis.core.result import Err
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from app.graphql.schema import schema_sdl
from app.main import create_app
from app.resources import Resources
from rest_compat.app import OPERATIONS
from rest_compat.reference import ASSETS as REFERENCE_ASSETS
from rest_compat.reference import STATIC_DIR as REFERENCE_DIR
from rest_compat.reference import reference_html
from tests.conftest import REQUIRE_SERVICES, Tenant, service_unavailable
from tests.html_assets import asset_urls

REPO_ROOT = Path(__file__).resolve().parents[1]
GENERATED_REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")
JSON = "application/json"


# --------------------------------------------------------------------------- health, readiness


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(JSON)
    assert response.json() == {"status": "ok"}


async def test_readyz_checks_the_database(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok"}  # no REDIS_URL: Redis is not checked


@asynccontextmanager
async def _app_client(resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(resources=resources))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_readyz_is_503_when_the_database_does_not_answer(resources: Resources) -> None:
    # Nothing listens on port 1: the connection is refused at once.
    dead = create_async_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        broken = dataclasses.replace(resources, sessionmaker=async_sessionmaker(dead))
        async with _app_client(broken) as client:
            response = await client.get("/readyz")
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["status"] == "unavailable"
            assert body["checks"]["database"].startswith("error")
            # Liveness does not depend on the database.
            assert (await client.get("/healthz")).status_code == 200
    finally:
        await dead.dispose()


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        if REQUIRE_SERVICES:
            pytest.fail("REQUIRE_SERVICES=1 but TEST_REDIS_URL is not set")
        pytest.skip("TEST_REDIS_URL is not set")
    redis = Redis.from_url(url)
    try:
        await redis.ping()
    except Exception as exc:
        service_unavailable("Redis", exc)
    finally:
        await redis.aclose()
    return url


async def test_readyz_checks_redis_where_configured(resources: Resources, redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        async with _app_client(dataclasses.replace(resources, redis=redis)) as client:
            response = await client.get("/readyz")
            assert response.status_code == 200, response.text
            assert response.json()["checks"] == {"database": "ok", "redis": "ok"}
    finally:
        await redis.aclose()


async def test_readyz_is_503_when_redis_does_not_answer(resources: Resources) -> None:
    redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    try:
        async with _app_client(dataclasses.replace(resources, redis=redis)) as client:
            response = await client.get("/readyz")
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["status"] == "unavailable"
            assert body["checks"]["database"] == "ok"
            assert body["checks"]["redis"].startswith("error")
    finally:
        await redis.aclose()


# --------------------------------------------------------------------------- metrics


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


async def _metrics(
    client: httpx.AsyncClient,
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return _samples(response.text)


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def test_metrics_count_requests_per_route_with_latency(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    counter = _key("switchboard_http_requests_total", method="GET", route="/contacts", status="200")
    latency_count = _key(
        "switchboard_http_request_duration_seconds_count", method="GET", route="/contacts"
    )
    before = await _metrics(client)

    response = await client.get("/api/v1/contacts", headers=acme.headers)
    assert response.status_code == 200, response.text

    after = await _metrics(client)
    assert after[counter] == before.get(counter, 0) + 1
    assert after[latency_count] == before.get(latency_count, 0) + 1
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in after.items()
        if name == "switchboard_http_request_duration_seconds_bucket"
        and dict(labels).get("route") == "/contacts"
        and dict(labels).get("method") == "GET"
    }
    assert "+Inf" in buckets, buckets
    assert len(buckets) > 2, buckets
    assert buckets["+Inf"] == after[latency_count]
    assert (
        _key("switchboard_http_request_duration_seconds_sum", method="GET", route="/contacts")
        in after
    )


async def test_metrics_route_label_is_the_template_not_the_path(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    missing = str(uuid.uuid4())
    assert (
        await client.get(f"/api/v1/contacts/{missing}", headers=acme.headers)
    ).status_code == 404
    nowhere = f"/nowhere-{uuid.uuid4().hex}"
    assert (await client.get(nowhere)).status_code == 404

    response = await client.get("/metrics")
    assert missing not in response.text
    assert nowhere not in response.text  # unknown paths must not grow label cardinality
    samples = _samples(response.text)
    assert (
        samples[
            _key(
                "switchboard_http_requests_total",
                method="GET",
                route="/contacts/{contact_id}",
                status="404",
            )
        ]
        >= 1
    )
    assert (
        samples[
            _key("switchboard_http_requests_total", method="GET", route="unmatched", status="404")
        ]
        >= 1
    )


async def test_metrics_name_the_route_of_callbacks_assets_and_wrong_methods(
    client: httpx.AsyncClient,
) -> None:
    """Only unknown paths are `unmatched`: platform callbacks (even refused ones), GraphiQL's
    assets and a known path asked with the wrong method keep their route."""
    calls = [
        ("POST", "/webhooks/whatsapp", "/webhooks/whatsapp"),
        ("POST", "/webhooks/telephony/status", "/webhooks/telephony/status"),
        ("POST", "/webhooks/telephony/incoming", "/webhooks/telephony/incoming"),
        ("GET", "/static/graphiql/graphiql.min.css", "/static/graphiql"),
        ("PUT", "/graphql", "/graphql"),
        ("DELETE", "/healthz", "/healthz"),
        ("PATCH", "/api/v1/contacts", "/contacts"),
        ("PATCH", f"/api/v1/contacts/{uuid.uuid4()}", "/contacts/{contact_id}"),
    ]
    statuses = {}
    for method, path, _route in calls:
        statuses[path] = (await client.request(method, path, content=b"{}")).status_code
    samples = await _metrics(client)
    for method, path, route in calls:
        key = _key(
            "switchboard_http_requests_total",
            method=method,
            route=route,
            status=str(statuses[path]),
        )
        assert samples.get(key, 0) >= 1, (method, path, route, statuses[path])


# --------------------------------------------------------------------------- router errors


@pytest.mark.parametrize(
    "path", ["/does-not-exist", "/api/v1/does-not-exist", "/static/graphiql/missing.js"]
)
async def test_unknown_path_is_404_json(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(JSON)
    body = response.json()
    assert set(body) == {"detail"}
    assert isinstance(body["detail"], str)
    assert body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/healthz", "GET"),
        ("POST", "/metrics", "GET"),
        ("PATCH", "/api/v1/contacts", "POST"),
        ("POST", "/api/v1/openapi.json", "GET"),
        ("PUT", "/graphql", "POST"),
    ],
)
async def test_wrong_method_is_405_json(
    client: httpx.AsyncClient, acme: Tenant, method: str, path: str, allowed: str
) -> None:
    response = await client.request(method, path, headers=acme.headers)
    assert response.status_code == 405, response.text
    assert response.headers["content-type"].startswith(JSON)
    body = response.json()
    assert set(body) == {"detail"}
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert allowed in response.headers.get("allow", ""), response.headers


# --------------------------------------------------------------------------- request ids


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/healthz", 200),
        ("GET", "/nope", 404),
        ("DELETE", "/healthz", 405),
        ("GET", "/api/v1/contacts", 401),
        ("GET", "/api/v1/openapi.json", 200),
        ("GET", "/metrics", 200),
    ],
)
async def test_every_response_carries_a_request_id(
    client: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    first = await client.request(method, path)
    second = await client.request(method, path)
    assert first.status_code == status
    ids = [first.headers.get("x-request-id"), second.headers.get("x-request-id")]
    for value in ids:
        assert value is not None, ids
        assert GENERATED_REQUEST_ID.match(value), ids
    assert ids[0] != ids[1]


async def test_request_id_on_authenticated_and_error_responses(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    ok = await client.get("/api/v1/contacts", headers=acme.headers)
    invalid = await client.post("/api/v1/contacts", json={}, headers=acme.headers)
    assert ok.status_code == 200
    assert invalid.status_code == 422
    for response in (ok, invalid):
        assert GENERATED_REQUEST_ID.match(response.headers["x-request-id"])


@pytest.mark.parametrize(
    "incoming",
    ["req-123", "a1b2c3d4:trace.span_9", "x" * 128, "3f2b8c1e-6a4d-4e2f-9b7a-0c5d1e8f2a64"],
)
async def test_valid_incoming_request_id_is_echoed(
    client: httpx.AsyncClient, acme: Tenant, incoming: str
) -> None:
    for path, headers in (("/healthz", {}), ("/api/v1/contacts", acme.headers), ("/nope", {})):
        response = await client.get(path, headers={**headers, "X-Request-ID": incoming})
        assert response.headers["x-request-id"] == incoming
        assert response.headers.get_list("x-request-id") == [incoming]


@pytest.mark.parametrize("incoming", ["has space", "x" * 129, "semi;colon", 'quote"d', "é"])
async def test_invalid_incoming_request_id_is_replaced(
    client: httpx.AsyncClient, incoming: str
) -> None:
    response = await client.get("/healthz", headers=[("X-Request-ID", incoming.encode("utf-8"))])
    assert response.status_code == 200
    assert GENERATED_REQUEST_ID.match(response.headers["x-request-id"]), response.headers


# --------------------------------------------------------------------------- OpenAPI


@pytest.fixture
async def openapi(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(JSON)
    document: dict[str, Any] = response.json()
    return document


async def test_openapi_lists_every_operation(openapi: dict[str, Any]) -> None:
    assert openapi["openapi"].startswith("3.1.")
    paths = openapi["paths"]
    expected: dict[str, set[str]] = {}
    for operation in OPERATIONS:
        expected.setdefault(f"/api/v1{operation.path}", set()).add(operation.method.lower())
    documented = {
        path: {method for method in item if method in {"get", "post", "put", "patch", "delete"}}
        for path, item in paths.items()
    }
    assert documented == expected

    operation_ids = []
    for operation in OPERATIONS:
        entry = paths[f"/api/v1{operation.path}"][operation.method.lower()]
        operation_ids.append(entry["operationId"])
        declared = {p["name"] for p in entry.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", operation.path)), operation.path
        assert str(operation.status_code) in entry["responses"]
        assert entry.get("security"), f"{operation.method} {operation.path} has no security"
    assert len(operation_ids) == len(set(operation_ids)), "operationId must be unique"


async def test_openapi_declares_auth_and_rate_limit_errors(openapi: dict[str, Any]) -> None:
    schemas = openapi["components"]["schemas"]
    for path, item in openapi["paths"].items():
        for method, entry in item.items():
            where = f"{method.upper()} {path}"
            responses = entry["responses"]
            for status in ("401", "403", "429"):
                assert status in responses, f"{where} does not declare {status}"
                schema = responses[status]["content"][JSON]["schema"]
                assert "$ref" in schema, where
            auth = schemas[_ref_name(responses["401"]["content"][JSON]["schema"])]
            assert set(auth["required"]) >= {"error", "detail"}, where
            error = auth["properties"]["error"]
            assert "invalid_api_key" in error["properties"]["code"]["enum"]
            assert "insufficient_scope" in error["properties"]["code"]["enum"]
            limited = schemas[_ref_name(responses["429"]["content"][JSON]["schema"])]
            assert set(limited["required"]) >= {"error", "message", "retry_after"}, where


def _ref_name(schema: dict[str, Any]) -> str:
    ref: str = schema["$ref"]
    prefix = "#/components/schemas/"
    assert ref.startswith(prefix), ref
    return ref[len(prefix) :]


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


async def test_openapi_says_which_operations_need_the_organization_header(
    openapi: dict[str, Any],
) -> None:
    """Ticket creation refuses a request without `organization_id` (a rule of docs/api.md), so the
    document makes it required there; everywhere else it is optional (checked when sent)."""
    required = {
        f"{method.upper()} {path}"
        for path, item in openapi["paths"].items()
        for method, operation in item.items()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "organization_id" and parameter["required"]
    }
    assert required == {"POST /api/v1/inbox/tickets"}


async def test_openapi_passes_openapi_spec_validator(openapi: dict[str, Any]) -> None:
    # The reference validator (it once found 8 errors: `default: null` on update fields that
    # may not be null).
    errors = [error.message for error in OpenAPIV31SpecValidator(openapi).iter_errors()]
    assert errors == []
    validate(openapi)
    # ...and it bites: a non-nullable field with a null default is refused.
    broken = copy.deepcopy(openapi)
    broken["components"]["schemas"]["ContactUpdate"]["properties"]["name"]["default"] = None
    assert list(OpenAPIV31SpecValidator(broken).iter_errors())


async def test_openapi_documents_body_limits_and_media_type(openapi: dict[str, Any]) -> None:
    create = openapi["paths"]["/api/v1/contacts"]["post"]
    assert {"413", "415"} <= set(create["responses"])
    delete = openapi["paths"]["/api/v1/contacts/{contact_id}"]["delete"]
    assert not {"413", "415"} & set(delete["responses"])
    path_id = delete["parameters"][0]
    assert path_id["schema"] == {"type": "string", "format": "uuid"}
    header = next(p for p in create["parameters"] if p["name"] == "organization_id")
    assert header["schema"] == {"type": "string", "format": "uuid"}


async def test_openapi_is_a_valid_openapi_31_document(openapi: dict[str, Any]) -> None:
    # The OpenAPI 3.1 meta-schema check schemathesis runs on load (jsonschema_rs underneath).
    schemathesis.openapi.from_dict(openapi).validate()
    # ...which does bite: the same document without `info` is refused.
    broken = {key: value for key, value in openapi.items() if key != "info"}
    with pytest.raises(jsonschema_rs.ValidationError):
        schemathesis.openapi.from_dict(broken).validate()

    # Every component is a valid JSON Schema 2020-12 (the OpenAPI 3.1 dialect) ...
    schemas = openapi["components"]["schemas"]
    for name, schema in schemas.items():
        try:
            jsonschema_rs.meta.validate(schema)
        except jsonschema_rs.ValidationError as exc:
            pytest.fail(f"components.schemas.{name} is not valid JSON Schema: {exc}")
    # ... and every $ref resolves.
    for ref in set(_refs(openapi)):
        assert _ref_name({"$ref": ref}) in schemas, f"dangling $ref {ref}"
    # Every operation loads into schemathesis without error.
    loaded = schemathesis.openapi.from_dict(openapi)
    errors = [
        str(result.err()) for result in loaded.get_all_operations() if isinstance(result, Err)
    ]
    assert not errors, errors


# --------------------------------------------------------------------------- GraphiQL


@pytest.mark.parametrize(("path", "name"), [("/graphql", "graphiql"), ("/api/v1/docs", "swagger")])
async def test_ide_pages_are_self_hosted(client: httpx.AsyncClient, path: str, name: str) -> None:
    response = await client.get(path, headers={"Accept": "text/html"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert name in html.lower()
    assert "https://" not in html
    assert "http://" not in html

    assets = [url for url in asset_urls(html) if url]
    assert any(url.endswith(".js") for url in assets), assets
    assert any(url.endswith(".css") for url in assets), assets
    for url in assets:
        assert url.startswith("/"), f"{url} is not served by this app"
        asset = await client.get(url)
        assert asset.status_code == 200, url
        assert asset.content, url
        expected = "text/css" if url.endswith(".css") else "javascript"
        assert expected in asset.headers["content-type"], (url, asset.headers)


async def test_the_landing_page_links_the_apis_own_pages(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    links = asset_urls(response.text)
    assert {"/api/v1/docs", "/graphql", "/api/v1/openapi.json", "/healthz"} <= set(links)
    for link in links:
        assert (await client.get(link)).status_code == 200, link


def test_the_rest_reference_vendors_only_built_files() -> None:
    """Swagger UI's built bundle, stylesheet and licences: nothing else of the npm package."""
    shipped = sorted(path.name for path in REFERENCE_DIR.iterdir())
    assert shipped == sorted(
        [
            *REFERENCE_ASSETS,
            "LICENSE.swagger-ui.txt",
            "NOTICE.swagger-ui.txt",
            "swagger-ui-bundle.js.LICENSE.txt",
        ]
    )
    assert "validatorUrl: null" in reference_html()


# --------------------------------------------------------------------------- GraphQL SDL


def test_checked_in_graphql_schema_is_current() -> None:
    checked_in = REPO_ROOT / "schema.graphql"
    assert checked_in.exists(), "schema.graphql is missing: run `make schema` and commit it"
    assert checked_in.read_text() == schema_sdl(), (
        "schema.graphql differs from app.graphql.schema.schema_sdl(): "
        "run `make schema` and commit the result"
    )
