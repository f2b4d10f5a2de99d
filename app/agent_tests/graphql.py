"""Agent test types and fields; each field calls one agent tests service operation. A run's
type is its shape (app/agent_tests/schemas.py); rows serve it as they are."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.agent_tests import service
from app.agent_tests.schemas import RUN, AgentTestCreate, AgentTestRun
from app.engine.limits import ConversationLimits
from app.graphql.context import Context
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_field
from app.kit.errors import InvalidInput, NotFound, RateLimited

AgentTestRunConnection = Connection[AgentTestRun]


def as_run(row: Any) -> AgentTestRun:
    return RUN.as_graphql(row)


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
