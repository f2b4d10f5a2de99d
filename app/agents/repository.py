"""Every query on agents, scoped to one organization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import select

from app.agents.models import Agent
from app.core.ids import normalize_id
from app.kit.repository import OrgScopedRepository


class AgentRepository(OrgScopedRepository[Agent]):
    model = Agent
    resource = "Agent"
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

    async def rows_by_ids(self, agent_ids: Sequence[str]) -> dict[str, Any]:
        """The rows of these agents of the organization, by id, in one statement (unknown
        and other organizations' ids are absent)."""
        wanted = [canonical for value in agent_ids if (canonical := normalize_id(value))]
        if not wanted:
            return {}
        statement = select(*self.list_columns).where(
            self._org_bound(), Agent.id.in_(list(dict.fromkeys(wanted)))
        )
        return {row.id: row for row in (await self._execute(statement)).all()}
