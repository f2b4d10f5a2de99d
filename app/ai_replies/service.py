"""AI replies on messaging channels: a channel's agent answers its inbound messages.

Each new inbound message of a channel with an agent joins its conversation's reply state
(`note_inbound`, in the webhook's own transaction) and, when the conversation has no reply job
waiting, schedules one on the engine's queue, due when the burst window closes. The job
(app/ai_replies/tasks.py) claims the conversation in the database (`claim_turn`), lets the
conversation engine answer outside any transaction, then sends the reply through the same
service a person's reply uses (`conversations.service.send_message`: the channel's send budget,
the pair rate, the 24-hour window) and records it (`deliver`), all in one transaction.

Rules (docs/api.md, "AI replies on WhatsApp"):
- one reply per burst: messages that arrive within `ai_reply_burst_seconds` of each other are
  answered together, at most `ai_reply_max_wait_seconds` after the first of them;
- one reply per inbound message: a redelivered message is never stored twice, so it never
  joins a state twice; a reply answers exactly the messages pending when it was claimed;
- silence: the agent says nothing on a ticket assigned to a person, closed, or handed off
  (`transfer_to_human`, or the model unavailable: `agent.handoff` with `llm_unavailable`);
  a closed ticket's next message opens a new ticket, which the agent answers again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.agent_tests.service import ENGINE_QUEUE
from app.ai_replies import repository
from app.channels.models import Channel
from app.config import Settings
from app.conversations import inbound
from app.conversations import service as conversations
from app.conversations.models import Direction
from app.conversations.models import Message as StoredMessage
from app.conversations.schemas import MessageSend
from app.core.clock import utcnow
from app.db.runner import SessionRunner, StatementRunner
from app.engine.types import AgentProfile, Message, Role, TurnResult
from app.events.service import record_many
from app.inbox import service as inbox
from app.inbox.models import TicketStatus
from app.kit import outbox
from app.kit.errors import DomainError
from app.resources import Resources
from app.webhooks import tasks as webhook_jobs

logger = structlog.get_logger("switchboard.ai_replies")

REPLY_ACTOR = "ai_replies.reply"  # stored in outbox rows: never rename a pending one
_JOB_NAMESPACE = uuid.UUID("5b7c7f0e-61d8-4a52-9a57-2f0b8f1f4c21")
ACTIVE = "active"
MAX_REPLY_CHARS = 4096  # WhatsApp's limit for a text body
# What a non-text message says to the model (its caption, when it has one, follows).
DESCRIPTIONS = {
    "image": "an image",
    "sticker": "a sticker",
    "audio": "a voice message",
    "video": "a video",
    "document": "a document",
    "location": "a location",
    "contacts": "a contact card",
    "reaction": "a reaction",
    "unsupported": "a message of a type that cannot be shown",
}
# Types whose stored text is what the customer chose or wrote (buttons, list replies).
TEXT_KINDS = ("text", "interactive", "button")


def reply_job_id(ticket_id: str) -> str:
    """The outbox id of a conversation's reply job: at most one waits per conversation."""
    return str(uuid.uuid5(_JOB_NAMESPACE, f"ai-reply:{ticket_id}"))


def claim_lease(settings: Settings) -> timedelta:
    """How long a claim holds a conversation: a turn, a governed send, and a margin."""
    return timedelta(
        seconds=settings.engine_turn_deadline_seconds + settings.send_max_wait_seconds + 30.0
    )


@inbound.on_inbound_message
async def note_inbound(
    session: AsyncSession, channel: Channel, message: StoredMessage, settings: Settings
) -> None:
    """A new inbound message of a channel with an agent: pending on its conversation, and
    the conversation's reply job scheduled when none waits. In the webhook's transaction."""
    if channel.agent_id is None:
        return
    runner = SessionRunner(session)
    state = await repository.locked_state(runner, message.ticket_id, channel.organization_id)
    if state is None or state.silenced_reason is not None:
        return  # handed to a person: silent until the ticket is closed
    now = utcnow()
    if not state.pending or state.first_pending_at is None:
        state.first_pending_at = now
    state.pending = [*state.pending, message.id]
    quiet = now + timedelta(seconds=settings.ai_reply_burst_seconds)
    latest = state.first_pending_at + timedelta(seconds=settings.ai_reply_max_wait_seconds)
    state.due_at = min(quiet, max(latest, now))
    await repository.save_state(runner, state)
    job_id = reply_job_id(message.ticket_id)
    status = await repository.job_status(runner, job_id)
    if status == outbox.PARKED:
        await repository.drop_job(runner, job_id)  # a poisoned run: the new message retries
        status = None
    if status is None:
        outbox.schedule(
            session,
            REPLY_ACTOR,
            message.ticket_id,
            queue=ENGINE_QUEUE,
            at=state.due_at,
            job_id=job_id,
        )


@dataclass(frozen=True, slots=True)
class Turn:
    """A claimed conversation: what the agent answers and who it is."""

    ticket_id: str
    token: str
    answering: list[str]
    agent: AgentProfile
    history: list[Message]
    # When the latest inbound message read arrived: the 24-hour window is open from it.
    inbound_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """Not now: the burst window is open, or another worker holds the conversation."""

    until: datetime


@dataclass(frozen=True, slots=True)
class Silent:
    """Claimed, but the agent may not answer (the ticket is a person's, closed, or handed
    off; the channel lost its agent): `stay_silent` drops the claimed messages."""

    ticket_id: str
    token: str
    count: int


async def claim_turn(
    runner: StatementRunner, ticket_id: str, token: str, settings: Settings
) -> Turn | Wait | Silent | None:
    """Claim the conversation for one reply: one statement (no transaction needed), then the
    reads the turn needs. None when there is nothing to answer."""
    now = utcnow()
    claimed = await repository.claimed_state_and_parties(
        runner, ticket_id, token, now + claim_lease(settings), now
    )
    if claimed is None:
        return await _why_not_claimed(runner, ticket_id, now)
    state, parties = claimed
    answering = list(state.pending)
    if (
        not answering
        or parties is None
        or parties.channel_id is None
        or parties.id is None
        or parties.agent_status != ACTIVE
        or not _may_answer(parties.ticket_status, parties.assigned_user_id, state.silenced_reason)
    ):
        return Silent(ticket_id, token, len(answering))
    history, inbound_at = await _history(
        runner, ticket_id, answering, settings.engine_history_messages
    )
    return Turn(
        ticket_id=ticket_id,
        token=token,
        answering=answering,
        agent=AgentProfile.of(parties, livemode=parties.livemode),
        history=history,
        inbound_at=inbound_at,
    )


async def _why_not_claimed(runner: StatementRunner, ticket_id: str, now: datetime) -> Wait | None:
    """When to try again after a claim that was not taken (None: nothing waits)."""
    state = await repository.state_of(runner, ticket_id)
    if state is None or not state.pending:
        return None
    later = [
        moment
        for moment in (state.due_at, state.claimed_until if state.claim_token else None)
        if moment is not None and moment > now
    ]
    # Nothing in the way any more (it ended since the claim was tried): again at once.
    return Wait(max(later, default=now))


async def stay_silent(runner: StatementRunner, silent: Silent) -> None:
    """Drop the messages a `Silent` claim took, and release it, in the runner's
    transaction (messages that arrived since stay pending)."""
    state = await repository.locked_state(runner, silent.ticket_id)
    if state is None or state.claim_token != silent.token:
        return
    _answered(state, silent.count, utcnow())
    await repository.save_state(runner, state)


def _may_answer(status: str, assigned_user_id: str | None, silenced_reason: str | None) -> bool:
    return (
        status == TicketStatus.OPEN.value and assigned_user_id is None and silenced_reason is None
    )


def _answered(state: repository.ReplyState, count: int, now: datetime) -> None:
    """The first `count` pending messages are answered (or will never be); claim released."""
    state.pending = state.pending[count:]
    state.first_pending_at = None if not state.pending else state.first_pending_at
    if state.pending and (state.due_at is None or state.due_at < now):
        state.due_at = now
    state.claim_token = None
    state.claimed_until = None


def describe(kind: str, text: str | None) -> str:
    """A stored message as the model reads it: its text, or a short description."""
    if kind in TEXT_KINDS and text:
        return text
    what = DESCRIPTIONS.get(kind, f"a {kind} message")
    caption = f' with the caption "{text}"' if text else ""
    return f"[The customer sent {what}{caption}]"


async def _history(
    runner: StatementRunner, ticket_id: str, answering: list[str], limit: int
) -> tuple[list[Message], datetime | None]:
    """The conversation as the model reads it: earlier messages, then the ones answered now
    (in the order they arrived), consecutive messages of one side joined; and when the
    latest inbound message of those arrived."""
    earlier, found = await repository.history_rows(
        runner, ticket_id, max(0, limit - len(answering)), answering
    )
    missing = [id_ for id_ in answering if id_ not in found]
    if missing:  # older than the newest rows read (messages stored out of order)
        found.update(await repository.messages_by_id(runner, missing))
    rows = [*earlier, *(found[id_] for id_ in answering if id_ in found)]
    history: list[Message] = []
    for row in rows:
        role: Role = "user" if row.direction == Direction.INBOUND.value else "assistant"
        if role == "user":
            content = describe(row.kind, row.text)
        else:
            content = row.text or f"[template {row.template_name}]"
        if history and history[-1].role == role:
            history[-1] = Message(role, f"{history[-1].content}\n{content}")
        else:
            history.append(Message(role, content))
    while history and history[0].role != "user":
        history.pop(0)
    inbound = [row.created_at for row in rows if row.direction == Direction.INBOUND.value]
    return history, max(inbound, default=None)


async def release(runner: StatementRunner, ticket_id: str, token: str) -> datetime | None:
    """Give the claim back unanswered (the organization's AI limits are full, the worker
    failed); returns when the conversation should be tried again."""
    state = await repository.locked_state(runner, ticket_id)
    if state is None or state.claim_token != token:
        return None
    state.claim_token = None
    state.claimed_until = None
    await repository.save_state(runner, state)
    return utcnow()


@dataclass(frozen=True, slots=True)
class Delivered:
    """What `deliver` did: when to answer again (more messages arrived meanwhile) or None,
    and the turn's events and their fan-out, to `announce` once the transaction commits."""

    again: datetime | None
    fanned: webhook_jobs.FannedOut = field(default_factory=webhook_jobs.FannedOut)


async def deliver(
    session: AsyncSession,
    resources: Resources,
    turn: Turn,
    result: TurnResult,
    *,
    job_id: str,
    job_token: str,
) -> Delivered:
    """Send the agent's reply through the channel, record what happened and settle the reply
    job (`job_id`, claimed with `job_token`), in the caller's transaction. Raises
    `outbox.StaleRun` when the job's run lost its claim: the transaction must roll back."""
    agent = turn.agent
    # Who acts: the agent, in the channel's organization and mode.
    subject = Subject(
        organization_id=agent.organization_id,
        principal_id=agent.agent_id,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=agent.livemode,
    )
    runner = SessionRunner(session)
    # The ticket's lock serialises with a person's assign or close of it: whichever commits
    # first wins.
    locked = await repository.locked_turn(session, subject, turn.ticket_id)
    if locked is None or locked.state.claim_token != turn.token:
        logger.warning("reply dropped: the claim was lost", ticket_id=turn.ticket_id)
        await outbox.finish(runner, job_id, job_token)
        return Delivered(None)
    ticket, state = locked.ticket, locked.state
    now = utcnow()
    if not _may_answer(ticket.status, ticket.assigned_user_id, state.silenced_reason):
        _answered(state, len(turn.answering), now)
        await repository.save_state_and_settle(runner, state, None, job_id, job_token)
        return Delivered(None)
    message = None
    # The sent message's event joins the turn's: one insert and one fan-out job for all.
    events: list[tuple[str, dict[str, Any]]] = []
    if result.reply is not None and result.failure is None:
        try:
            message = await conversations.send_message(
                session,
                subject,
                resources,
                ticket.id,
                MessageSend(text=result.reply[:MAX_REPLY_CHARS]),
                agent_id=turn.agent.agent_id,
                locked_ticket=ticket,
                channel=locked.channel,
                emitted=events,
                inbound_at=turn.inbound_at,
            )
        except DomainError as exc:
            logger.warning("AI reply not sent", ticket_id=ticket.id, reason=exc.message)
    ids = {
        "ticket_id": ticket.id,
        "channel_id": ticket.chat_phone_number_id,
        "agent_id": turn.agent.agent_id,
        "message_id": message.id if message is not None else None,
        "in_reply_to": turn.answering,
    }
    events.extend((kind, {**data, **ids}) for kind, data in result.events)
    # Fanned out here, in this transaction: no fan-out job to run after it.
    recorded = await record_many(session, ticket, events)
    fanned = await webhook_jobs.fan_out_now(runner, recorded)
    _answered(state, len(turn.answering), now)
    if message is not None:
        state.replies += 1
    if result.action is not None and result.action.kind == "handoff":
        state.silenced_reason = result.action.reason[:500]
        state.pending = []
        state.first_pending_at = None
    again = None
    if result.action is not None and result.action.kind == "end":
        await inbox.close_ticket(session, subject, ticket.id)
    elif state.pending and state.silenced_reason is None:
        again = state.due_at  # more messages arrived meanwhile
    await repository.save_state_and_settle(runner, state, again, job_id, job_token)
    return Delivered(again, fanned)
