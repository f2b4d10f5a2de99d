"""/api/v1/agents/{agent_id}/tests: routes → agent tests service → the run's public shape.

Under the agents resource, so errors have the agents' form, `{"error": <status>, "message"}`.
"""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.agent_tests import service
from app.agent_tests.schemas import AgentTestCreate, AgentTestRunResponse, run_to_public
from app.engine.limits import ConversationLimits
from app.kit.pagination import envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import ErrorStyle, Operation, RequestContext, json_response


async def create_agent_test(ctx: RequestContext) -> Response:
    run = await service.create_agent_test(
        ctx.session,
        ctx.subject,
        ctx.path_param("agent_id"),
        ctx.body(AgentTestCreate),
        ConversationLimits(ctx.resources),
    )
    return json_response(run_to_public(run), status_code=201)


async def list_agent_tests(ctx: RequestContext) -> Response:
    page = await service.list_agent_tests(
        ctx.session, ctx.subject, ctx.path_param("agent_id"), ctx.query(CursorQuery).cursor()
    )
    return json_response(envelope_c([run_to_public(row) for row in page.items], page))


async def get_agent_test(ctx: RequestContext) -> Response:
    row = await service.get_agent_test(
        ctx.session, ctx.subject, ctx.path_param("agent_id"), ctx.path_param("test_id")
    )
    return json_response(run_to_public(row))


_TAG = "agent-tests"
_STYLE = ErrorStyle.AGENT
OPERATIONS = (
    Operation(
        "POST",
        "/agents/{agent_id}/tests",
        create_agent_test,
        Scope.AGENTS_WRITE,
        "Run a scripted conversation against the agent in test mode (queued; poll the run)",
        _TAG,
        style=_STYLE,
        status_code=201,
        request_model=AgentTestCreate,
        response_model=AgentTestRunResponse,
        errors=(400, 404, 429),
    ),
    Operation(
        "GET",
        "/agents/{agent_id}/tests",
        list_agent_tests,
        Scope.AGENTS_READ,
        "List the agent's test runs (newest first)",
        _TAG,
        style=_STYLE,
        query_model=CursorQuery,
        response_model=AgentTestRunResponse,
        envelope="C",
        errors=(400, 404),
    ),
    Operation(
        "GET",
        "/agents/{agent_id}/tests/{test_id}",
        get_agent_test,
        Scope.AGENTS_READ,
        "Get one test run: status, per-expectation results and transcript",
        _TAG,
        style=_STYLE,
        response_model=AgentTestRunResponse,
        errors=(400, 404),
    ),
)
