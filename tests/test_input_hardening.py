"""Hostile and careless input on REST and GraphQL (hardening issue §1), with the exact inputs
the issue reports: each answers a 4xx in the documented shape, never a 5xx, and stores
nothing; data stored before a limit existed is still listed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.applications import Starlette
from starlette.responses import Response

from app.access.scopes import Scope
from app.contacts.models import Contact
from app.core.jsonutil import dumps, dumps_str, loads
from app.events.models import Event
from app.kit.body import BodyTooLarge, read_body
from app.main import create_app
from app.resources import Resources
from app.webhooks.models import WebhookSubscription
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.router import RestRoutes
from tests.conftest import Tenant, graphql, make_settings

CONTACTS = "/api/v1/contacts"
AGENTS = "/api/v1/agents"
WEBHOOKS = "/api/v1/webhooks"
MIB = 1024 * 1024
JSON_HEADERS = {"Content-Type": "application/json"}


def nested(levels: int, leaf: Any = 1) -> Any:
    """{"a": {"a": ... leaf}} with `levels` objects."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


async def contact_count(client: httpx.AsyncClient, tenant: Tenant) -> int:
    response = await client.get(CONTACTS, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return int(response.json()["total_count"])


async def agent_count(client: httpx.AsyncClient, tenant: Tenant) -> int:
    response = await client.get(AGENTS, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return int(response.json()["total_count"])


def contact(**fields: Any) -> dict[str, Any]:
    return {"phone_number": "+14155550100", "name": "Ada", **fields}


# --------------------------------------------------------------------------- body size


async def test_a_10_mb_body_is_413_and_nothing_is_stored(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    body = json.dumps(contact(notes="x" * (10 * MIB))).encode()
    response = await client.post(CONTACTS, content=body, headers={**acme.headers, **JSON_HEADERS})
    assert response.status_code == 413
    assert response.json() == {"detail": f"Request body is larger than the limit of {MIB} bytes"}
    assert await contact_count(client, acme) == 0


async def test_a_streamed_body_without_length_is_cut_at_the_limit(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"phone_number": "+14155550100", "name": "Ada", "notes": "'
        for _ in range(10 * 16):  # 10 MiB in 64 KiB chunks, unless reading stops
            sent += 1
            yield b"x" * (64 * 1024)
        yield b'"}'

    response = await client.post(
        CONTACTS, content=chunks(), headers={**acme.headers, **JSON_HEADERS}
    )
    assert response.status_code == 413
    assert "detail" in response.json()
    assert await contact_count(client, acme) == 0


async def test_agents_answer_413_in_their_shape(client: httpx.AsyncClient, acme: Tenant) -> None:
    body = json.dumps({"name": "A", "agent_config": {"system_prompt": "x" * (2 * MIB)}})
    response = await client.post(AGENTS, content=body, headers={**acme.headers, **JSON_HEADERS})
    assert response.status_code == 413
    assert response.json() == {
        "error": 413,
        "message": f"Request body is larger than the limit of {MIB} bytes",
    }
    assert await agent_count(client, acme) == 0


async def test_graphql_answers_413_as_a_graphql_error(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    query = "{ viewer { organizationId } }" + " " * (2 * MIB)
    response = await client.post("/graphql", json={"query": query}, headers=acme.headers)
    assert response.status_code == 413
    assert response.json() == {
        "errors": [
            {
                "message": f"Request body is larger than the limit of {MIB} bytes",
                "extensions": {"code": "body_too_large"},
            }
        ]
    }


async def test_the_reader_stops_at_the_limit_and_trusts_a_large_content_length() -> None:
    calls = 0

    async def endless() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    with pytest.raises(BodyTooLarge):
        await read_body(endless, httpx.Headers(), 10_000)  # type: ignore[arg-type]
    assert calls == 11  # stopped with the first chunk past the limit

    async def never() -> dict[str, Any]:
        raise AssertionError("a body announced over the limit must not be read")

    with pytest.raises(BodyTooLarge):
        await read_body(never, httpx.Headers({"content-length": "10001"}), 10_000)  # type: ignore[arg-type]


async def test_the_limit_is_a_setting(
    resources: Resources, sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    resources.settings = make_settings(
        resources.settings.database_url, resources.settings.var_dir, max_body_bytes=4096
    )
    app = create_app(resources=resources)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        small = await client.post(CONTACTS, json=contact(notes="x" * 3000), headers=acme.headers)
        assert small.status_code == 200, small.text
        large = await client.post(CONTACTS, json=contact(notes="x" * 5000), headers=acme.headers)
        assert large.status_code == 413
        assert large.json() == {"detail": "Request body is larger than the limit of 4096 bytes"}


async def test_an_operation_declares_its_own_limit_and_media_type(
    resources: Resources, acme: Tenant
) -> None:
    """What an upload route does: a larger limit than JSON routes, a multipart body read by
    the handler itself from the same bounded stream."""

    async def upload(ctx: RequestContext) -> Response:
        form = await ctx.request.form()
        file = form["file"]
        assert not isinstance(file, str)
        return json_response({"size": len(await file.read())}, 201)

    operation = Operation(
        "POST",
        "/uploads",
        upload,
        Scope.FULL_ACCESS,
        "Upload",
        "test",
        status_code=201,
        media_type="multipart/form-data",
        max_body_bytes=3 * MIB,
    )
    app = Starlette(routes=[RestRoutes("/api/v1", [operation], {})])
    app.state.resources = resources
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        two_mib = {"file": ("a.txt", b"x" * (2 * MIB), "text/plain")}
        accepted = await client.post("/api/v1/uploads", files=two_mib, headers=acme.headers)
        assert accepted.status_code == 201, accepted.text
        assert accepted.json() == {"size": 2 * MIB}
        four_mib = {"file": ("a.txt", b"x" * (4 * MIB), "text/plain")}
        refused = await client.post("/api/v1/uploads", files=four_mib, headers=acme.headers)
        assert refused.status_code == 413
        as_json = await client.post("/api/v1/uploads", json={"file": "x"}, headers=acme.headers)
        assert as_json.status_code == 415
        assert as_json.json() == {"detail": "Content-Type must be multipart/form-data"}


# --------------------------------------------------------------------------- Content-Type


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/xml",
        "multipart/form-data; boundary=x",
        None,
        "application/json; charset=latin-1",
        "application/jsonx",
    ],
)
async def test_a_body_that_is_not_json_is_415(
    client: httpx.AsyncClient, acme: Tenant, content_type: str | None
) -> None:
    headers = dict(acme.headers)
    if content_type is not None:
        headers["Content-Type"] = content_type
    body = json.dumps(contact()).encode()
    response = await client.post(CONTACTS, content=body, headers=headers)
    assert response.status_code == 415
    assert response.json() == {"detail": "Content-Type must be application/json"}
    assert await contact_count(client, acme) == 0
    agent = await client.post(AGENTS, content=b'{"name": "A"}', headers=headers)
    assert agent.status_code == 415
    assert agent.json() == {"error": 415, "message": "Content-Type must be application/json"}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8"],
)
async def test_json_with_or_without_utf8_charset_is_accepted(
    client: httpx.AsyncClient, acme: Tenant, content_type: str
) -> None:
    headers = {**acme.headers, "Content-Type": content_type}
    response = await client.post(CONTACTS, content=json.dumps(contact()), headers=headers)
    assert response.status_code == 200, response.text


async def test_no_body_at_all_is_a_missing_body_not_a_media_type_error(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.post(CONTACTS, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]


# --------------------------------------------------------------------------- nesting


async def test_custom_fields_nested_252_levels_is_422_naming_the_field(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    for levels in (252, 1000):  # written by hand: json.dumps itself stops before 1000
        deep = '{"a":' * levels + "1" + "}" * levels
        body = '{"phone_number": "+14155550100", "name": "A", "custom_fields": ' + deep + "}"
        response = await client.post(
            CONTACTS, content=body, headers={**acme.headers, **JSON_HEADERS}
        )
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", "custom_fields"]
        assert "nested more than 32 levels" in error["msg"]
    assert await contact_count(client, acme) == 0
    # 32 levels is the limit, inclusive.
    ok = await client.post(CONTACTS, json=contact(custom_fields=nested(32)), headers=acme.headers)
    assert ok.status_code == 200, ok.text


async def test_agent_tool_parameters_nested_deep_are_400_naming_the_field(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    tool = {
        "name": "t",
        "description": "d",
        "url": "https://93.184.216.34/t",
        "parameters": {"type": "object", "properties": {"p": nested(252)}},
    }
    body = json.dumps({"name": "A", "agent_config": {"custom_tools": [tool]}})
    response = await client.post(AGENTS, content=body, headers={**acme.headers, **JSON_HEADERS})
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert message.startswith("Validation error: agent_config.custom_tools.0.parameters:")
    assert await agent_count(client, acme) == 0


CREATE_CONTACT = """mutation($input: ContactCreateInput!) {
  createContact(input: $input) { contact { id } errors { code field } } }"""


async def test_graphql_create_contact_refuses_deep_custom_fields(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    # Deeper than the field allows, within what the gateway reads: the field is named.
    variables = {"input": {"phoneNumber": "+14155550100", "name": "A", "customFields": nested(100)}}
    body = await graphql(client, CREATE_CONTACT, variables, acme.headers)
    payload = body["data"]["createContact"]
    assert payload["contact"] is None
    assert payload["errors"][0]["code"] == "value_error"
    assert payload["errors"][0]["field"] in ("customFields", "custom_fields")
    assert await contact_count(client, acme) == 0


async def test_graphql_refuses_the_issue_nesting_before_running_anything(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    # The issue's 252 levels: the gateway refuses the body itself (400, documented shape).
    variables = {"input": {"phoneNumber": "+14155550100", "name": "A", "customFields": nested(252)}}
    response = await client.post(
        "/graphql", json={"query": CREATE_CONTACT, "variables": variables}, headers=acme.headers
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"
    assert "x-request-id" in response.headers
    assert await contact_count(client, acme) == 0


async def test_deep_data_stored_before_the_limit_still_lists_and_emits(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    deep = nested(252, leaf="bottom")
    created = await client.post(CONTACTS, json=contact(), headers=acme.headers)
    contact_id = created.json()["id"]
    async with sessionmaker() as session:  # as an older release stored it, past validation
        await session.execute(
            update(Contact).where(Contact.id == contact_id).values(custom_fields=deep)
        )
        await session.commit()

    listed = await client.get(CONTACTS, headers=acme.headers)
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"][0]["custom_fields"] == deep
    got = await client.get(f"{CONTACTS}/{contact_id}", headers=acme.headers)
    assert got.status_code == 200
    assert got.json()["custom_fields"] == deep
    on_graphql = await graphql(
        client, "{ contacts(first: 5) { nodes { customFields } } }", headers=acme.headers
    )
    assert on_graphql["data"]["contacts"]["nodes"][0]["customFields"] == deep
    # A write of that contact records its event (the payload the fan-out job serializes).
    renamed = await client.put(f"{CONTACTS}/{contact_id}", json={"name": "B"}, headers=acme.headers)
    assert renamed.status_code == 200, renamed.text
    async with sessionmaker() as session:
        payloads = (
            await session.scalars(
                select(Event.data).where(
                    Event.organization_id == acme.organization_id, Event.type == "lead.updated"
                )
            )
        ).all()
    assert [payload["custom_fields"] for payload in payloads] == [deep]
    assert json.loads(dumps({"data": payloads[0]}))["data"]["custom_fields"] == deep


def test_the_serializer_writes_what_orjson_refuses_in_the_same_format() -> None:
    from datetime import UTC, datetime

    moment = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    deep = nested(300)
    assert json.loads(dumps({"at": moment, "deep": deep})) == {
        "at": "2026-01-02T03:04:05.000006Z",
        "deep": deep,
    }
    assert dumps_str({"n": 2**70}) == '{"n":1180591620717411303424}'
    assert dumps({"at": moment}) == b'{"at":"2026-01-02T03:04:05.000006Z"}'
    # Reading keeps integers exact where orjson alone would give floats.
    assert loads(b'{"n": 18446744073709551617}') == {"n": 18446744073709551617}
    assert loads('{"n": -9223372036854775809}') == {"n": -9223372036854775809}


@pytest.mark.parametrize(
    "text",
    [
        '{"note": "caf\u00e9 \u2603", "n": 123456789012345678901234567890}',
        '{"before": "' + "9" * 18 + '", "n": [1, 2, 98765432109876543210]}',
        '["\\ud83d\\ude00", "\U0001f600", 18446744073709551616]',
        "1" * 40,
    ],
)
def test_an_integer_past_64_bits_reads_exact_wherever_it_is_in_the_text(text: str) -> None:
    expected = json.loads(text)
    assert loads(text) == expected
    assert loads(text.encode()) == expected
    assert loads(memoryview(text.encode())) == expected
    assert repr(loads(text)) == repr(expected)  # integers, never floats


# --------------------------------------------------------------------------- silent changes


async def test_a_phone_number_with_an_extension_is_refused(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.post(
        CONTACTS, json=contact(phone_number="+1 415 555 0100 ext. 5"), headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {
        "detail": "Invalid phone number format or length: extensions are not supported"
    }
    assert await contact_count(client, acme) == 0


@pytest.mark.parametrize(
    "number",
    [2**53, 9007199254740993, -(2**53), 2**64 + 1, 10**30, "-5.605772741429599e+16", "1e300"],
)
async def test_numbers_beyond_2_53_in_custom_fields_are_refused(
    client: httpx.AsyncClient, acme: Tenant, number: int | str
) -> None:
    body = f'{{"phone_number": "+14155550100", "name": "A", "custom_fields": {{"n": {number}}}}}'
    response = await client.post(CONTACTS, content=body, headers={**acme.headers, **JSON_HEADERS})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "custom_fields"]
    assert "2^53" in error["msg"]
    assert await contact_count(client, acme) == 0


async def test_the_largest_exact_integer_comes_back_exact(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    largest = 2**53 - 1
    body = '{"phone_number": "+14155550100", "name": "A", "custom_fields": {"n": %d, "m": -%d}}'
    response = await client.post(
        CONTACTS, content=body % (largest, largest), headers={**acme.headers, **JSON_HEADERS}
    )
    assert response.status_code == 200, response.text
    got = await client.get(f"{CONTACTS}/{response.json()['id']}", headers=acme.headers)
    assert '"n":9007199254740991' in got.text
    assert got.json()["custom_fields"] == {"n": largest, "m": -largest}


@pytest.mark.parametrize("name", ["   ", "\t\n", "\u00a0\u2003", "\ufeff"])
async def test_whitespace_only_names_are_refused_everywhere(
    client: httpx.AsyncClient, acme: Tenant, name: str
) -> None:
    response = await client.post(CONTACTS, json=contact(name=name), headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "name"]
    agent = await client.post(AGENTS, json={"name": name}, headers=acme.headers)
    assert agent.status_code == 400
    assert (
        agent.json()["message"] == "Validation error: name: String should not be only white space"
    )
    assert await contact_count(client, acme) == 0
    assert await agent_count(client, acme) == 0


async def test_names_are_trimmed_by_the_same_rule(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(CONTACTS, json=contact(name="  Ada  "), headers=acme.headers)
    assert response.json()["name"] == "Ada"
    agent = await client.post(AGENTS, json={"name": "  Ava  "}, headers=acme.headers)
    assert agent.json()["name"] == "Ava"


async def test_organization_names_follow_the_same_rule(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    from app.kit.errors import InvalidInput
    from app.organizations.service import create_organization

    async with sessionmaker() as session:
        with pytest.raises(InvalidInput, match="only white space"):
            await create_organization(session, "\u00a0 ")
        organization = await create_organization(session, "  Acme  ")
        assert organization.name == "Acme"


async def test_a_thousand_copies_of_one_tag_are_one_tag(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.post(CONTACTS, json=contact(tags=["vip"] * 1000), headers=acme.headers)
    assert response.status_code == 200, response.text
    assert response.json()["tags"] == ["vip"]
    updated = await client.put(
        f"{CONTACTS}/{response.json()['id']}",
        json={"tags": ["a", " a ", *(["b"] * 998)]},
        headers=acme.headers,
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["tags"] == ["a", "b"]
    # The cap is on distinct tags.
    too_many = await client.post(
        CONTACTS, json=contact(tags=[f"t{n}" for n in range(101)]), headers=acme.headers
    )
    assert too_many.status_code == 422


async def test_null_for_a_required_field_names_the_field(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    created = await client.post(CONTACTS, json=contact(), headers=acme.headers)
    url = f"{CONTACTS}/{created.json()['id']}"
    for field in ("name", "phone_number", "tags"):
        response = await client.put(url, json={field: None}, headers=acme.headers)
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", field]
    webhook = await client.post(
        WEBHOOKS,
        json={"url": "https://93.184.216.34/h", "events": ["lead.created"]},
        headers=acme.headers,
    )
    response = await client.put(
        f"{WEBHOOKS}/{webhook.json()['id']}", json={"url": None}, headers=acme.headers
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "url"]


async def test_an_agent_body_that_is_a_list_does_not_name_a_class(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    created = await client.post(AGENTS, json={"name": "Ava"}, headers=acme.headers)
    for method, url in (("POST", AGENTS), ("PUT", f"{AGENTS}/{created.json()['id']}")):
        response = await client.request(method, url, json=[], headers=acme.headers)
        assert response.status_code == 400
        assert response.json() == {"error": 400, "message": "Input should be an object"}
        assert "Agent" not in response.text
    nested_config = await client.post(
        AGENTS, json={"name": "A", "agent_config": []}, headers=acme.headers
    )
    assert "AgentConfig" not in nested_config.text
    assert await agent_count(client, acme) == 1


@pytest.mark.parametrize("value", [0, 1, "false", "true", "no"])
async def test_booleans_are_strict(client: httpx.AsyncClient, acme: Tenant, value: Any) -> None:
    body = {"name": "A", "agent_config": {"booking_config": {"booking_enabled": value}}}
    response = await client.post(AGENTS, json=body, headers=acme.headers)
    assert response.status_code == 400
    assert "booking_enabled" in response.json()["message"]
    webhook = await client.post(
        WEBHOOKS,
        json={"url": "https://93.184.216.34/h", "events": ["lead.created"]},
        headers=acme.headers,
    )
    refused = await client.put(
        f"{WEBHOOKS}/{webhook.json()['id']}", json={"is_active": value}, headers=acme.headers
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "is_active"]
    assert await agent_count(client, acme) == 0


# --------------------------------------------------------------------------- outbound URLs


TOOL_URLS = [
    "http://127.0.0.1:6379",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://localhost:8000/",
    "http://10.0.0.5/internal",
]


@pytest.mark.parametrize("url", TOOL_URLS)
async def test_agent_tool_urls_go_through_the_url_guard(
    client: httpx.AsyncClient, acme: Tenant, url: str
) -> None:
    tool = {"name": "t", "description": "d", "url": url}
    for config, where in (
        ({"custom_tools": [tool]}, "agent_config.custom_tools[0].url"),
        ({"mcp_tools": [{"name": "m", "url": url}]}, "agent_config.mcp_tools[0].url"),
        ({"llm_base_url": url}, "agent_config.llm_base_url"),
    ):
        response = await client.post(
            AGENTS, json={"name": "A", "agent_config": config}, headers=acme.headers
        )
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": 400,
            "message": f"{where}: URL must not resolve to a private, loopback or link-local "
            "address",
        }
    assert await agent_count(client, acme) == 0
    created = await client.post(AGENTS, json={"name": "A"}, headers=acme.headers)
    replaced = await client.put(
        f"{AGENTS}/{created.json()['id']}",
        json={"agent_config": {"custom_tools": [tool]}},
        headers=acme.headers,
    )
    assert replaced.status_code == 400
    got = await client.get(f"{AGENTS}/{created.json()['id']}", headers=acme.headers)
    assert got.json()["tasks"] == []


async def test_graphql_agent_tool_urls_go_through_the_url_guard(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    mutation = """mutation($input: AgentCreateInput!) {
      createAgent(input: $input) { agent { id } errors { code message } } }"""
    tool = {"name": "t", "description": "d", "url": "http://127.0.0.1:6379"}
    body = await graphql(
        client,
        mutation,
        {"input": {"name": "A", "agentConfig": {"customTools": [tool]}}},
        acme.headers,
    )
    payload = body["data"]["createAgent"]
    assert payload["agent"] is None
    assert payload["errors"][0]["code"] == "invalid_input"
    assert "private, loopback or link-local" in payload["errors"][0]["message"]


async def test_private_tool_urls_are_allowed_when_the_operator_allows_them(
    resources: Resources, acme: Tenant
) -> None:
    resources.settings = make_settings(
        resources.settings.database_url,
        resources.settings.var_dir,
        allow_private_webhook_urls=True,
    )
    app = create_app(resources=resources)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        tool = {"name": "t", "description": "d", "url": "http://127.0.0.1:6379"}
        response = await client.post(
            AGENTS,
            json={"name": "A", "agent_config": {"custom_tools": [tool]}},
            headers=acme.headers,
        )
        assert response.status_code == 201, response.text


# --------------------------------------------------------------------------- operators


async def test_rest_shows_why_a_subscription_was_disabled(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    created = await client.post(
        WEBHOOKS,
        json={"url": "https://93.184.216.34/h", "events": ["lead.created"]},
        headers=acme.headers,
    )
    assert created.json()["disabled_reason"] is None
    webhook_id = created.json()["id"]
    reason = "The receiver answered 410 Gone"
    async with sessionmaker() as session:  # what the delivery engine does on a 410
        await session.execute(
            update(WebhookSubscription)
            .where(WebhookSubscription.id == webhook_id)
            .values(is_active=False, disabled_reason=reason)
        )
        await session.commit()
    got = await client.get(f"{WEBHOOKS}/{webhook_id}", headers=acme.headers)
    assert (got.json()["is_active"], got.json()["disabled_reason"]) == (False, reason)
    listed = await client.get(WEBHOOKS, headers=acme.headers)
    assert listed.json()["webhooks"][0]["disabled_reason"] == reason
    # Switched back on by a user: no reason any more.
    enabled = await client.put(
        f"{WEBHOOKS}/{webhook_id}", json={"is_active": True}, headers=acme.headers
    )
    assert enabled.json()["disabled_reason"] is None


async def test_nothing_is_stored_by_any_refusal_above(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """A sweep of the refusals in one organization: not one row written."""
    bodies = [
        contact(phone_number="+1 415 555 0100 ext. 5"),
        contact(name=" "),
        contact(custom_fields=nested(252)),
        contact(custom_fields={"n": 2**53}),
    ]
    for body in bodies:
        response = await client.post(CONTACTS, json=body, headers=acme.headers)
        assert 400 <= response.status_code < 500
    async with sessionmaker() as session:
        count = await session.scalar(
            select(func.count())
            .select_from(Contact)
            .where(Contact.organization_id == acme.organization_id)
        )
    assert count == 0


# --------------------------------------------------------------------------- query strings


async def test_unknown_or_repeated_query_parameters_are_422(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    unknown = await client.get(f"{CONTACTS}?limit=5&colour=red", headers=acme.headers)
    assert unknown.status_code == 422
    assert unknown.json()["detail"] == [
        {"loc": ["query", "colour"], "msg": "Unknown query parameter", "type": "extra_forbidden"}
    ]
    repeated = await client.get(f"{CONTACTS}?tag=a&tag=b", headers=acme.headers)
    assert repeated.status_code == 422
    assert repeated.json()["detail"][0]["loc"] == ["query", "tag"]
    assert repeated.json()["detail"][0]["type"] == "repeated_parameter"
    agents = await client.get(f"{AGENTS}?limit=5&limit=6", headers=acme.headers)
    assert agents.status_code == 400
    assert agents.json()["message"].startswith("Validation error: limit:")
    assert (await client.get(f"{CONTACTS}?limit=5&tag=a", headers=acme.headers)).status_code == 200
