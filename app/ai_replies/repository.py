"""Every statement on conversations' reply states, and the reads of the history a reply needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.models import Agent
from app.ai_replies.models import AiReplyState
from app.channels.models import Channel
from app.conversations.models import Message
from app.core.clock import utcnow
from app.inbox.models import Ticket
from app.kit.outbox_models import OutboxJob

HISTORY_COLUMNS = (
    Message.id,
    Message.direction,
    Message.kind,
    Message.text,
    Message.template_name,
    Message.created_at,
)


async def locked_state(
    session: AsyncSession, ticket_id: str, organization_id: str | None = None
) -> AiReplyState | None:
    """The ticket's reply state, its row locked until the transaction ends (PostgreSQL;
    SQLite's writers are one at a time already). With `organization_id`, created first when
    missing (concurrent first messages of one conversation create it once)."""
    if organization_id is not None:
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        await session.execute(
            dialect.insert(AiReplyState)
            .values(
                ticket_id=ticket_id,
                organization_id=organization_id,
                pending=[],
                replies=0,
                updated_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["ticket_id"])
        )
    return await session.scalar(
        select(AiReplyState)
        .where(AiReplyState.ticket_id == ticket_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def job_status(session: AsyncSession, job_id: str) -> str | None:
    """The status of the outbox job with that id (None: there is none)."""
    return await session.scalar(select(OutboxJob.status).where(OutboxJob.id == job_id))


async def drop_job(session: AsyncSession, job_id: str) -> None:
    job = await session.get(OutboxJob, job_id)
    if job is not None:
        await session.delete(job)
        await session.flush()


async def history_rows(
    session: AsyncSession, ticket_id: str, limit: int, leaving_out: Sequence[str]
) -> tuple[list[Any], dict[str, Any]]:
    """The ticket's newest `limit` messages other than `leaving_out`, oldest first, and those
    of `leaving_out` the same statement read (all of them when they are the newest, as the
    messages a reply answers are)."""
    statement = (
        select(*HISTORY_COLUMNS)
        .where(Message.ticket_id == ticket_id)
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(limit + len(leaving_out))
    )
    skipped = set(leaving_out)
    rows = (await session.execute(statement)).all()
    found = {row.id: row for row in rows if row.id in skipped}
    earlier = [row for row in rows if row.id not in skipped][:limit]
    earlier.reverse()
    return earlier, found


async def messages_by_id(session: AsyncSession, ids: Sequence[str]) -> dict[str, Any]:
    if not ids:
        return {}
    statement = select(*HISTORY_COLUMNS).where(Message.id.in_(list(ids)))
    return {row.id: row for row in (await session.execute(statement)).all()}


async def answering_parties(
    session: AsyncSession, ticket_id: str
) -> tuple[Ticket | None, Channel | None, Agent | None]:
    """The ticket, its channel and the channel's agent, in one statement (None where missing)."""
    statement = (
        select(Ticket, Channel, Agent)
        .outerjoin(Channel, Channel.id == Ticket.chat_phone_number_id)
        .outerjoin(Agent, Agent.id == Channel.agent_id)
        .where(Ticket.id == ticket_id)
    )
    row = (await session.execute(statement)).first()
    if row is None:
        return None, None, None
    return row[0], row[1], row[2]
