"""Every query on agent test runs, scoped to one organization."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import bindparam

from app.agent_tests.models import AgentTestRun
from app.kit.repository import Filter, OrgScopedRepository


class AgentTestRunRepository(OrgScopedRepository[AgentTestRun]):
    model = AgentTestRun
    resource = "Agent test"
    moded = True
    list_columns: ClassVar = (
        AgentTestRun.id,
        AgentTestRun.organization_id,
        AgentTestRun.agent_id,
        AgentTestRun.livemode,
        AgentTestRun.name,
        AgentTestRun.status,
        AgentTestRun.spec,
        AgentTestRun.results,
        AgentTestRun.transcript,
        AgentTestRun.error,
        AgentTestRun.provider,
        AgentTestRun.model,
        AgentTestRun.input_tokens,
        AgentTestRun.output_tokens,
        AgentTestRun.cost,
        AgentTestRun.started_at,
        AgentTestRun.finished_at,
        AgentTestRun.created_at,
        AgentTestRun.updated_at,
    )

    @staticmethod
    def of_agent(agent_id: str) -> Filter:
        return Filter(
            "agent", lambda: AgentTestRun.agent_id == bindparam("agent_id"), {"agent_id": agent_id}
        )
