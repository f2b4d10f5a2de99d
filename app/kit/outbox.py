"""The job outbox: jobs are rows written in the caller's transaction, then handed to Dramatiq.

`schedule()` adds a row to the session; when that session commits, the relay hands the job to
the broker at once, from the relay's thread (`BrokerRelay`: never on the event loop, with
timeouts). The row stays until a worker finishes the job, so nothing is lost when the process
dies between commit and enqueue, when Redis is unreachable, or when it restarts empty: `sweep()`
re-sends every due job not finished within `outbox_redispatch_seconds` whose message the broker
no longer holds.

A worker claims a job before running it (`claim`): the claim counts the run and locks the row
for the lease, so a duplicate message finds it taken, and a job that keeps killing its worker or
raising is parked after `job_max_starts` runs instead of crash-looping forever. Each claim
carries a fresh token, and every statement that settles the job presents it: a run that outlived
its lease (a frozen process) finds its writes refused once another run has claimed the job.

Messages carry only the job id; the row is the truth. Jobs are named (`actor`), never imported:
`app/` knows no actor code.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import dramatiq
import structlog
from sqlalchemy import (
    CTE,
    Table,
    and_,
    bindparam,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.db.prepared import PreparedStatement, constant
from app.db.runner import StatementRunner
from app.kit.outbox_models import OutboxJob

logger = structlog.get_logger("switchboard.outbox")

DEFAULT_QUEUE = "default"
PENDING, PARKED = "pending", "parked"
_TO_RELAY = "switchboard.outbox.to_relay"
# Session.info key: the jobs of this transaction that later ones join (`schedule_joined`),
# up to this many arguments each (a transaction emitting thousands still gets bounded runs).
_JOINED = "switchboard.outbox.joined"
MAX_JOINED_ARGS = 100
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
    job_id: str | None = None,
) -> str:
    """Record a job in the session's transaction; relayed to the broker after commit.

    `args` must be JSON values (ids and primitives). A job due later (`at` in the future) is
    left to the sweep, which sends it when it falls due. A `job_id` of the caller's making
    (a name derived from what the job is about) keeps that job one of a kind: the row's key.
    """
    return _add_job(session, actor, list(args), queue, at, job_id).id


def _add_job(
    session: AsyncSession,
    actor: str,
    args: list[Any],
    queue: str,
    at: datetime | None,
    job_id: str | None,
) -> OutboxJob:
    now = utcnow()
    due = at is None or at <= now
    job = OutboxJob(
        id=job_id or str(uuid.uuid4()),
        actor=actor,
        queue=queue,
        args=args,
        status=PENDING,
        starts=0,
        available_at=at or now,
        dispatched_at=now if due else None,
        created_at=now,
    )
    session.add(job)
    if due:
        session.info.setdefault(_TO_RELAY, []).append(JobRef(job.id, actor, queue))
    return job


def schedule_joined(
    session: AsyncSession, actor: str, key: str, *args: Any, queue: str = DEFAULT_QUEUE
) -> str:
    """`schedule` a job due now, or join the one this transaction already scheduled for the
    same actor and `key`: its arguments grow by `args`. A transaction that emits several
    events of one organization (an inbound message: the ticket, the lead, the conversation,
    the message) gives the worker one job to run, not one each."""
    joined: dict[tuple[str, str], OutboxJob] = session.info.setdefault(_JOINED, {})
    job = joined.get((actor, key))
    if job is None or len(job.args) + len(args) > MAX_JOINED_ARGS:
        job = joined[(actor, key)] = _add_job(session, actor, list(args), queue, None, None)
        return job.id
    job.args = [*job.args, *args]  # a new list: the ORM sees the change
    return job.id


# --- relay -------------------------------------------------------------------------------


Dispatcher = Callable[[Sequence[JobRef]], None]

_dispatcher: Dispatcher | None = None


def set_dispatcher(dispatcher: Dispatcher | None) -> None:
    """Who receives committed jobs in this process (None: nobody, the sweep sends them).

    The dispatcher is called inside `AsyncSession.commit`, on the event loop: it must return
    at once (`BrokerRelay.submit` hands the jobs to a thread)."""
    global _dispatcher
    _dispatcher = dispatcher


def get_dispatcher() -> Dispatcher | None:
    return _dispatcher


def relay(refs: Sequence[JobRef]) -> None:
    """Hand committed jobs to this process's dispatcher (if any; the sweep covers the rest)."""
    if refs and _dispatcher is not None:
        _dispatcher(refs)


# Redis sorted set: job id -> when it was last handed to the broker, removed when a worker
# takes the message (`BrokerRelay.taken`). The sweep reads it to leave alone the jobs that
# are merely waiting in the broker; a flushed Redis loses it along with the messages.
HELD_KEY = "switchboard:outbox.held"
# An entry older than this is not trusted (a message that died unseen, e.g. in a dead-letter
# queue): the sweep sends the job again.
HELD_TRUST_SECONDS = 3600.0
RELAY_CAPACITY = 10_000
# After a failed send the relay drops what it is given for this long (the sweep sends it
# later) instead of waiting out one timeout per job.
RELAY_PAUSE_SECONDS = 1.0


class BrokerRelay:
    """Hands committed jobs to the broker without ever blocking an event loop.

    `submit` (the after-commit dispatcher, on the API's loop) only queues the jobs; one daemon
    thread sends them. The Redis client has socket timeouts, the queue is bounded, and after a
    failure the relay drops jobs for a moment rather than queueing behind a dead Redis: a job
    it did not send stays in the outbox, where the sweep finds it. A Redis outage therefore
    delays jobs by the sweep's redispatch time and never stalls or fails a write.
    """

    def __init__(self, broker: dramatiq.Broker, redis_client: Any | None) -> None:
        self._broker = broker
        self._redis = redis_client  # None: an in-process broker, held jobs tracked here
        self._held: dict[str, float] = {}
        self._held_lock = threading.Lock()
        self._queue: queue.Queue[Sequence[JobRef] | None] = queue.Queue(RELAY_CAPACITY)
        self._paused_until = 0.0
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def submit(self, refs: Sequence[JobRef]) -> None:
        """Queue jobs for the relay thread; never blocks (dropped jobs wait for the sweep)."""
        if time.monotonic() < self._paused_until:
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait(refs)
        except queue.Full:
            logger.warning("relay queue full; the sweep will send", jobs=len(refs))

    def send(self, refs: Sequence[JobRef]) -> int:
        """Enqueue jobs on the calling thread (never an event loop's); stops at the first
        failure. Returns how many were sent."""
        sent = 0
        for ref in refs:
            try:
                self._mark_held(ref.id)
                self._broker.enqueue(
                    dramatiq.Message(ref.queue, ref.actor, (ref.id,), {}, {}),
                )
            except Exception:
                self._paused_until = time.monotonic() + RELAY_PAUSE_SECONDS
                logger.warning(
                    "enqueue failed; the sweep will re-send",
                    job_id=ref.id,
                    unsent=len(refs) - sent,
                    exc_info=True,
                )
                self._forget_held(ref.id)
                return sent
            sent += 1
        return sent

    def taken(self, job_id: str) -> None:
        """A worker took the job's message: the broker no longer holds it."""
        self._forget_held(job_id)

    def held(self, refs: Sequence[JobRef], due_since: dict[str, datetime]) -> set[str]:
        """Ids of `refs` whose message the broker still holds, handed over after the job fell
        due (`due_since`) and within `HELD_TRUST_SECONDS`. Raises when Redis cannot say."""
        if not refs:
            return set()
        ids = [ref.id for ref in refs]
        if self._redis is None:
            with self._held_lock:
                scores = [self._held.get(job_id) for job_id in ids]
        else:
            scores = self._redis.zmscore(HELD_KEY, ids)
        oldest = time.time() - HELD_TRUST_SECONDS
        return {
            job_id
            for job_id, score in zip(ids, scores, strict=True)
            if score is not None and score >= oldest and score >= due_since[job_id].timestamp()
        }

    def _mark_held(self, job_id: str) -> None:
        if self._redis is None:
            with self._held_lock:
                self._held[job_id] = time.time()
        else:
            self._redis.zadd(HELD_KEY, {job_id: time.time()})

    def _forget_held(self, job_id: str) -> None:
        try:
            if self._redis is None:
                with self._held_lock:
                    self._held.pop(job_id, None)
            else:
                self._redis.zrem(HELD_KEY, job_id)
        except Exception:
            # The sweep then trusts the entry until HELD_TRUST_SECONDS at worst.
            logger.warning("could not forget a held job", job_id=job_id, exc_info=True)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._thread_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="switchboard-outbox-relay", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            refs = self._queue.get()
            if refs is None:
                return
            if time.monotonic() < self._paused_until:
                continue  # dropped: the sweep sends them
            self.send(refs)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (within `timeout`), then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)
        self._thread = None


# SQLAlchemy fires these hooks for a savepoint's release or rollback too. Jobs are relayed
# only when the whole transaction commits: relayed at a savepoint's release, a job reached a
# PostgreSQL worker before its row was committed, found nothing to claim, and waited for the
# sweep (`outbox_redispatch_seconds`). A savepoint's rollback keeps the list: a job it undid is
# relayed for nothing (its claim finds no row), one scheduled before it still must be.
@event.listens_for(Session, "after_commit")
def _relay_after_commit(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_JOINED, None)
        relay(session.info.pop(_TO_RELAY, ()))


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    # Any rollback, a savepoint's included: a job it took back can no longer be joined.
    session.info.pop(_JOINED, None)
    if not session.in_nested_transaction():
        session.info.pop(_TO_RELAY, None)


HeldCheck = Callable[[Sequence[JobRef], dict[str, datetime]], Awaitable[set[str]]]


async def sweep(
    session: AsyncSession,
    redispatch_after: float,
    known_actors: Collection[str],
    held: HeldCheck | None = None,
) -> list[JobRef]:
    """Due jobs that nobody holds and the broker has not had recently, marked as sent now.

    `held` names the jobs whose message the broker still holds (waiting behind others): they
    are not sent again, only marked, so a long queue never grows by its own re-sends. When it
    raises (Redis cannot say), nothing is sent this time.

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
        select(OutboxJob.id, OutboxJob.actor, OutboxJob.queue, OutboxJob.available_at)
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
    rows = (await session.execute(statement)).all()
    refs = [JobRef(job_id, actor, queue) for job_id, actor, queue, _ in rows]
    waiting: set[str] = set()
    if refs and held is not None:
        try:
            waiting = await held(refs, {row[0]: row[3] for row in rows})
        except Exception:
            logger.warning("cannot tell which jobs the broker holds; sending none", exc_info=True)
            refs = []
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
    return [ref for ref in refs if ref.id not in waiting]


# --- worker side -------------------------------------------------------------------------


class StaleRun(Exception):
    """A run tried to settle a job it no longer holds: its lease ran out and another run
    claimed the job. Its writes are refused (the transaction that carries them rolls back)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id}: the run no longer holds its claim")
        self.job_id = job_id


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: str
    actor: str
    args: list[Any]
    starts: int
    # The fencing token every settling statement of this run must present.
    token: str


_JOBS = cast(Table, OutboxJob.__table__)
_HELD_BY_RUN = and_(_JOBS.c.id == bindparam("job_id"), _JOBS.c.claim_token == bindparam("token"))
# The worker's statements, built once and run by a StatementRunner (app/db/runner.py): on the
# driver on PostgreSQL, through the session elsewhere.
_CLAIM = PreparedStatement(
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("job_id"),
        _JOBS.c.status == constant(PENDING),
        _JOBS.c.available_at <= bindparam("now"),
        or_(_JOBS.c.locked_until.is_(None), _JOBS.c.locked_until <= bindparam("now")),
    )
    .values(
        starts=_JOBS.c.starts + constant(1),
        locked_until=bindparam("lease_end"),
        claim_token=bindparam("token"),
    )
    .returning(_JOBS.c.actor, _JOBS.c.args, _JOBS.c.starts)
)
_FINISH = PreparedStatement(delete(_JOBS).where(_HELD_BY_RUN))


def settled_by_run() -> CTE:
    """The job's finish as a data-modifying CTE (PostgreSQL), fenced by the run's token: other
    CTEs of the statement write only `where(exists(select(<this>.c.id)))`, so a stale run's
    statement writes nothing at all."""
    return delete(_JOBS).where(_HELD_BY_RUN).returning(_JOBS.c.id).cte("settled")


def finish_with(settled: CTE, *writes: CTE) -> PreparedStatement:
    """Finishing a job together with data-modifying CTEs: one atomic statement whose single
    row counts the jobs finished (0: a stale run, nothing written)."""
    return PreparedStatement(
        select(func.count().label("finished")).select_from(settled).add_cte(*writes)
    )


# A clean reschedule resets `starts`; one after an error keeps counting towards parking.
_RESCHEDULE = PreparedStatement(
    update(_JOBS)
    .where(_HELD_BY_RUN)
    .values(
        available_at=bindparam("at"),
        dispatched_at=constant(None),
        locked_until=constant(None),
        starts=constant(0),
    )
)
_RESCHEDULE_AFTER_ERROR = PreparedStatement(
    update(_JOBS)
    .where(_HELD_BY_RUN)
    .values(
        available_at=bindparam("at"),
        dispatched_at=constant(None),
        locked_until=constant(None),
        last_error=bindparam("error"),
    )
)
_PARK = PreparedStatement(
    update(_JOBS)
    .where(_HELD_BY_RUN)
    .values(status=constant(PARKED), locked_until=constant(None), last_error=bindparam("reason"))
)


_INSERT_DUE_JOB = PreparedStatement(
    insert(_JOBS).values(
        {name: bindparam(name) for name in ("id", "actor", "queue", "args", "created_at")}
        | {
            "status": constant(PENDING),
            "starts": constant(0),
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
    token = uuid.uuid4().hex
    rows = await runner.fetch(
        _CLAIM,
        {
            "job_id": job_id,
            "now": now,
            "lease_end": now + timedelta(seconds=lease_seconds),
            "token": token,
        },
    )
    if not rows:
        return None
    actor, args, starts = rows[0]
    if starts > max_starts:
        await park(runner, job_id, token, f"started {starts - 1} times without finishing")
        return None
    return ClaimedJob(job_id, actor, list(args), starts, token)


def _settled(job_id: str, rowcount: int) -> None:
    if rowcount == 0:
        raise StaleRun(job_id)


async def finish(runner: StatementRunner, job_id: str, token: str) -> None:
    """Delete the job; raises StaleRun (so the caller's transaction rolls back) when this run
    no longer holds it."""
    _settled(job_id, await runner.execute(_FINISH, {"job_id": job_id, "token": token}))


async def reschedule(
    runner: StatementRunner, job_id: str, token: str, at: datetime, error: str | None = None
) -> None:
    """Run the job again at `at` (the sweep sends it then). A clean reschedule resets `starts`;
    one after an error keeps counting towards parking. Raises StaleRun as `finish` does."""
    params: dict[str, Any] = {"job_id": job_id, "token": token, "at": at}
    if error is None:
        rowcount = await runner.execute(_RESCHEDULE, params)
    else:
        params["error"] = error[:MAX_ERROR_LENGTH]
        rowcount = await runner.execute(_RESCHEDULE_AFTER_ERROR, params)
    _settled(job_id, rowcount)


async def park(runner: StatementRunner, job_id: str, token: str, reason: str) -> None:
    logger.error("job parked", job_id=job_id, reason=reason)
    params = {"job_id": job_id, "token": token, "reason": reason[:MAX_ERROR_LENGTH]}
    await runner.execute(_PARK, params)


async def count_by_status(session: AsyncSession) -> dict[str, int]:
    """Jobs waiting (pending) and parked, for the queue-depth gauges."""
    rows = await session.execute(select(OutboxJob.status, func.count()).group_by(OutboxJob.status))
    counts = {PENDING: 0, PARKED: 0}
    counts.update({status: int(count) for status, count in rows.all()})
    return counts
