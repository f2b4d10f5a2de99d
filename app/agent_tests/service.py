"""Agent test operations (the resolvers REST and GraphQL both call) and the run itself.

Creating a test stores a `queued` run and schedules its job in the same transaction: the
conversation runs in a worker (app/agent_tests/tasks.py), never on the API's event loop. The
run goes `running`, then `passed` (every expectation met), `failed` (one or more not met) or
`error` (it could not finish: the model failed or refused the request, the agent is gone).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agent_tests.models import AgentTestRun
from app.agent_tests.repository import AgentTestRunRepository
from app.agent_tests.schemas import QUEUED, AgentTestCreate
from app.agents.models import Agent
from app.agents.repository import AgentRepository
from app.agents.service import INVALID_ID_MESSAGE
from app.core.ids import new_id, normalize_id
from app.engine.limits import ConversationLimitReached, ConversationLimits
from app.kit import outbox
from app.kit.errors import InvalidInput, NotFound
from app.kit.pagination import CursorPage, CursorParams

RUN_ACTOR = "agent_tests.run"  # stored in outbox rows: never rename a pending one
ENGINE_QUEUE = "engine"


async def _agent(session: AsyncSession, subject: Subject, agent_id: str) -> Agent:
    canonical = normalize_id(agent_id.strip())
    if canonical is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="agent_id")
    return await AgentRepository(session, subject.organization_id).get_or_404(canonical)


async def create_agent_test(
    session: AsyncSession,
    subject: Subject,
    agent_id: str,
    data: AgentTestCreate,
    limits: ConversationLimits,
) -> AgentTestRun:
    """Queue a run of `data` against the agent; 429 while the organization holds all its
    concurrent AI conversations."""
    agent = await _agent(session, subject, agent_id)
    if not await limits.available(subject.organization_id):
        raise ConversationLimitReached()
    run = AgentTestRun(
        id=new_id(),
        organization_id=subject.organization_id,
        agent_id=agent.id,
        livemode=subject.livemode,
        name=data.name,
        status=QUEUED,
        spec=data.spec(),
        results=[],
        transcript=[],
        input_tokens=0,
        output_tokens=0,
        cost=0.0,
    )
    AgentTestRunRepository(session, subject.organization_id).add(run)
    await session.flush()
    outbox.schedule(session, RUN_ACTOR, run.id, queue=ENGINE_QUEUE)
    return run


async def get_agent_test(
    session: AsyncSession, subject: Subject, agent_id: str, run_id: str
) -> Any:
    agent = await _agent(session, subject, agent_id)
    row = await AgentTestRunRepository(session, subject.organization_id).get_row(run_id)
    if row is None or row.agent_id != agent.id:
        raise NotFound("Agent test")
    return row


async def get_agent_test_run(session: AsyncSession, subject: Subject, run_id: str) -> Any:
    """A run by its id alone (GraphQL `agentTestRun`)."""
    return await AgentTestRunRepository(session, subject.organization_id).get_row_or_404(run_id)


async def list_agent_tests(
    session: AsyncSession, subject: Subject, agent_id: str, params: CursorParams
) -> CursorPage[Any]:
    """The agent's runs, newest first."""
    agent = await _agent(session, subject, agent_id)
    repository = AgentTestRunRepository(session, subject.organization_id)
    return await repository.cursor_page(params, repository.of_agent(agent.id))
