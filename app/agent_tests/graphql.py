"""Agent test types and fields; each field calls one agent tests service operation."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.agent_tests import service
from app.agent_tests.schemas import AgentTestCreate, run_to_public
from app.engine.limits import ConversationLimits
from app.graphql.context import Context
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_field
from app.kit.errors import InvalidInput, NotFound, RateLimited


@strawberry.type(description="A usage report: tokens in and out.")
class TokenUsage:
    input_tokens: int
    output_tokens: int


@strawberry.type(
    description="A scripted conversation played against an agent in test mode, and its verdict."
)
class AgentTestRun:
    id: strawberry.ID
    agent_id: str
    name: str | None
    status: str = strawberry.field(description="queued, running, passed, failed or error")
    livemode: bool
    turns: list[str]
    tool_mocks: JSON
    expectations: JSON
    results: JSON = strawberry.field(description="Per expectation: index, type, passed, detail")
    transcript: JSON = strawberry.field(description="role, text, tool_calls, action per entry")
    error: JSON | None = strawberry.field(description="code, message, provider, status")
    provider: str | None
    model: str | None
    usage: TokenUsage
    cost: float
    created_at: str
    started_at: str | None
    finished_at: str | None
    updated_at: str


AgentTestRunConnection = Connection[AgentTestRun]


def _text(value: Any) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def as_run(row: Any) -> AgentTestRun:
    public = run_to_public(row)
    return AgentTestRun(
        id=strawberry.ID(public["id"]),
        agent_id=public["agent_id"],
        name=public["name"],
        status=public["status"],
        livemode=public["livemode"],
        turns=public["turns"],
        tool_mocks=public["tool_mocks"],
        expectations=public["expectations"],
        results=public["results"],
        transcript=public["transcript"],
        error=public["error"],
        provider=public["provider"],
        model=public["model"],
        usage=TokenUsage(**public["usage"]),
        cost=public["cost"],
        created_at=_text(public["created_at"]) or "",
        started_at=_text(public["started_at"]),
        finished_at=_text(public["finished_at"]),
        updated_at=_text(public["updated_at"]) or "",
    )


@strawberry.input(description="What the test says and checks; see the REST body.")
class AgentTestInput:
    name: str | None = strawberry.UNSET
    turns: list[str]
    tool_mocks: JSON | None = strawberry.UNSET
    expectations: JSON


AGENT_TESTS = DomainMutations(
    "AgentTestRun",
    scope=Scope.AGENTS_WRITE,
    errors=(InvalidInput, NotFound, RateLimited),
    node=AgentTestRun,
    as_node=as_run,
)


@strawberry.type
class Query:
    agent_test_run = node_field(Scope.AGENTS_READ, service.get_agent_test_run, as_run, AgentTestRun)

    @strawberry.field(extensions=requires(Scope.AGENTS_READ))
    async def agent_test_runs(
        self,
        info: Info[Context, None],
        agent_id: strawberry.ID,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> AgentTestRunConnection | None:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_agent_tests(
                session, subject, agent_id, params
            ),
            as_run,
        )


@strawberry.type
class Mutation:
    @AGENT_TESTS.mutation(description="Queue a test run of the agent; poll agentTestRun(id).")
    async def run_agent_test(
        self, info: Info[Context, None], agent_id: strawberry.ID, input: AgentTestInput
    ) -> Payload:
        limits = ConversationLimits(info.context.resources)
        return await AGENT_TESTS.save(
            info,
            AgentTestCreate,
            input,
            lambda session, subject, data: service.create_agent_test(
                session, subject, agent_id, data, limits
            ),
        )
