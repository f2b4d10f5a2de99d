"""`emit()`: the one way a domain records that something happened.

The event row and the job that fans it out are written in the caller's transaction, so an
event exists exactly when the change that caused it was committed; the events of one
organization in one transaction share one fan-out job. A transaction can fan its events out
itself instead (`fan_out_here`: the platform's webhooks do). The event's `data` is the
resource in its REST shape, frozen as JSON at that moment.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, cast

from sqlalchemy import Table, bindparam, insert
from sqlalchemy import event as orm_events
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.jsonutil import dumps, loads
from app.db.prepared import PreparedStatement
from app.events.models import Event
from app.kit import outbox

FAN_OUT_ACTOR = "events.fan_out"
EVENTS_QUEUE = "events"


class EventOwner(Protocol):
    """Whose event it is: a Subject, or anything else that names an organization and mode."""

    @property
    def organization_id(self) -> str: ...

    @property
    def livemode(self) -> bool: ...


def new_event_id() -> str:
    return f"evt_{secrets.token_hex(16)}"


async def emit(
    session: AsyncSession, owner: EventOwner, event_type: str, data: dict[str, Any]
) -> Event:
    """Record `event_type` about `data` (the resource as REST returns it) in this transaction."""
    event = Event(
        id=new_event_id(),
        organization_id=owner.organization_id,
        type=event_type,
        livemode=owner.livemode,
        data=loads(dumps(data)),
        created_at=utcnow(),
    )
    session.add(event)
    _fan_out(session, owner.organization_id, [event.id])
    return event


class EmittedEvent(NamedTuple):
    """An event as written: what fanning it out and streaming it read."""

    id: str
    organization_id: str
    type: str
    livemode: bool
    data: Any
    created_at: datetime


async def emit_many(
    session: AsyncSession, owner: EventOwner, events: Sequence[tuple[str, dict[str, Any]]]
) -> list[str]:
    """`emit` for a batch of (event type, data) of one owner: one multi-row INSERT, and the
    fan-out job the transaction's other events of the organization share."""
    recorded = await record_many(session, owner, events)
    ids = [event.id for event in recorded]
    if ids:
        _fan_out(session, owner.organization_id, ids)
    return ids


async def record_many(
    session: AsyncSession, owner: EventOwner, events: Sequence[tuple[str, dict[str, Any]]]
) -> list[EmittedEvent]:
    """The events of `emit_many` written without a fan-out job: for a job that fans them out
    itself, in this same transaction (app/webhooks/tasks.py `fan_out_now`)."""
    if not events:
        return []
    now = utcnow()
    frozen = loads(dumps([data for _, data in events]))  # one JSON round trip per batch
    recorded = [
        EmittedEvent(
            new_event_id(),
            owner.organization_id,
            event_type,
            owner.livemode,
            data,
            # A microsecond apart: the batch keeps its order where events are read in order.
            now + timedelta(microseconds=index),
        )
        for index, ((event_type, _), data) in enumerate(zip(events, frozen, strict=True))
    ]
    # Prepared: on PostgreSQL one pipelined executemany on the session's own connection (the
    # ORM's bulk path, or a Core insert through the session, cost more than the statement).
    await _INSERT_EVENTS.execute_many(session, [event._asdict() for event in recorded])
    return recorded


_INSERT_EVENTS = PreparedStatement(
    insert(cast(Table, Event.__table__)).values(
        {name: bindparam(name) for name in EmittedEvent._fields}
    )
)


# (organization id, event id) of the events a transaction fans out itself.
_FANNED_OUT_HERE = "switchboard.events.fanned_out_here"


def _fan_out(session: AsyncSession, organization_id: str, event_ids: list[str]) -> None:
    """The transaction's events of one organization share one fan-out job, unless the
    transaction fans them out itself (`fan_out_here`)."""
    collected: list[tuple[str, str]] | None = session.info.get(_FANNED_OUT_HERE)
    if collected is not None:
        collected.extend((organization_id, event_id) for event_id in event_ids)
        return
    outbox.schedule_joined(session, FAN_OUT_ACTOR, organization_id, *event_ids, queue=EVENTS_QUEUE)


def fan_out_here(session: AsyncSession) -> None:
    """The session's transaction fans its events out itself before it commits (the platform's
    webhooks: no fan-out job to run after them). `take_collected` hands over their ids; ids
    still collected at commit get the fan-out job they would have had."""
    session.info[_FANNED_OUT_HERE] = []


def take_collected(session: AsyncSession, at_most: int = outbox.MAX_JOINED_ARGS) -> list[str]:
    """The ids of the events written since `fan_out_here` (or the last take), oldest first;
    those a savepoint rolled back are among them (their rows are gone). More than `at_most`
    (a webhook body of many statuses) are not taken: their fan-out jobs share the work out
    at commit, a job's worth each, instead of one request doing it all."""
    collected: list[tuple[str, str]] | None = session.info.get(_FANNED_OUT_HERE)
    if not collected or len(collected) > at_most:
        return []
    session.info[_FANNED_OUT_HERE] = []
    return [event_id for _, event_id in collected]


@orm_events.listens_for(Session, "before_commit")
def _schedule_the_uncollected(session: Session) -> None:
    collected: list[tuple[str, str]] | None = session.info.get(_FANNED_OUT_HERE)
    if not collected or session.in_nested_transaction():
        return
    session.info[_FANNED_OUT_HERE] = []
    for organization_id, event_id in collected:
        # `schedule_joined` needs only `add` and `info`, which the sync session has too.
        outbox.schedule_joined(
            cast(AsyncSession, session),
            FAN_OUT_ACTOR,
            organization_id,
            event_id,
            queue=EVENTS_QUEUE,
        )


@orm_events.listens_for(Session, "after_commit")
@orm_events.listens_for(Session, "after_rollback")
def _forget_fan_out_here(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_FANNED_OUT_HERE, None)


def event_body(event: Any) -> dict[str, Any]:
    """The JSON a webhook receives and a live subscription streams."""
    return {
        "id": event.id,
        "type": event.type,
        "created_at": event.created_at,
        "organization_id": event.organization_id,
        "livemode": event.livemode,
        "data": event.data,
    }
