"""Agent types and fields; each field calls one agents service operation.

`Agent` is the agent's shape (app/agents/schemas.py), every field of its REST bodies; rows
serve it as they are. Inputs mirror the REST bodies field for field, nested objects included,
and are validated by the same pydantic models, so rules and messages are the same.
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON

from app.access.scopes import Scope
from app.agents import service
from app.agents.schemas import AGENT, Agent, AgentCreate, AgentUpdate
from app.graphql.pagination import Connection
from app.graphql.resource import DomainMutations, list_field, node_field
from app.kit.errors import InvalidInput, NotFound

AgentConnection = Connection[Agent]


@strawberry.input
class VoiceSettingsInput:
    voice_id: str
    name: str
    provider: str | None = strawberry.UNSET


@strawberry.input
class BookingConfigInput:
    booking_enabled: bool | None = strawberry.UNSET
    provider: str | None = strawberry.UNSET
    prompt: str | None = strawberry.UNSET


@strawberry.input(description="A REST endpoint the agent may call mid-call.")
class CustomToolInput:
    name: str
    description: str
    url: str
    method: str | None = strawberry.UNSET
    parameters: JSON | None = strawberry.UNSET


@strawberry.input(description="A Model Context Protocol server whose tools the agent may use.")
class McpToolInput:
    name: str
    url: str
    transport: str | None = strawberry.UNSET
    allowed_tools: list[str] | None = strawberry.UNSET


@strawberry.input(description="agent_config of REST; fields left out take their defaults.")
class AgentConfigInput:
    welcome_message: str | None = strawberry.UNSET
    system_prompt: str | None = strawberry.UNSET
    language: str | None = strawberry.UNSET
    llm_provider: str | None = strawberry.UNSET
    llm_model: str | None = strawberry.UNSET
    temperature: float | None = strawberry.UNSET
    llm_base_url: str | None = strawberry.UNSET
    voice_settings: VoiceSettingsInput | None = strawberry.UNSET
    booking_config: BookingConfigInput | None = strawberry.UNSET
    custom_tools: list[CustomToolInput] | None = strawberry.UNSET
    mcp_tools: list[McpToolInput] | None = strawberry.UNSET


@strawberry.input
class AgentCreateInput:
    name: str
    agent_type: str | None = strawberry.UNSET
    timezone: str | None = strawberry.UNSET
    agent_config: AgentConfigInput | None = strawberry.UNSET


@strawberry.input(
    description="Only the fields given change; agentConfig replaces the whole configuration."
)
class AgentUpdateInput:
    name: str | None = strawberry.UNSET
    timezone: str | None = strawberry.UNSET
    is_active: str | None = strawberry.UNSET
    agent_config: AgentConfigInput | None = strawberry.UNSET


def as_agent(value: Any) -> Agent:
    return AGENT.as_graphql(value)


AGENTS = DomainMutations(
    "Agent",
    scope=Scope.AGENTS_WRITE,
    errors=(InvalidInput, NotFound),
    node=Agent,
    as_node=as_agent,
)


@strawberry.type
class Query:
    agents = list_field(
        Scope.AGENTS_READ,
        service.list_agents,
        as_agent,
        Agent,
    )
    # Null when none of this organization has the id; an id that is not a UUID is an
    # `invalid_input` error.
    agent = node_field(Scope.AGENTS_READ, service.get_agent, as_agent, Agent)


@strawberry.type
class Mutation:
    # Tool URLs go through the outbound URL guard, whose switch is a setting.
    create_agent = AGENTS.create_field(
        AgentCreateInput, AgentCreate, service.create_agent, guards_urls=True
    )
    update_agent = AGENTS.update_field(
        AgentUpdateInput, AgentUpdate, service.update_agent, guards_urls=True
    )
    delete_agent = AGENTS.delete_field(service.delete_agent)
