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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import dramatiq
import structlog
from sqlalchemy import CTE, Table, bindparam, delete, event, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from app.db.prepared import PreparedRead
from app.db.runner import StatementRunner
from app.kit.clock import utcnow
from app.kit.outbox_models import OutboxJob

logger = structlog.get_logger("switchboard.outbox")

DEFAULT_QUEUE = "default"
PENDING, PARKED = "pending", "parked"
_TO_RELAY = "switchboard.outbox.to_relay"
MAX_ERROR_LENGTH = 2000
SWEEP_BATCH = 500
UNKNOWN_ACTOR_GRACE = timedelta(hours=1)


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


def relay(refs: Sequence[JobRef]) -> None:
    """Hand committed jobs to this process's dispatcher (if any; the sweep covers the rest)."""
    if refs and _dispatcher is not None:
        _dispatcher(refs)


@event.listens_for(Session, "after_commit")
def _relay_after_commit(session: Session) -> None:
    relay(session.info.pop(_TO_RELAY, ()))


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    session.info.pop(_TO_RELAY, None)


async def sweep(
    session: AsyncSession, redispatch_after: float, known_actors: Collection[str]
) -> list[JobRef]:
    """Due jobs that nobody holds and the broker has not had recently, marked as sent now.

    Only jobs of `known_actors` (those the sweeping worker declares) are sent: a message for
    an actor no worker knows would be dropped by the consumer and re-sent by every sweep. A
    job whose actor stays unknown for `UNKNOWN_ACTOR_GRACE` is parked (a newer worker that
    knows it, mid-way through a rolling deploy, sends it before then).

    The caller commits, then dispatches the returned jobs. On PostgreSQL concurrent sweepers
    skip each other's rows (FOR UPDATE SKIP LOCKED).
    """
    now = utcnow()
    stale = now - timedelta(seconds=redispatch_after)
    statement = (
        select(OutboxJob.id, OutboxJob.actor, OutboxJob.queue)
        .where(
            OutboxJob.status == PENDING,
            OutboxJob.actor.in_(list(known_actors)),
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
    orphans = await session.execute(
        update(OutboxJob)
        .where(
            OutboxJob.status == PENDING,
            OutboxJob.actor.not_in(list(known_actors)),
            OutboxJob.created_at <= now - UNKNOWN_ACTOR_GRACE,
        )
        .values(status=PARKED, last_error="no worker declares this actor")
        .returning(OutboxJob.id, OutboxJob.actor)
    )
    for job_id, actor in orphans.all():
        logger.error("job parked: unknown actor", job_id=job_id, actor=actor)
    return refs


# --- worker side -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: str
    actor: str
    args: list[Any]
    starts: int


_JOBS = cast(Table, OutboxJob.__table__)
# The worker's statements, built once and run by a StatementRunner (app/db/runner.py): on the
# driver on PostgreSQL, through the session elsewhere.
_CLAIM = PreparedRead(
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
_FINISH = PreparedRead(delete(_JOBS).where(_JOBS.c.id == bindparam("job_id")))


def finish_with(*writes: CTE) -> PreparedRead:
    """Finishing a job together with data-modifying CTEs (PostgreSQL): one atomic statement."""
    return PreparedRead(delete(_JOBS).where(_JOBS.c.id == bindparam("job_id")).add_cte(*writes))


# A clean reschedule resets `starts`; one after an error keeps counting towards parking.
_RESCHEDULE = PreparedRead(
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("job_id"))
    .values(available_at=bindparam("at"), dispatched_at=None, locked_until=None, starts=0)
)
_RESCHEDULE_AFTER_ERROR = PreparedRead(
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("job_id"))
    .values(
        available_at=bindparam("at"),
        dispatched_at=None,
        locked_until=None,
        last_error=bindparam("error"),
    )
)
_PARK = PreparedRead(
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("job_id"))
    .values(status=PARKED, locked_until=None, last_error=bindparam("reason"))
)


_INSERT_DUE_JOB = PreparedRead(
    insert(_JOBS).values(
        {name: bindparam(name) for name in ("id", "actor", "queue", "args", "created_at")}
        | {
            "status": PENDING,
            "starts": 0,
            "available_at": bindparam("created_at"),
            "dispatched_at": bindparam("created_at"),
        }
    )
)


async def schedule_many(
    runner: StatementRunner, actor: str, args: Sequence[list[Any]], *, queue: str
) -> list[JobRef]:
    """`schedule` for statement runners: one due job per argument list, written in the
    runner's transaction. The caller passes the result to `relay` once that commits."""
    now = utcnow()
    refs = [JobRef(str(uuid.uuid4()), actor, queue) for _ in args]
    await runner.execute_many(
        _INSERT_DUE_JOB,
        [
            {"id": ref.id, "actor": actor, "queue": queue, "args": each, "created_at": now}
            for ref, each in zip(refs, args, strict=True)
        ],
    )
    return refs


async def claim(
    runner: StatementRunner, job_id: str, *, lease_seconds: float, max_starts: int
) -> ClaimedJob | None:
    """Take the job for one run, or None: finished, parked, not due, or held by another run.

    A job that has already started `max_starts` times without finishing is parked here.
    """
    now = utcnow()
    rows = await runner.fetch(
        _CLAIM,
        {"job_id": job_id, "now": now, "lease_end": now + timedelta(seconds=lease_seconds)},
    )
    if not rows:
        return None
    actor, args, starts = rows[0]
    if starts > max_starts:
        await park(runner, job_id, f"started {starts - 1} times without finishing")
        return None
    return ClaimedJob(job_id, actor, list(args), starts)


async def finish(runner: StatementRunner, job_id: str) -> None:
    await runner.execute(_FINISH, {"job_id": job_id})


async def reschedule(
    runner: StatementRunner, job_id: str, at: datetime, error: str | None = None
) -> None:
    """Run the job again at `at` (the sweep sends it then). A clean reschedule resets `starts`;
    one after an error keeps counting towards parking."""
    if error is None:
        await runner.execute(_RESCHEDULE, {"job_id": job_id, "at": at})
    else:
        params = {"job_id": job_id, "at": at, "error": error[:MAX_ERROR_LENGTH]}
        await runner.execute(_RESCHEDULE_AFTER_ERROR, params)


async def park(runner: StatementRunner, job_id: str, reason: str) -> None:
    logger.error("job parked", job_id=job_id, reason=reason)
    await runner.execute(_PARK, {"job_id": job_id, "reason": reason[:MAX_ERROR_LENGTH]})


async def count_by_status(session: AsyncSession) -> dict[str, int]:
    """Jobs waiting (pending) and parked, for the queue-depth gauges."""
    rows = await session.execute(select(OutboxJob.status, func.count()).group_by(OutboxJob.status))
    counts = {PENDING: 0, PARKED: 0}
    counts.update({status: int(count) for status, count in rows.all()})
    return counts
