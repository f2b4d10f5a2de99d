"""Every statement on conversations' reply states, and the reads of the history a reply needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.result import result_tuple
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import UpdateBase

from app.access.subject import Subject
from app.agents.models import Agent
from app.ai_replies.models import AiReplyState
from app.channels.models import Channel
from app.conversations.models import Message
from app.core.clock import utcnow
from app.db.prepared import PreparedStatement, constant, prepared
from app.db.runner import StatementRunner
from app.inbox.models import Ticket
from app.inbox.repository import TicketRepository
from app.kit import outbox
from app.kit.outbox_models import OutboxJob

HISTORY_COLUMNS = (
    Message.id,
    Message.direction,
    Message.kind,
    Message.text,
    Message.template_name,
    Message.created_at,
)


@dataclass(slots=True)
class ReplyState:
    """A conversation's reply state (app/ai_replies/models.py) as read under its row lock;
    changes are written back with `save_state`."""

    ticket_id: str
    pending: list[str]
    first_pending_at: datetime | None
    due_at: datetime | None
    claim_token: str | None
    claimed_until: datetime | None
    silenced_reason: str | None
    replies: int


_STATE_COLUMNS = [getattr(AiReplyState, field.name) for field in fields(ReplyState)]
_SAVED = [field.name for field in fields(ReplyState) if field.name != "ticket_id"]
_STATE_OF_TICKET = select(*_STATE_COLUMNS).where(AiReplyState.ticket_id == bindparam("ticket_id"))
_STATE = PreparedStatement(_STATE_OF_TICKET)
_LOCKED_STATE = PreparedStatement(_STATE_OF_TICKET.with_for_update())
# Bind names differ from the columns': SQLAlchemy reserves those in an UPDATE.
_SAVE = (
    update(AiReplyState)
    .where(AiReplyState.ticket_id == bindparam("state_ticket_id"))
    .values({name: bindparam(f"new_{name}") for name in (*_SAVED, "updated_at")})
)
_SAVE_STATE = PreparedStatement(_SAVE)


def _saved_and_finished() -> PreparedStatement:
    """Where data-modifying CTEs exist (PostgreSQL): the reply job's fenced finish and the
    state's write in one statement; the state is written only when the finish found the
    run's claim."""
    settled = outbox.settled_by_run()
    return outbox.finish_with(settled, _SAVE.where(exists(select(settled.c.id))).cte("saved"))


_SAVE_STATE_AND_FINISH = _saved_and_finished()


def _claim(dialect_name: str) -> UpdateBase:
    """The claim, in one statement that needs no transaction: taken only when messages wait,
    their burst window has closed, and no unexpired claim holds the conversation. A webhook
    appending a message holds the row's lock; the claim waits for it and sees the message.
    On PostgreSQL it returns the answering parties too (SQLite's RETURNING cannot name the
    tables of an UPDATE's FROM)."""
    length = func.jsonb_array_length if dialect_name == "postgresql" else func.json_array_length
    claim = (
        update(AiReplyState)
        .where(
            AiReplyState.ticket_id == bindparam("claimed_ticket_id"),
            length(AiReplyState.pending) > constant(0),
            or_(AiReplyState.due_at.is_(None), AiReplyState.due_at <= bindparam("now")),
            or_(AiReplyState.claim_token.is_(None), AiReplyState.claimed_until <= bindparam("now")),
        )
        .values(
            claim_token=bindparam("new_claim_token"),
            claimed_until=bindparam("new_claimed_until"),
            updated_at=bindparam("now"),
        )
    )
    if dialect_name != "postgresql":
        return claim.returning(*_STATE_COLUMNS)
    parties = (
        _parties_of(bindparam("claimed_ticket_id"))
        .add_columns(Ticket.id.label("parties_ticket_id"))
        .subquery("parties")
    )
    return claim.where(parties.c.parties_ticket_id == AiReplyState.ticket_id).returning(
        *_STATE_COLUMNS, *(parties.c[name] for name in _PARTIES_KEYS)
    )


async def state_of(runner: StatementRunner, ticket_id: str) -> ReplyState | None:
    """The ticket's reply state as it is now (no lock)."""
    rows = await runner.fetch(_STATE, {"ticket_id": ticket_id})
    return ReplyState(*rows[0]) if rows else None


async def claimed_state_and_parties(
    runner: StatementRunner, ticket_id: str, token: str, until: datetime, now: datetime
) -> tuple[ReplyState, Any | None] | None:
    """The state with the claim taken for `token` until `until`, and the answering parties
    (`answering_parties`); None when the claim could not be taken (nothing waits, the burst
    window is open, or another claim holds it). One statement on PostgreSQL, two elsewhere."""
    dialect_name = runner.dialect_name
    statement = prepared(("ai_reply_claim", dialect_name), lambda: _claim(dialect_name))
    rows = await runner.fetch(
        statement,
        {
            "claimed_ticket_id": ticket_id,
            "new_claim_token": token,
            "new_claimed_until": until,
            "now": now,
        },
    )
    if not rows:
        return None
    width = len(_STATE_COLUMNS)
    state = ReplyState(*rows[0][:width])
    if dialect_name == "postgresql":
        return state, _parties_row(rows[0][width:])
    return state, await answering_parties(runner, ticket_id)


def _created_locked(dialect_name: str) -> UpdateBase:
    """The state created when missing and returned locked, in one statement: a conflict's
    no-op update locks the existing row as `FOR UPDATE` does."""
    dialect: Any = postgresql if dialect_name == "postgresql" else sqlite
    insert = dialect.insert(AiReplyState).values(
        ticket_id=bindparam("ticket_id"),
        organization_id=bindparam("organization_id"),
        pending=bindparam("pending"),
        replies=constant(0),
        updated_at=bindparam("now"),
    )
    statement: UpdateBase = insert.on_conflict_do_update(
        index_elements=["ticket_id"], set_={"ticket_id": insert.excluded.ticket_id}
    ).returning(*_STATE_COLUMNS)
    return statement


async def locked_state(
    runner: StatementRunner, ticket_id: str, organization_id: str | None = None
) -> ReplyState | None:
    """The ticket's reply state, its row locked until the transaction ends (PostgreSQL;
    SQLite's writers are one at a time already). With `organization_id`, created first when
    missing (concurrent first messages of one conversation create it once)."""
    if organization_id is None:
        rows = await runner.fetch(_LOCKED_STATE, {"ticket_id": ticket_id})
    else:
        dialect_name = runner.dialect_name
        statement = prepared(
            ("ai_reply_state_created", dialect_name), lambda: _created_locked(dialect_name)
        )
        rows = await runner.fetch(
            statement,
            {
                "ticket_id": ticket_id,
                "organization_id": organization_id,
                "pending": [],
                "now": utcnow(),
            },
        )
    return ReplyState(*rows[0]) if rows else None


_CHANNEL_COLUMNS = tuple(Channel.__table__.columns)
_channel_row = result_tuple([column.key for column in _CHANNEL_COLUMNS])


def _with_state_and_channel(statement: Select[Any]) -> Select[Any]:
    return (
        statement.add_columns(
            *_STATE_COLUMNS, *(column.label(f"channel_{column.key}") for column in _CHANNEL_COLUMNS)
        )
        .join_from(Ticket, AiReplyState, AiReplyState.ticket_id == Ticket.id)
        .outerjoin_from(
            Ticket,
            Channel,
            and_(
                Channel.id == Ticket.chat_phone_number_id,
                Channel.organization_id == Ticket.organization_id,
            ),
        )
        .with_for_update(of=(Ticket, AiReplyState))
    )


@dataclass(frozen=True, slots=True)
class LockedTurn:
    """What a reply's delivery reads under its locks: the ticket's row (`inbox.get_ticket`'s
    shape), its reply state, and its channel's row (`channels.channel_for_sending`'s shape;
    None when the ticket has none)."""

    ticket: Any
    state: ReplyState
    channel: Any | None


async def locked_turn(session: AsyncSession, subject: Subject, ticket_id: str) -> LockedTurn | None:
    """The ticket and its reply state, both rows locked until the transaction ends, and its
    channel, in one statement; None when the ticket or its state is missing."""
    found = await TicketRepository(session, subject).get_row_for_update_with(
        ticket_id, "with_reply_state_and_channel", _with_state_and_channel
    )
    if found is None:
        return None
    ticket, values = found
    width = len(_STATE_COLUMNS)
    channel = _channel_row(values[width:])
    return LockedTurn(
        ticket, ReplyState(*values[:width]), channel if channel.id is not None else None
    )


def _saved(state: ReplyState) -> dict[str, Any]:
    values = {f"new_{name}": getattr(state, name) for name in _SAVED}
    return {**values, "state_ticket_id": state.ticket_id, "new_updated_at": utcnow()}


async def save_state(runner: StatementRunner, state: ReplyState) -> None:
    """Write the state's changes (its row is locked by `locked_state`)."""
    await runner.execute(_SAVE_STATE, _saved(state))


async def save_state_and_settle(
    runner: StatementRunner, state: ReplyState, again: datetime | None, job_id: str, token: str
) -> None:
    """`save_state`, and the reply job finished (with `again`: run again then), in the
    runner's transaction: one statement where writes combine and the job finishes. Raises
    `outbox.StaleRun` when the run lost its claim, so the transaction rolls back."""
    params = _saved(state)
    if again is None and runner.combines_writes:
        [(finished,)] = await runner.fetch(
            _SAVE_STATE_AND_FINISH, {**params, "job_id": job_id, "token": token}
        )
        if not finished:
            raise outbox.StaleRun(job_id)
        return
    if again is None:
        await outbox.finish(runner, job_id, token)
    else:
        await outbox.reschedule(runner, job_id, token, again)
    await runner.execute(_SAVE_STATE, params)


_JOB_STATUS = PreparedStatement(select(OutboxJob.status).where(OutboxJob.id == bindparam("job_id")))


async def job_status(runner: StatementRunner, job_id: str) -> str | None:
    """The status of the outbox job with that id (None: there is none)."""
    rows = await runner.fetch(_JOB_STATUS, {"job_id": job_id})
    return rows[0].status if rows else None


_DROP_JOB = PreparedStatement(delete(OutboxJob).where(OutboxJob.id == bindparam("job_id")))


async def drop_job(runner: StatementRunner, job_id: str) -> None:
    await runner.execute(_DROP_JOB, {"job_id": job_id})


# The newest messages of a ticket, newest first (prepared: every reply reads it).
# With the messages, the conversation's pending ones as the same snapshot saw them: the claim
# holds no lock while the history is read, so a message stored meanwhile may be among the
# newest; it is pending but not answered now, and stays out (the next reply answers it).
_NEWEST_MESSAGES = PreparedStatement(
    select(
        *HISTORY_COLUMNS,
        select(AiReplyState.pending)
        .where(AiReplyState.ticket_id == Message.ticket_id)
        .scalar_subquery()
        .label("pending_now"),
    )
    .where(Message.ticket_id == bindparam("ticket_id"))
    .order_by(Message.created_at.desc(), Message.id.desc())
    .limit(bindparam("limit", type_=Integer()))
)


async def history_rows(
    runner: StatementRunner, ticket_id: str, limit: int, leaving_out: Sequence[str]
) -> tuple[list[Any], dict[str, Any]]:
    """The ticket's newest `limit` messages other than `leaving_out` (and other than messages
    still pending besides those: stored after the reply's claim), oldest first, and those of
    `leaving_out` the same statement read (all of them when they are the newest, as the
    messages a reply answers are)."""
    rows = await runner.fetch(
        _NEWEST_MESSAGES, {"ticket_id": ticket_id, "limit": limit + len(leaving_out)}
    )
    skipped = set(leaving_out)
    found = {row.id: row for row in rows if row.id in skipped}
    if rows and rows[0].pending_now:
        skipped.update(rows[0].pending_now)
    earlier = [row for row in rows if row.id not in skipped][:limit]
    earlier.reverse()
    return earlier, found


_MESSAGE = PreparedStatement(select(*HISTORY_COLUMNS).where(Message.id == bindparam("message_id")))


async def messages_by_id(runner: StatementRunner, ids: Sequence[str]) -> dict[str, Any]:
    """Messages by id, one statement each (only messages stored out of order need it)."""
    found = {}
    for message_id in ids:
        rows = await runner.fetch(_MESSAGE, {"message_id": message_id})
        if rows:
            found[message_id] = rows[0]
    return found


# What a reply needs of its ticket, channel and agent, in one prepared statement (the
# columns only: hydrating the three entities cost more than the statement).
_PARTIES_COLUMNS = (
    Ticket.status.label("ticket_status"),
    Ticket.assigned_user_id,
    Channel.id.label("channel_id"),
    Channel.livemode,
    Agent.id,
    Agent.organization_id,
    Agent.name,
    Agent.timezone,
    Agent.config,
    Agent.updated_at,
    Agent.status.label("agent_status"),
)
_PARTIES_KEYS = tuple(column.key for column in _PARTIES_COLUMNS)
_parties_row = result_tuple(_PARTIES_KEYS)


def _parties_of(ticket_id: Any) -> Select[Any]:
    return (
        select(*_PARTIES_COLUMNS)
        .select_from(Ticket)
        .outerjoin(Channel, Channel.id == Ticket.chat_phone_number_id)
        .outerjoin(Agent, Agent.id == Channel.agent_id)
        .where(Ticket.id == ticket_id)
    )


_PARTIES = PreparedStatement(_parties_of(bindparam("ticket_id")))


async def answering_parties(runner: StatementRunner, ticket_id: str) -> Any | None:
    """The ticket's status and assignee, its channel's id and mode, and the channel's agent
    as `AgentProfile.of` reads it (`id`... None where missing); None when there is no such
    ticket."""
    rows = await runner.fetch(_PARTIES, {"ticket_id": ticket_id})
    return rows[0] if rows else None
