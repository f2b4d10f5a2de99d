"""Agent types and fields; each field calls one agents service operation.

`Agent` is the REST list item (the get-agent shape plus agentType, timezone, isActive) and
organizationId. Inputs mirror the REST bodies field for field, nested objects included, and
are validated by the same pydantic models, so rules and messages are the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.agents import service
from app.agents.schemas import AgentCreate, AgentUpdate, agent_to_list_item
from app.auth.scopes import Scope
from app.graphql.contacts import DeletePayload
from app.graphql.context import Context
from app.graphql.errors import UserError, as_graphql_error, user_errors
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound
from app.kit.validation import parse_model


@strawberry.type(description="How the agent speaks and thinks.")
class AgentConfiguration:
    language: str = strawberry.field(description="BCP-47 tag, e.g. en-US")
    voice: str | None = strawberry.field(
        description="voice_settings.voice_id; null until a voice is set"
    )
    model: str
    temperature: float = strawberry.field(description="0.0 to 1.0")


@strawberry.type
class Agent:
    id: strawberry.ID
    organization_id: str
    name: str
    agent_type: str = strawberry.field(description="prompt or static")
    timezone: str
    status: str = strawberry.field(description="active, inactive or training")
    is_active: str = strawberry.field(description="active or inactive (a string, as in REST)")
    description: str | None = strawberry.field(
        description="The system prompt; null when none is set"
    )
    configuration: AgentConfiguration
    tasks: list[str] = strawberry.field(
        description="Capability names: book_appointment, custom tool names, "
        "MCP tools as server.tool (server.* for every tool of a server)"
    )
    created_at: datetime
    updated_at: datetime


AgentConnection = Connection[Agent]


@strawberry.type
class AgentPayload:
    agent: Agent | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


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


def _plain(value: Any) -> Any:
    """An input as the dicts and lists the REST body would carry (UNSET fields dropped)."""
    if hasattr(value, "__strawberry_definition__"):
        return {
            key: _plain(item) for key, item in vars(value).items() if item is not strawberry.UNSET
        }
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def as_agent(value: Any) -> Agent:
    item = agent_to_list_item(value)
    return Agent(
        id=strawberry.ID(item["id"]),
        organization_id=value.organization_id,
        name=item["name"],
        agent_type=item["agent_type"],
        timezone=item["timezone"],
        status=item["status"],
        is_active=item["is_active"],
        description=item["description"],
        configuration=AgentConfiguration(**item["configuration"]),
        tasks=item["tasks"],
        created_at=item["created_at"],
        updated_at=item["updated_at"],
    )


@strawberry.type
class AgentQuery:
    @strawberry.field(extensions=requires(Scope.AGENTS_READ))
    @plannable
    async def agents(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> AgentConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_agents(session, subject, params),
            as_agent,
        )

    @strawberry.field(extensions=requires(Scope.AGENTS_READ))
    @plannable
    async def agent(self, info: Info[Context, None], id: strawberry.ID) -> Agent | None:
        """The agent, or null when none of this organization has the id; an id that is not
        a UUID is an `invalid_input` error."""
        context = info.context
        try:
            async with context.db() as session:
                return as_agent(await service.get_agent(session, context.require_subject(), id))
        except NotFound:
            return None
        except DomainError as exc:
            raise as_graphql_error(exc) from exc


@strawberry.type
class AgentMutation:
    @strawberry.mutation(extensions=requires(Scope.AGENTS_WRITE))
    async def create_agent(
        self, info: Info[Context, None], input: AgentCreateInput
    ) -> AgentPayload:
        context = info.context
        try:
            data = parse_model(AgentCreate, _plain(input), "input")
            async with context.unit_of_work() as session:
                agent = await service.create_agent(session, context.require_subject(), data)
        except DomainError as exc:
            return AgentPayload(errors=user_errors(exc))
        return AgentPayload(agent=as_agent(agent))

    @strawberry.mutation(extensions=requires(Scope.AGENTS_WRITE))
    async def update_agent(
        self, info: Info[Context, None], id: strawberry.ID, input: AgentUpdateInput
    ) -> AgentPayload:
        context = info.context
        try:
            data = parse_model(AgentUpdate, _plain(input), "input")
            async with context.unit_of_work() as session:
                agent = await service.update_agent(session, context.require_subject(), id, data)
        except DomainError as exc:
            return AgentPayload(errors=user_errors(exc))
        return AgentPayload(agent=as_agent(agent))

    @strawberry.mutation(extensions=requires(Scope.AGENTS_WRITE))
    async def delete_agent(self, info: Info[Context, None], id: strawberry.ID) -> DeletePayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                deleted_id = await service.delete_agent(session, context.require_subject(), id)
        except DomainError as exc:
            return DeletePayload(errors=user_errors(exc))
        return DeletePayload(deleted_id=strawberry.ID(deleted_id))
