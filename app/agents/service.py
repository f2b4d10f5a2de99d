"""Agent operations: the resolvers REST and GraphQL both call.

An agent id must have the form of a UUID (any form `uuid.UUID` reads: upper case, without
hyphens, in braces); anything else is refused with 400 before any lookup, as docs/api.md says for
agents. Agents emit no webhook events (docs/api.md: the ai.* events come from agent calls).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agents.config import AgentConfig
from app.agents.models import Agent
from app.agents.repository import AgentRepository
from app.agents.schemas import ACTIVE, AgentCreate, AgentUpdate
from app.core.ids import normalize_id
from app.kit.errors import InvalidInput
from app.kit.pagination import CursorPage, CursorParams
from app.webhooks.ssrf import Resolver, resolve_public_addresses, system_resolver

INVALID_ID_MESSAGE = "Invalid or missing agent_id"


def _checked_id(agent_id: str) -> str:
    canonical = normalize_id(agent_id.strip())
    if canonical is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="id")
    return canonical


async def _get_entity(repository: AgentRepository, agent_id: str) -> Agent:
    return await repository.get_or_404(_checked_id(agent_id))


async def _guard_tool_urls(config: AgentConfig, allow_private: bool, resolver: Resolver) -> None:
    """The outbound URL guard webhooks use (app/webhooks/ssrf.py), on every URL the agent
    would call (tools and the reply endpoint): none may reach this host, its private
    networks or cloud metadata."""
    urls = [
        *(
            (f"custom_tools[{index}].url", tool.url)
            for index, tool in enumerate(config.custom_tools)
        ),
        *((f"mcp_tools[{index}].url", tool.url) for index, tool in enumerate(config.mcp_tools)),
        *([("llm_base_url", config.llm_base_url)] if config.llm_base_url else []),
    ]
    for where, url in urls:
        try:
            await resolve_public_addresses(url, allow_private=allow_private, resolver=resolver)
        except InvalidInput as exc:
            field = f"agent_config.{where}"
            raise InvalidInput(f"{field}: {exc.message}", field=field) from exc


async def create_agent(
    session: AsyncSession,
    subject: Subject,
    data: AgentCreate,
    *,
    allow_private: bool,
    resolver: Resolver = system_resolver,
) -> Agent:
    """A new agent, active, with the normalized configuration.

    `allow_private` is `settings.allow_private_webhook_urls` (one switch for every URL a
    user gives the service to call); `resolver` exists for tests.
    """
    await _guard_tool_urls(data.agent_config, allow_private, resolver)
    agent = Agent(
        organization_id=subject.organization_id,
        name=data.name,
        agent_type=data.agent_type,
        timezone=data.timezone,
        status=ACTIVE,
        config=data.agent_config.normalized(),
    )
    AgentRepository(session, subject).add(agent)
    await session.flush()
    return agent


async def get_agent(session: AsyncSession, subject: Subject, agent_id: str) -> Any:
    row = await AgentRepository(session, subject).get_row_or_404(_checked_id(agent_id))
    return row


async def list_agents(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    """Every agent of the organization, whatever its status, newest first."""
    return await AgentRepository(session, subject).cursor_page(params)


async def update_agent(
    session: AsyncSession,
    subject: Subject,
    agent_id: str,
    data: AgentUpdate,
    *,
    allow_private: bool,
    resolver: Resolver = system_resolver,
) -> Agent:
    """Replaces the fields given. A new `agent_config` replaces the stored one whole: voice
    settings, prompts and tool integrations left out of it are gone, not kept."""
    repository = AgentRepository(session, subject)
    agent = await _get_entity(repository, agent_id)
    if data.agent_config is not None:
        await _guard_tool_urls(data.agent_config, allow_private, resolver)
    if data.name is not None:
        agent.name = data.name
    if data.timezone is not None:
        agent.timezone = data.timezone
    if data.is_active is not None:
        agent.status = data.is_active
    if data.agent_config is not None:
        agent.config = data.agent_config.normalized()
    await session.flush()
    return agent


async def delete_agent(session: AsyncSession, subject: Subject, agent_id: str) -> str:
    """Permanent removal; returns the agent's id in its canonical form."""
    repository = AgentRepository(session, subject)
    agent = await _get_entity(repository, agent_id)
    deleted_id = agent.id
    await repository.delete(agent)
    await session.flush()
    return deleted_id
