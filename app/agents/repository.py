"""Every query on agents, scoped to one organization."""

from __future__ import annotations

from typing import ClassVar

from app.agents.models import Agent
from app.kit.repository import OrgScopedRepository


class AgentRepository(OrgScopedRepository[Agent]):
    model = Agent
    counted = True
    list_columns: ClassVar = (
        Agent.id,
        Agent.organization_id,
        Agent.name,
        Agent.agent_type,
        Agent.timezone,
        Agent.status,
        Agent.config,
        Agent.created_at,
        Agent.updated_at,
    )

    def add(self, agent: Agent) -> None:
        self.session.add(agent)

    async def delete(self, agent: Agent) -> None:
        await self.session.delete(agent)
