"""/api/v1/agents: routes → agents service → the spec's JSON shapes.

Agents answer errors as `{"error": <status>, "message": ...}` (ErrorStyle.AGENT), validation
failures included (400, not 422).
"""

from __future__ import annotations

from starlette.responses import Response

from app.agents import service
from app.agents.schemas import (
    AgentCreate,
    AgentDetailResponse,
    AgentListItemResponse,
    AgentResponse,
    AgentUpdate,
    agent_to_detail,
    agent_to_list_item,
    agent_to_public,
)
from app.auth.scopes import Scope
from app.kit.pagination import envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import ErrorStyle, Operation, RequestContext, json_response


async def create_agent(ctx: RequestContext) -> Response:
    agent = await service.create_agent(ctx.session, ctx.subject, ctx.body(AgentCreate))
    return json_response(agent_to_public(agent), 201)


async def list_agents(ctx: RequestContext) -> Response:
    query = ctx.query(CursorQuery)
    page = await service.list_agents(ctx.session, ctx.subject, query.cursor())
    return json_response(envelope_c([agent_to_list_item(row) for row in page.items], page))


async def get_agent(ctx: RequestContext) -> Response:
    row = await service.get_agent(ctx.session, ctx.subject, ctx.path_param("agent_id"))
    return json_response(agent_to_detail(row))


async def update_agent(ctx: RequestContext) -> Response:
    agent = await service.update_agent(
        ctx.session, ctx.subject, ctx.path_param("agent_id"), ctx.body(AgentUpdate)
    )
    return json_response(agent_to_public(agent))


async def delete_agent(ctx: RequestContext) -> Response:
    await service.delete_agent(ctx.session, ctx.subject, ctx.path_param("agent_id"))
    return Response(status_code=204)


_TAG = "agents"
_STYLE = ErrorStyle.AGENT
OPERATIONS = (
    Operation(
        "POST",
        "/agents",
        create_agent,
        Scope.AGENTS_WRITE,
        "Create an agent",
        _TAG,
        style=_STYLE,
        status_code=201,
        request_model=AgentCreate,
        response_model=AgentResponse,
        errors=(400,),
    ),
    Operation(
        "GET",
        "/agents",
        list_agents,
        Scope.AGENTS_READ,
        "List agents (newest first)",
        _TAG,
        style=_STYLE,
        query_model=CursorQuery,
        response_model=AgentListItemResponse,
        envelope="C",
        errors=(400,),
    ),
    Operation(
        "GET",
        "/agents/{agent_id}",
        get_agent,
        Scope.AGENTS_READ,
        "Get an agent",
        _TAG,
        style=_STYLE,
        response_model=AgentDetailResponse,
        errors=(400, 404),
    ),
    Operation(
        "PUT",
        "/agents/{agent_id}",
        update_agent,
        Scope.AGENTS_WRITE,
        "Update an agent (fields present replace stored ones; agent_config replaces the whole "
        "configuration)",
        _TAG,
        style=_STYLE,
        request_model=AgentUpdate,
        response_model=AgentResponse,
        errors=(400, 404),
    ),
    Operation(
        "DELETE",
        "/agents/{agent_id}",
        delete_agent,
        Scope.AGENTS_WRITE,
        "Delete an agent",
        _TAG,
        style=_STYLE,
        status_code=204,
        errors=(400, 404),
    ),
)
