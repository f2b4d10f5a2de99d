"""Agent inputs shared by REST and GraphQL, and the public shape of an agent, declared once
(app/kit/shape.py), with the three REST bodies of docs/api.md derived from it.

Create/update answer the "create shape" (`is_active` as the string `active`/`inactive`), get
answers the "get-agent shape" (`status`, `description`, `configuration`, `tasks`); the list
(docs/api.md) uses the get-agent shape plus `agent_type`, `timezone` and `is_active`. GraphQL's
`Agent` shows every field of the three.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any, Literal

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.agents import models
from app.agents.config import AgentConfig, capability_names, configuration_summary
from app.kit.shape import SAME, Rest, Shape, column, computed
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


class AgentConfigurationResponse(BaseModel):
    language: str
    voice: str | None = Field(description="voice_settings.voice_id; null until a voice is set")
    model: str
    temperature: float = Field(ge=0.0, le=1.0)


@strawberry.type(description="How the agent speaks and thinks.")
class AgentConfiguration:
    """The summary of an agent's `config` (app/agents/config.py, `configuration_summary`)."""

    language: str = strawberry.field(description="BCP-47 tag, e.g. en-US")
    voice: str | None = strawberry.field(
        description="voice_settings.voice_id; null until a voice is set"
    )
    model: str
    temperature: float = strawberry.field(description="0.0 to 1.0")


def active_flag(status: str) -> str:
    """`is_active` of a status: only `active` is active (an agent in training is not)."""
    return ACTIVE if status == ACTIVE else INACTIVE


def _is_active(root: strawberry.Parent[Any]) -> str:
    return active_flag(root.status)


def _description(root: strawberry.Parent[Any]) -> str | None:
    system_prompt: str | None = (root.config or {}).get("system_prompt")
    return system_prompt


def _configuration_of(agent: Any) -> dict[str, Any]:
    return configuration_summary(agent.config or {})


def _as_configuration(summary: dict[str, Any]) -> AgentConfiguration:
    return AgentConfiguration(**summary)


def _tasks(root: strawberry.Parent[Any]) -> list[str]:
    return capability_names(root.config or {})


@strawberry.type
class Agent:
    """The public shape of an agent, declared once (app/kit/shape.py): GraphQL's type, and
    the three REST bodies below."""

    id: strawberry.ID = column(models.Agent.id, as_type=strawberry.ID)
    organization_id: str = column(models.Agent.organization_id)
    name: str = column(models.Agent.name)
    agent_type: str = column(
        models.Agent.agent_type,
        description="prompt or static",
        rest=Rest(annotation=AgentType),
    )
    timezone: str = column(models.Agent.timezone)
    status: str = column(
        models.Agent.status,
        description="active, inactive or training",
        rest=Rest(annotation=AgentStatus),
    )
    is_active: str = computed(
        _is_active,
        sources=(models.Agent.status,),
        description="active or inactive (a string, as in REST)",
        rest=Rest(annotation=ActiveFlag),
    )
    description: str | None = computed(
        _description,
        sources=(models.Agent.config,),
        description="The system prompt; null when none is set",
        rest=Rest(description=SAME),
    )
    configuration: AgentConfiguration = computed(
        _configuration_of,
        graphql_convert=_as_configuration,
        sources=(models.Agent.config,),
        rest=Rest(annotation=AgentConfigurationResponse),
    )
    tasks: list[str] = computed(
        _tasks,
        sources=(models.Agent.config,),
        description="Capability names: book_appointment, custom tool names, "
        "MCP tools as server.tool (server.* for every tool of a server)",
        rest=Rest(),
    )
    created_at: datetime = column(models.Agent.created_at)
    updated_at: datetime = column(models.Agent.updated_at)


# The create/update shape (the shape's main REST body).
AGENT = Shape(
    Agent,
    rest_name="AgentResponse",
    rest_doc="The create/update shape; documents the OpenAPI schema. Runtime uses "
    "`agent_to_public`.",
    rest_fields=(
        "id",
        "name",
        "organization_id",
        "timezone",
        "agent_type",
        "is_active",
        "created_at",
        "updated_at",
    ),
)
AgentResponse = AGENT.rest_model
agent_to_public = AGENT.to_public

_DETAIL_FIELDS = (
    "id",
    "name",
    "status",
    "description",
    "created_at",
    "updated_at",
    "configuration",
    "tasks",
)
# The get-agent shape.
AGENT_DETAIL = AGENT.rest_view("AgentDetailResponse", _DETAIL_FIELDS, "The get-agent shape.")
AgentDetailResponse = AGENT_DETAIL.rest_model
agent_to_detail = AGENT_DETAIL.to_public
# `GET /agents` items: the get-agent shape plus agent_type, timezone and is_active.
AGENT_LIST_ITEM = AGENT.rest_view(
    "AgentListItemResponse",
    (*_DETAIL_FIELDS, "agent_type", "timezone", "is_active"),
    "`GET /agents` items: the get-agent shape plus agent_type, timezone and is_active.",
)
AgentListItemResponse = AGENT_LIST_ITEM.rest_model
agent_to_list_item = AGENT_LIST_ITEM.to_public
