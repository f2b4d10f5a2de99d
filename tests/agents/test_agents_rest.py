"""Agents over REST: the documented shapes and `{error, message}` bodies, agent_config rules,
full updates, isolation, cursor paging and scopes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from app.agents.repository import AgentRepository
from tests.conftest import Tenant, TenantFactory

BASE = "/api/v1/agents"
CREATE_SHAPE = {
    "id",
    "name",
    "organization_id",
    "timezone",
    "agent_type",
    "is_active",
    "created_at",
    "updated_at",
}
GET_SHAPE = {
    "id",
    "name",
    "status",
    "description",
    "created_at",
    "updated_at",
    "configuration",
    "tasks",
}
LIST_SHAPE = GET_SHAPE | {"agent_type", "timezone", "is_active"}
NOT_FOUND = {"error": 404, "message": "Agent not found"}
INVALID_ID = {"error": 400, "message": "Invalid or missing agent_id"}
VOICE = {"voice_id": "21m00Tcm4TlvDq8ikWAM", "name": "Rachel"}
FULL_CONFIG: dict[str, Any] = {
    "welcome_message": "Hi, this is Ava. How can I help?",
    "system_prompt": "You are Ava, the receptionist of Acme Dental.",
    "language": "es-MX",
    "llm_provider": "anthropic",
    "llm_model": "claude-3-5-sonnet-latest",
    "temperature": 0.2,
    "voice_settings": {**VOICE, "provider": "cartesia"},
    "booking_config": {"booking_enabled": True, "provider": "cal_com", "prompt": "When asked"},
    "custom_tools": [
        {
            "name": "lookup_order",
            "description": "Find an order",
            "url": "https://93.184.216.34/orders",
            "method": "GET",
            "parameters": {
                "type": "object",
                "properties": {"number": {"type": "string"}},
                "required": ["number"],
            },
        },
        {"name": "refund", "description": "Refund an order", "url": "http://93.184.216.34/r"},
    ],
    "mcp_tools": [
        {"name": "crm", "url": "https://93.184.216.35/mcp", "allowed_tools": ["find", "note"]},
        {"name": "docs", "url": "https://93.184.216.36/sse", "transport": "sse"},
    ],
}


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    response = await client.post(BASE, json={"name": "Ava", **fields}, headers=tenant.headers)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def get(client: httpx.AsyncClient, tenant: Tenant, agent_id: str) -> dict[str, Any]:
    response = await client.get(f"{BASE}/{agent_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_create_returns_create_shape_with_defaults(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    agent = await create(client, acme, name="  Front desk  ")
    assert set(agent) == CREATE_SHAPE
    assert agent["name"] == "Front desk"
    assert agent["organization_id"] == acme.organization_id
    assert agent["agent_type"] == "prompt"
    assert agent["timezone"] == "UTC"
    assert agent["is_active"] == "active"
    assert uuid.UUID(agent["id"])
    assert agent["created_at"].endswith("Z")
    assert agent["created_at"] == agent["updated_at"]

    detail = await get(client, acme, agent["id"])
    assert detail == {
        "id": agent["id"],
        "name": "Front desk",
        "status": "active",
        "description": None,
        "created_at": agent["created_at"],
        "updated_at": agent["updated_at"],
        "configuration": {
            "language": "en-US",
            "voice": None,
            "model": "gpt-4o-mini",
            "temperature": 0.7,
        },
        "tasks": [],
    }


async def test_get_shape_derives_configuration_and_tasks(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    agent = await create(
        client, acme, agent_type="static", timezone="America/New_York", agent_config=FULL_CONFIG
    )
    assert agent["agent_type"] == "static"
    assert agent["timezone"] == "America/New_York"
    detail = await get(client, acme, agent["id"])
    assert set(detail) == GET_SHAPE
    assert detail["description"] == FULL_CONFIG["system_prompt"]
    assert detail["configuration"] == {
        "language": "es-MX",
        "voice": VOICE["voice_id"],
        "model": "claude-3-5-sonnet-latest",
        "temperature": 0.2,
    }
    assert detail["tasks"] == [
        "book_appointment",
        "lookup_order",
        "refund",
        "crm.find",
        "crm.note",
        "docs.*",
    ]


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "gpt-4o-mini"),
        ("anthropic", "claude-3-5-haiku-latest"),
        ("groq", "llama-3.3-70b-versatile"),
    ],
)
async def test_model_defaults_to_the_providers(
    client: httpx.AsyncClient, acme: Tenant, provider: str, model: str
) -> None:
    agent = await create(client, acme, agent_config={"llm_provider": provider})
    assert (await get(client, acme, agent["id"]))["configuration"]["model"] == model


async def test_booking_disabled_is_no_task_and_temperature_bounds(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    config = {"booking_config": {"prompt": "later"}, "temperature": 0, "voice_settings": VOICE}
    agent = await create(client, acme, agent_config=config)
    detail = await get(client, acme, agent["id"])
    assert detail["tasks"] == []
    assert detail["configuration"]["temperature"] == 0
    agent = await create(client, acme, agent_config={"temperature": 1})
    assert (await get(client, acme, agent["id"]))["configuration"]["temperature"] == 1


def _config(**fields: Any) -> dict[str, Any]:
    return {"name": "Ava", "agent_config": fields}


def _tool(**fields: Any) -> dict[str, Any]:
    return {"name": "t", "description": "d", "url": "https://93.184.216.34/t", **fields}


INVALID_BODIES = [
    pytest.param({}, "name: Field required", id="missing-name"),
    pytest.param({"name": ""}, "name: String should have at least 1 character", id="empty-name"),
    pytest.param({"name": "   "}, "name: String should not be only white space", id="blank-name"),
    pytest.param({"name": "x" * 256}, "name: String should have at most 255", id="long-name"),
    pytest.param({"name": 5}, "name: Input should be a valid string", id="name-not-string"),
    pytest.param({"name": "A", "agent_type": "dynamic"}, "agent_type:", id="agent-type"),
    pytest.param({"name": "A", "timezone": "Mars/Olympus"}, "unknown timezone", id="timezone"),
    pytest.param({"name": "A", "timezone": "../etc"}, "timezone:", id="timezone-form"),
    pytest.param({"name": "A", "agent_config": []}, "agent_config:", id="config-not-object"),
    pytest.param(
        _config(voice_settings={"name": "Rachel"}),
        "agent_config.voice_settings.voice_id: Field required",
        id="voice-id-missing",
    ),
    pytest.param(
        _config(voice_settings={"voice_id": "v"}),
        "agent_config.voice_settings.name: Field required",
        id="voice-name-missing",
    ),
    pytest.param(
        _config(voice_settings={**VOICE, "provider": "polly"}),
        "agent_config.voice_settings.provider: Input should be 'elevenlabs' or 'cartesia'",
        id="voice-provider",
    ),
    pytest.param(
        _config(llm_provider="mistral"),
        "agent_config.llm_provider: Input should be 'openai', 'anthropic' or 'groq'",
        id="llm-provider",
    ),
    pytest.param(_config(llm_model="bad model"), "agent_config.llm_model:", id="llm-model"),
    pytest.param(_config(temperature=1.5), "agent_config.temperature:", id="temperature-high"),
    pytest.param(_config(temperature=-0.1), "agent_config.temperature:", id="temperature-low"),
    pytest.param(_config(language="english!"), "agent_config.language:", id="language"),
    pytest.param(
        _config(booking_config={"provider": "outlook"}),
        "agent_config.booking_config.provider: Input should be 'google_calendar' or 'cal_com'",
        id="booking-provider",
    ),
    pytest.param(
        _config(booking_config={"booking_enabled": "sometimes"}),
        "agent_config.booking_config.booking_enabled:",
        id="booking-enabled",
    ),
    pytest.param(
        _config(custom_tools=[{"name": "t", "description": "d"}]),
        "agent_config.custom_tools.0.url: Field required",
        id="tool-url-missing",
    ),
    pytest.param(
        _config(custom_tools=[_tool(url="ftp://example.com/x")]),
        "agent_config.custom_tools.0.url:",
        id="tool-url-scheme",
    ),
    pytest.param(
        _config(custom_tools=[_tool(url="https://user:pw@example.com/x")]),
        "URL must not contain credentials",
        id="tool-url-credentials",
    ),
    pytest.param(
        _config(custom_tools=[_tool(method="FETCH")]),
        "agent_config.custom_tools.0.method:",
        id="tool-method",
    ),
    pytest.param(
        _config(custom_tools=[_tool(name="has space")]),
        "agent_config.custom_tools.0.name:",
        id="tool-name",
    ),
    pytest.param(
        _config(custom_tools=[_tool(parameters={"type": "string"})]),
        'parameters must be a JSON Schema with "type": "object"',
        id="tool-parameters-type",
    ),
    pytest.param(
        _config(custom_tools=[_tool(parameters={"properties": {"a": 1}})]),
        "parameters.properties must map each parameter name to a JSON Schema",
        id="tool-parameters-properties",
    ),
    pytest.param(
        _config(custom_tools=[_tool(parameters={"properties": {}, "required": ["a"]})]),
        "parameters.required names unknown properties: a",
        id="tool-parameters-required",
    ),
    pytest.param(
        _config(custom_tools=[_tool(), _tool()]),
        "custom_tools names must be unique; repeated: t",
        id="tool-names-repeat",
    ),
    pytest.param(
        _config(custom_tools=[_tool()] * 51),
        "agent_config.custom_tools: List should have at most 50 items",
        id="too-many-tools",
    ),
    pytest.param(
        _config(mcp_tools=[{"name": "crm", "url": "https://m.example.com", "transport": "ws"}]),
        "agent_config.mcp_tools.0.transport: Input should be 'streamable_http' or 'sse'",
        id="mcp-transport",
    ),
    pytest.param(
        _config(mcp_tools=[{"name": "crm", "url": "https://m.example.com", "allowed_tools": []}]),
        "agent_config.mcp_tools.0.allowed_tools:",
        id="mcp-allowed-empty",
    ),
    pytest.param(
        _config(mcp_tools=[{"name": "crm"}]),
        "agent_config.mcp_tools.0.url: Field required",
        id="mcp-url-missing",
    ),
    pytest.param(
        _config(system_prompt="bad\x00prompt"),
        "NUL characters are not allowed",
        id="nul-character",
    ),
    pytest.param([], "Input should be an object", id="body-not-object"),
]


@pytest.mark.parametrize(("body", "message"), INVALID_BODIES)
async def test_invalid_create_is_400_error_message(
    client: httpx.AsyncClient, acme: Tenant, body: Any, message: str
) -> None:
    response = await client.post(BASE, json=body, headers=acme.headers)
    assert response.status_code == 400, response.text
    error = response.json()
    assert set(error) == {"error", "message"}
    assert error["error"] == 400
    assert message in error["message"], error["message"]


async def test_unreadable_body_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Content-Type": "application/json"}
    response = await client.post(BASE, content=b"{nope", headers=headers)
    assert response.status_code == 400
    assert response.json() == {"error": 400, "message": "Body is not valid JSON"}
    response = await client.post(BASE, headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == {"error": 400, "message": "Field required"}


@pytest.mark.parametrize(
    "agent_id", ["nope", "1" * 40, "123", "%20", "not-a-uuid-at-all-0000000000000000"]
)
async def test_invalid_id_form_is_400(
    client: httpx.AsyncClient, acme: Tenant, agent_id: str
) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method,
            f"{BASE}/{agent_id}",
            headers=acme.headers,
            json={"name": "x"} if method == "PUT" else None,
        )
        assert response.status_code == 400, (method, response.text)
        assert response.json() == INVALID_ID


async def test_other_identifier_forms_of_the_id(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent = await create(client, acme)
    canonical = agent["id"]
    for form in (canonical.upper(), canonical.replace("-", ""), "%7B" + canonical + "%7D"):
        assert (await get(client, acme, form))["id"] == canonical
    response = await client.put(
        f"{BASE}/{canonical.upper()}", json={"name": "Renamed"}, headers=acme.headers
    )
    assert response.json()["id"] == canonical
    response = await client.delete(f"{BASE}/{canonical.replace('-', '')}", headers=acme.headers)
    assert response.status_code == 204


async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant) -> None:
    unknown = str(uuid.uuid4())
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method,
            f"{BASE}/{unknown}",
            headers=acme.headers,
            json={"name": "x"} if method == "PUT" else None,
        )
        assert response.status_code == 404, method
        assert response.json() == NOT_FOUND


async def test_full_update_overwrites_configuration(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    agent = await create(client, acme, agent_config=FULL_CONFIG)
    url = f"{BASE}/{agent['id']}"

    # Fields left out of the body stay; the configuration too when agent_config is absent.
    response = await client.put(
        url, json={"name": "Ava 2", "timezone": "Europe/Paris"}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert set(updated) == CREATE_SHAPE
    assert updated["name"] == "Ava 2"
    assert updated["timezone"] == "Europe/Paris"
    assert updated["agent_type"] == "prompt"
    assert updated["updated_at"] > agent["updated_at"]
    detail = await get(client, acme, agent["id"])
    assert detail["configuration"]["voice"] == VOICE["voice_id"]
    assert len(detail["tasks"]) == 6

    # A new agent_config replaces voice settings, prompts and integrations whole.
    new_config = {
        "system_prompt": "You are Max.",
        "custom_tools": [_tool(name="weather")],
    }
    response = await client.put(url, json={"agent_config": new_config}, headers=acme.headers)
    assert response.status_code == 200, response.text
    detail = await get(client, acme, agent["id"])
    assert detail["description"] == "You are Max."
    assert detail["configuration"] == {
        "language": "en-US",
        "voice": None,
        "model": "gpt-4o-mini",
        "temperature": 0.7,
    }
    assert detail["tasks"] == ["weather"]
    assert detail["name"] == "Ava 2"

    # is_active moves the status; the create shape reports it as a string.
    response = await client.put(url, json={"is_active": "inactive"}, headers=acme.headers)
    assert response.json()["is_active"] == "inactive"
    assert (await get(client, acme, agent["id"]))["status"] == "inactive"
    response = await client.put(url, json={"is_active": "active"}, headers=acme.headers)
    assert response.json()["is_active"] == "active"

    # An empty body changes nothing.
    before = await get(client, acme, agent["id"])
    response = await client.put(url, json={}, headers=acme.headers)
    assert response.status_code == 200
    assert await get(client, acme, agent["id"]) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": None}, "name: Value error, cannot be null"),
        ({"name": ""}, "name: String should have at least 1 character"),
        ({"timezone": None}, "timezone: Value error, cannot be null"),
        ({"timezone": "Nowhere/Land"}, "unknown timezone"),
        ({"is_active": True}, "is_active: Input should be 'active' or 'inactive'"),
        ({"is_active": "training"}, "is_active: Input should be 'active' or 'inactive'"),
        ({"is_active": None}, "is_active: Value error, cannot be null"),
        ({"agent_config": None}, "agent_config: Value error, cannot be null"),
        ({"agent_config": {"voice_settings": {}}}, "agent_config.voice_settings.voice_id"),
    ],
)
async def test_invalid_update_is_400_and_changes_nothing(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, Any], message: str
) -> None:
    agent = await create(client, acme, agent_config=FULL_CONFIG)
    before = await get(client, acme, agent["id"])
    response = await client.put(f"{BASE}/{agent['id']}", json=body, headers=acme.headers)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["error"] == 400
    assert message in error["message"], error["message"]
    assert await get(client, acme, agent["id"]) == before


async def test_delete_is_permanent(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent = await create(client, acme)
    url = f"{BASE}/{agent['id']}"
    response = await client.delete(url, headers=acme.headers)
    assert response.status_code == 204
    assert response.content == b""
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method, url, headers=acme.headers, json={} if method == "PUT" else None
        )
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert listed["data"] == []
    assert listed["total_count"] == 0


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, name="Globex agent", agent_config=FULL_CONFIG)
    mine = await create(client, acme)
    url = f"{BASE}/{theirs['id']}"
    response = await client.get(url, headers=acme.headers)
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    response = await client.put(url, json={"name": "hijack"}, headers=acme.headers)
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    response = await client.delete(url, headers=acme.headers)
    assert (response.status_code, response.json()) == (404, NOT_FOUND)

    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["data"]] == [mine["id"]]
    assert listed["total_count"] == 1
    # Another tenant's agent is not a usable cursor either.
    response = await client.get(BASE, params={"starting_after": theirs["id"]}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json()["error"] == 400

    still_theirs = await get(client, globex, theirs["id"])
    assert still_theirs["name"] == "Globex agent"
    assert len(still_theirs["tasks"]) == 6


async def test_list_items_and_cursor_paging(client: httpx.AsyncClient, acme: Tenant) -> None:
    created = [await create(client, acme, name=f"A{i}") for i in range(23)]
    await client.put(
        f"{BASE}/{created[0]['id']}", json={"is_active": "inactive"}, headers=acme.headers
    )
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 5}
    while True:
        response = await client.get(BASE, params=params, headers=acme.headers)
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"object", "data", "has_more", "next_cursor", "total_count"}
        assert page["object"] == "list"
        assert page["total_count"] == 23
        seen.extend(page["data"])
        if not page["has_more"]:
            break
        assert page["next_cursor"] == page["data"][-1]["id"]
        params = {"limit": 5, "starting_after": page["next_cursor"]}
    ids = [item["id"] for item in seen]
    assert ids == [agent["id"] for agent in reversed(created)]  # newest first, each once
    oldest = seen[-1]
    assert set(oldest) == LIST_SHAPE
    assert oldest["is_active"] == "inactive"
    assert oldest["status"] == "inactive"  # inactive agents are listed too
    assert oldest["agent_type"] == "prompt"
    assert oldest["timezone"] == "UTC"
    assert oldest["configuration"]["model"] == "gpt-4o-mini"
    # The list item is the get-agent shape plus three fields, with the same values.
    detail = await get(client, acme, seen[0]["id"])
    assert {key: seen[0][key] for key in GET_SHAPE} == detail

    second = (
        await client.get(BASE, params={"limit": 5, "starting_after": ids[4]}, headers=acme.headers)
    ).json()
    back = (
        await client.get(
            BASE,
            params={"limit": 5, "ending_before": second["data"][0]["id"]},
            headers=acme.headers,
        )
    ).json()
    assert [item["id"] for item in back["data"]] == ids[:5]
    assert back["has_more"] is False

    default = (await client.get(BASE, headers=acme.headers)).json()
    assert len(default["data"]) == 20
    assert default["has_more"] is True


async def test_empty_list(client: httpx.AsyncClient, tenants: TenantFactory) -> None:
    empty = await tenants.organization("Empty")
    page = (await client.get(BASE, headers=empty.headers)).json()
    assert page == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
        "total_count": 0,
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "limit: Input should be greater than or equal to 1"),
        ({"limit": "101"}, "limit: Input should be less than or equal to 100"),
        ({"limit": "abc"}, "limit: Input should be a valid integer"),
        ({"starting_after": str(uuid.uuid4())}, "starting_after: no such object"),
        ({"ending_before": "nope"}, "ending_before: no such object"),
    ],
)
async def test_bad_list_parameters_are_400(
    client: httpx.AsyncClient, acme: Tenant, params: dict[str, str], message: str
) -> None:
    response = await client.get(BASE, params=params, headers=acme.headers)
    assert response.status_code == 400
    error = response.json()
    assert error["error"] == 400
    assert message in error["message"], error["message"]


async def test_both_cursors_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent = await create(client, acme)
    response = await client.get(
        BASE,
        params={"starting_after": agent["id"], "ending_before": agent["id"]},
        headers=acme.headers,
    )
    assert response.status_code == 400
    assert response.json() == {
        "error": 400,
        "message": "starting_after and ending_before cannot be used together",
    }


async def test_server_failure_is_500_error_message(
    client: httpx.AsyncClient, acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any) -> Any:
        raise RuntimeError("database on fire")

    # Below the service: the handlers hold the service function itself.
    monkeypatch.setattr(AgentRepository, "get_row_or_404", broken)
    response = await client.get(f"{BASE}/{uuid.uuid4()}", headers=acme.headers)
    assert response.status_code == 500
    assert response.json() == {"error": 500, "message": "Internal server error"}


async def test_organization_header_must_match(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "organization_id": str(uuid.uuid4())}
    response = await client.get(BASE, headers=headers)
    assert response.status_code == 400
    assert response.json() == {
        "error": 400,
        "message": "A valid organization_id header is required",
    }
    headers["organization_id"] = acme.organization_id
    assert (await client.get(BASE, headers=headers)).status_code == 200


async def test_scope_matrix(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    reader = await tenants.key(acme, ["agents:read"])
    writer = await tenants.key(acme, ["agents:write"])
    outsider = await tenants.key(acme, ["calls:read", "webhooks:admin", "campaigns:manage"])
    agent = await create(client, writer)
    url = f"{BASE}/{agent['id']}"

    def requests(agent_id: str) -> list[tuple[str, str, Any, str]]:
        return [
            ("GET", BASE, None, "agents:read"),
            ("GET", f"{BASE}/{agent_id}", None, "agents:read"),
            ("POST", BASE, {"name": "New"}, "agents:write"),
            ("PUT", f"{BASE}/{agent_id}", {"name": "Renamed"}, "agents:write"),
        ]

    async def forbidden(tenant: Tenant, method: str, path: str, body: Any, scope: str) -> None:
        response = await client.request(method, path, json=body, headers=tenant.headers)
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "insufficient_scope"
        assert error["type"] == "authentication_error"
        assert scope in error["message"]

    # agents:read reads; every write is refused.
    assert (await client.get(BASE, headers=reader.headers)).json()["total_count"] == 1
    assert (await get(client, reader, agent["id"]))["id"] == agent["id"]
    for method, path, body, scope in requests(agent["id"]):
        if scope == "agents:write":
            await forbidden(reader, method, path, body, scope)
    await forbidden(reader, "DELETE", url, None, "agents:write")

    # agents:write writes (create above, update and delete here) but does not read.
    response = await client.put(url, json={"name": "Renamed"}, headers=writer.headers)
    assert response.status_code == 200
    for method, path, body, scope in requests(agent["id"]):
        if scope == "agents:read":
            await forbidden(writer, method, path, body, scope)

    # An unrelated scope gets nothing.
    for method, path, body, scope in requests(agent["id"]):
        await forbidden(outsider, method, path, body, scope)
    await forbidden(outsider, "DELETE", url, None, "agents:write")

    # full_access does everything.
    assert (await get(client, acme, agent["id"]))["name"] == "Renamed"
    second = await create(client, acme, name="Second")
    assert (await client.delete(url, headers=writer.headers)).status_code == 204
    response = await client.delete(f"{BASE}/{second['id']}", headers=acme.headers)
    assert response.status_code == 204

    response = await client.get(BASE, headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


async def test_openapi_documents_agent_errors(client: httpx.AsyncClient) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    create_op = document["paths"]["/api/v1/agents"]["post"]
    assert set(create_op["responses"]) == {
        "201",
        "400",
        "401",
        "403",
        "413",
        "415",
        "429",
        "500",
    }
    agent_error = {"$ref": "#/components/schemas/AgentError"}
    assert create_op["responses"]["400"]["content"]["application/json"]["schema"] == agent_error
    get_op = document["paths"]["/api/v1/agents/{agent_id}"]["get"]
    assert get_op["responses"]["404"]["content"]["application/json"]["schema"] == agent_error
    delete_op = document["paths"]["/api/v1/agents/{agent_id}"]["delete"]
    assert set(delete_op["responses"]) == {"204", "400", "401", "403", "404", "429", "500"}
