"""Agent inputs shared by REST and GraphQL, and the three public shapes of docs/api.md.

An agent has two shapes: create/update answer the "create shape" (`is_active` as
the string `active`/`inactive`), get answers the "get-agent shape" (`status`, `description`,
`configuration`, `tasks`); the list (docs/api.md) uses the get-agent shape plus `agent_type`,
`timezone` and `is_active`.
"""

from __future__ import annotations

import zoneinfo
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.agents.config import AgentConfig, capability_names, configuration_summary
from app.kit.validation import DisplayName

AgentType = Literal["prompt", "static"]
AgentStatus = Literal["active", "inactive", "training"]
ActiveFlag = Literal["active", "inactive"]

DEFAULT_AGENT_TYPE: AgentType = "prompt"
DEFAULT_TIMEZONE = "UTC"
ACTIVE = "active"
INACTIVE = "inactive"

# The one rule for names (contacts, agents, organizations): app/kit/validation.py.
AgentName = DisplayName
# The form of an IANA zone name; `_known_timezone` then checks that the zone exists.
Timezone = Annotated[
    str,
    StringConstraints(max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"),
    Field(
        description="An IANA time zone name (the zone must exist), or UTC",
        examples=["UTC", "America/New_York", "Europe/Paris", "Asia/Kolkata"],
    ),
]

_CREATE_EXAMPLE: dict[str, Any] = {
    "name": "Front desk",
    "agent_type": "prompt",
    "timezone": "America/New_York",
    "agent_config": {
        "welcome_message": "Hi, this is Ava from Acme Dental. How can I help?",
        "system_prompt": "You are Ava, the friendly receptionist of Acme Dental.",
        "language": "en-US",
        "llm_provider": "openai",
        "llm_model": "gpt-4o-mini",
        "temperature": 0.4,
        "voice_settings": {"voice_id": "21m00Tcm4TlvDq8ikWAM", "name": "Rachel"},
        "booking_config": {"booking_enabled": True, "prompt": "Offer a slot when asked."},
        "custom_tools": [
            {
                "name": "lookup_order",
                "description": "Find an order by its number",
                "url": "https://93.184.216.34/orders/lookup",
                "method": "POST",
                "parameters": {
                    "type": "object",
                    "properties": {"order_number": {"type": "string"}},
                    "required": ["order_number"],
                },
            }
        ],
        "mcp_tools": [
            {
                "name": "crm",
                "url": "https://93.184.216.35/mcp",
                "transport": "streamable_http",
                "allowed_tools": ["find_customer"],
            }
        ],
    },
}


@lru_cache(maxsize=1)
def _timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {DEFAULT_TIMEZONE}


def _known_timezone(value: str) -> str:
    if value not in _timezones():
        raise ValueError(f"unknown timezone '{value}'; use an IANA zone name such as Europe/Paris")
    return value


class AgentCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [_CREATE_EXAMPLE]})

    name: AgentName
    agent_type: AgentType = DEFAULT_AGENT_TYPE
    timezone: Timezone = DEFAULT_TIMEZONE
    agent_config: AgentConfig = Field(default_factory=AgentConfig)

    _timezone = field_validator("timezone")(_known_timezone)


def _without_null(schema: dict[str, Any]) -> None:
    """The document says what the server does: every field may be left out, none may be null.

    (Typed `X | None` rather than `X | SkipJsonSchema[None]`: the latter is a union, whose
    errors name the member, `name.constrained-str`, in the message the caller reads.)
    """
    for prop in schema.get("properties", {}).values():
        branches = [item for item in prop.pop("anyOf", []) if item != {"type": "null"}]
        if branches:
            prop.update(branches[0])
        prop.pop("default", None)


class AgentUpdate(BaseModel):
    """Full update: each field present replaces the stored one; `agent_config` replaces the
    whole configuration (voice, prompts, tools), defaults filled in again."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_without_null)

    # Absent is fine (None), but null is refused by `_not_null`.
    name: AgentName | None = None
    timezone: Timezone | None = None
    is_active: ActiveFlag | None = None
    agent_config: AgentConfig | None = None

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str | None) -> str | None:
        return None if value is None else _known_timezone(value)

    @field_validator("name", "timezone", "is_active", "agent_config", mode="wrap")
    @classmethod
    def _not_null(cls, value: Any, handler: Any) -> Any:
        if value is None:
            raise ValueError("cannot be null")
        return handler(value)


class AgentResponse(BaseModel):
    """The create/update shape; documents the OpenAPI schema. Runtime uses `agent_to_public`."""

    id: str
    name: str
    organization_id: str
    timezone: str
    agent_type: AgentType
    is_active: ActiveFlag
    created_at: str
    updated_at: str


class AgentConfigurationResponse(BaseModel):
    language: str
    voice: str | None = Field(description="voice_settings.voice_id; null until a voice is set")
    model: str
    temperature: float = Field(ge=0.0, le=1.0)


class AgentDetailResponse(BaseModel):
    """The get-agent shape."""

    id: str
    name: str
    status: AgentStatus
    description: str | None = Field(description="The system prompt; null when none is set")
    created_at: str
    updated_at: str
    configuration: AgentConfigurationResponse
    tasks: list[str]


class AgentListItemResponse(AgentDetailResponse):
    """`GET /agents` items: the get-agent shape plus agent_type, timezone and is_active."""

    agent_type: AgentType
    timezone: str
    is_active: ActiveFlag


def active_flag(status: str) -> str:
    """`is_active` of a status: only `active` is active (an agent in training is not)."""
    return ACTIVE if status == ACTIVE else INACTIVE


def agent_to_public(agent: Any) -> dict[str, Any]:
    """The create/update shape of an agent row or entity, for app.core.jsonutil.dumps."""
    return {
        "id": agent.id,
        "name": agent.name,
        "organization_id": agent.organization_id,
        "timezone": agent.timezone,
        "agent_type": agent.agent_type,
        "is_active": active_flag(agent.status),
        # datetimes stay objects: orjson writes them as ISO 8601 with a Z.
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }


def agent_to_detail(agent: Any) -> dict[str, Any]:
    """The get-agent shape."""
    config = agent.config or {}
    return {
        "id": agent.id,
        "name": agent.name,
        "status": agent.status,
        "description": config.get("system_prompt"),
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
        "configuration": configuration_summary(config),
        "tasks": capability_names(config),
    }


def agent_to_list_item(agent: Any) -> dict[str, Any]:
    return {
        **agent_to_detail(agent),
        "agent_type": agent.agent_type,
        "timezone": agent.timezone,
        "is_active": active_flag(agent.status),
    }
