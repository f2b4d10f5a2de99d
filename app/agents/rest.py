"""/api/v1/agents: routes → agents service → the JSON shapes of docs/api.md.

Agents answer errors as `{"error": <status>, "message": ...}` (ErrorStyle.AGENT), validation
failures included (400, not 422).
"""

from __future__ import annotations

from app.access.scopes import Scope
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
from app.kit.queries import CursorQuery
from rest_compat.endpoint import ErrorStyle, Operation
from rest_compat.resource import (
    create_handler,
    delete_handler,
    get_handler,
    list_handler,
    update_handler,
)

# Tool URLs go through the outbound URL guard, whose switch is a setting.
create_agent = create_handler(
    AgentCreate, service.create_agent, agent_to_public, 201, guards_urls=True
)
update_agent = update_handler(
    AgentUpdate, service.update_agent, "agent_id", agent_to_public, guards_urls=True
)
list_agents = list_handler(service.list_agents, agent_to_list_item)
get_agent = get_handler(service.get_agent, "agent_id", agent_to_detail)
delete_agent = delete_handler(service.delete_agent, "agent_id")


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
