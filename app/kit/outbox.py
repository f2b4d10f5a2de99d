"""The job outbox: jobs are rows written in the caller's transaction, then handed to Dramatiq.

`schedule()` adds a row to the session; when that session commits, the relay hands the job to
the broker at once. The row stays until a worker finishes the job, so nothing is lost when the
process dies between commit and enqueue, or when Redis restarts empty: `sweep()` re-sends every
due job the broker has not finished within `outbox_redispatch_seconds`.

A worker claims a job before running it (`claim`): the claim counts the run and locks the row
for the lease, so a duplicate message finds it taken, and a job that keeps killing its worker or
raising is parked after `job_max_starts` runs instead of crash-looping forever.

Messages carry only the job id; the row is the truth. Jobs are named (`actor`), never imported:
`app/` knows no actor code.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import dramatiq
import structlog
from sqlalchemy import Table, bindparam, delete, event, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from app.kit.clock import utcnow
from app.kit.outbox_models import OutboxJob

logger = structlog.get_logger("switchboard.outbox")

DEFAULT_QUEUE = "default"
PENDING, PARKED = "pending", "parked"
_TO_RELAY = "switchboard.outbox.to_relay"
MAX_ERROR_LENGTH = 2000
SWEEP_BATCH = 500


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a broker message needs: which actor, on which queue, for which row."""

    id: str
    actor: str
    queue: str


def schedule(
    session: AsyncSession,
    actor: str,
    *args: Any,
    queue: str = DEFAULT_QUEUE,
    at: datetime | None = None,
) -> str:
    """Record a job in the session's transaction; relayed to the broker after commit.

    `args` must be JSON values (ids and primitives). A job due later (`at` in the future) is
    left to the sweep, which sends it when it falls due.
    """
    now = utcnow()
    due = at is None or at <= now
    job = OutboxJob(
        id=str(uuid.uuid4()),
        actor=actor,
        queue=queue,
        args=list(args),
        status=PENDING,
        starts=0,
        available_at=at or now,
        dispatched_at=now if due else None,
        created_at=now,
    )
    session.add(job)
    if due:
        session.info.setdefault(_TO_RELAY, []).append(JobRef(job.id, actor, queue))
    return job.id


# --- relay -------------------------------------------------------------------------------


Dispatcher = Callable[[Sequence[JobRef]], None]


def broker_dispatcher(refs: Sequence[JobRef]) -> None:
    """Hand jobs to the process's Dramatiq broker; a failure is left to the sweep."""
    broker = dramatiq.get_broker()
    for ref in refs:
        try:
            broker.enqueue(dramatiq.Message(ref.queue, ref.actor, (ref.id,), {}, {}))
        except Exception:
            logger.warning("enqueue failed; the sweep will re-send", job_id=ref.id, exc_info=True)


_dispatcher: Dispatcher | None = None


def set_dispatcher(dispatcher: Dispatcher | None) -> None:
    """Who receives committed jobs in this process (None: nobody, the sweep sends them)."""
    global _dispatcher
    _dispatcher = dispatcher


@event.listens_for(Session, "after_commit")
def _relay_after_commit(session: Session) -> None:
    refs = session.info.pop(_TO_RELAY, None)
    if refs and _dispatcher is not None:
        _dispatcher(refs)


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    session.info.pop(_TO_RELAY, None)


async def sweep(session: AsyncSession, redispatch_after: float) -> list[JobRef]:
    """Due jobs that nobody holds and the broker has not had recently, marked as sent now.

    The caller commits, then dispatches the returned jobs. On PostgreSQL concurrent sweepers
    skip each other's rows (FOR UPDATE SKIP LOCKED).
    """
    now = utcnow()
    stale = now - timedelta(seconds=redispatch_after)
    statement = (
        select(OutboxJob.id, OutboxJob.actor, OutboxJob.queue)
        .where(
            OutboxJob.status == PENDING,
            OutboxJob.available_at <= now,
            or_(OutboxJob.dispatched_at.is_(None), OutboxJob.dispatched_at <= stale),
            or_(OutboxJob.locked_until.is_(None), OutboxJob.locked_until <= now),
        )
        .order_by(OutboxJob.available_at)
        .limit(SWEEP_BATCH)
    )
    if session.get_bind().dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    refs = [JobRef(*row) for row in (await session.execute(statement)).all()]
    if refs:
        await session.execute(
            update(OutboxJob)
            .where(OutboxJob.id.in_([ref.id for ref in refs]))
            .values(dispatched_at=now)
        )
    return refs


# --- worker side -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: str
    actor: str
    args: list[Any]
    starts: int


_JOBS = cast(Table, OutboxJob.__table__)
# Hot-path statements, built once: plain Core on the table (no ORM bulk-update machinery),
# values bound per call.
_CLAIM = (
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("job_id"),
        _JOBS.c.status == PENDING,
        _JOBS.c.available_at <= bindparam("now"),
        or_(_JOBS.c.locked_until.is_(None), _JOBS.c.locked_until <= bindparam("now")),
    )
    .values(starts=_JOBS.c.starts + 1, locked_until=bindparam("lease_end"))
    .returning(_JOBS.c.actor, _JOBS.c.args, _JOBS.c.starts)
)
_FINISH = delete(_JOBS).where(_JOBS.c.id == bindparam("job_id"))


async def claim(
    session: AsyncSession, job_id: str, *, lease_seconds: float, max_starts: int
) -> ClaimedJob | None:
    """Take the job for one run, or None: finished, parked, not due, or held by another run.

    A job that has already started `max_starts` times without finishing is parked here.
    """
    now = utcnow()
    result = await session.execute(
        _CLAIM,
        {"job_id": job_id, "now": now, "lease_end": now + timedelta(seconds=lease_seconds)},
    )
    row = result.first()
    if row is None:
        return None
    actor, args, starts = row
    if starts > max_starts:
        await park(session, job_id, f"started {starts - 1} times without finishing")
        return None
    return ClaimedJob(job_id, actor, list(args), starts)


async def finish(session: AsyncSession, job_id: str) -> None:
    await session.execute(_FINISH, {"job_id": job_id})


async def reschedule(
    session: AsyncSession, job_id: str, at: datetime, error: str | None = None
) -> None:
    """Run the job again at `at` (the sweep sends it then). A clean reschedule resets `starts`;
    one after an error keeps counting towards parking."""
    values: dict[str, Any] = {"available_at": at, "dispatched_at": None, "locked_until": None}
    if error is None:
        values["starts"] = 0
    else:
        values["last_error"] = error[:MAX_ERROR_LENGTH]
    await session.execute(update(OutboxJob).where(OutboxJob.id == job_id).values(**values))


async def park(session: AsyncSession, job_id: str, reason: str) -> None:
    logger.error("job parked", job_id=job_id, reason=reason)
    await session.execute(
        update(OutboxJob)
        .where(OutboxJob.id == job_id)
        .values(status=PARKED, locked_until=None, last_error=reason[:MAX_ERROR_LENGTH])
    )


async def count_by_status(session: AsyncSession) -> dict[str, int]:
    """Jobs waiting (pending) and parked, for the queue-depth gauges."""
    rows = await session.execute(select(OutboxJob.status, func.count()).group_by(OutboxJob.status))
    counts = {PENDING: 0, PARKED: 0}
    counts.update({status: int(count) for status, count in rows.all()})
    return counts
