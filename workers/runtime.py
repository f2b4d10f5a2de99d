"""What every worker process holds while it runs jobs, and the one way a job runs.

`JobRuntime` is Dramatiq middleware and implements app/jobs.py's `JobRuntime` for the
bodies of every domain's tasks: as the worker boots (once the AsyncIO middleware has started
its event loop thread, before any worker thread takes a message) it opens the database engine
on that loop and starts the outbox sweep; it closes them once the worker threads have stopped.

`run_job` wraps every job: claim the outbox row, run the job body, then finish or reschedule
the row with the claim's fencing token. Bodies return None when done or the time to run
again. An exception is retried with backoff from the database (never by Dramatiq's own
retries, which Redis may lose), and counts towards parking. Detached jobs (webhook attempts)
run on the loop without holding a worker thread, at most `worker_local_jobs` at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

import dramatiq
import structlog
from dramatiq.asyncio import get_event_loop_thread
from dramatiq.middleware import Middleware

from app.config import Settings
from app.core.clock import utcnow
from app.db.runner import DriverPool, SessionRunner, StatementRunner
from app.jobs import JobBody, JobContext, Task
from app.kit import outbox
from app.resources import Resources
from workers import metrics

logger = structlog.get_logger("switchboard.worker")
# How long a worker's shutdown waits for each thing it closes: a client whose close never
# returns must not keep the process (or the deployment's rollout) waiting forever.
CLOSE_STEP_SECONDS = 15.0

T = TypeVar("T")
MAX_ERROR_BACKOFF_SECONDS = 300.0


class JobRuntime(Middleware):
    """Per-process resources of the job engine, and the outbox sweep."""

    def __init__(
        self,
        settings: Settings,
        tasks: dict[str, Task] | None = None,
        relay: outbox.BrokerRelay | None = None,
    ) -> None:
        self._settings = settings
        self.tasks: dict[str, Task] = tasks or {}
        # Sends what the sweep finds (off the loop) and knows what the broker holds.
        self.relay = relay
        self._resources: Resources | None = None
        self._driver_pool: DriverPool | None = None
        self._shared: dict[Callable[[Settings], Any], Any] = {}
        # Jobs running on this process's loop (detached ones and a fan-out's own deliveries),
        # awaited before closing; `_room` bounds them (taken from any thread).
        self._local_jobs: set[asyncio.Task[None]] = set()
        self._room = threading.Semaphore(settings.worker_local_jobs)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Actors this process can run; the sweep sends nothing else (see outbox.sweep).
        self.known_actors: frozenset[str] = frozenset()
        self._sweeper: asyncio.Task[None] | None = None

    # Dramatiq hooks (called from the worker's main thread). "before" hooks run in middleware
    # order, so the AsyncIO middleware's loop exists; the worker threads do not yet.
    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.known_actors = frozenset(broker.get_declared_actors())
        _loop_thread().run_coroutine(self.open())

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # After the worker threads finished their messages: a delivery in flight keeps its
        # connection and database pool. "after" hooks run in reverse middleware order, so the
        # AsyncIO middleware's loop is still running here.
        _loop_thread().run_coroutine(self.close())

    @property
    def resources(self) -> Resources:
        if self._resources is None:
            raise RuntimeError("the job runtime is not open (is the worker booted?)")
        return self._resources

    @property
    def settings(self) -> Settings:
        return self._settings

    def shared(self, factory: Callable[[Settings], T]) -> T:
        found = self._shared.get(factory)
        if found is None:
            found = self._shared[factory] = factory(self._settings)
        return found

    @asynccontextmanager
    async def statements(self, *, transaction: bool = True) -> AsyncIterator[StatementRunner]:
        """A runner for a few hot statements (app/db/runner.py): a driver connection on
        PostgreSQL, whose statements commit together when `transaction` is set and one by one
        otherwise; elsewhere (or with SWITCHBOARD_PREPARED_ON_DRIVER=false) a session, always
        one transaction committed at the end."""
        if self._driver_pool is not None:
            async with self._driver_pool.runner(transaction=transaction) as runner:
                yield runner
            return
        async with self.resources.session(writes=True) as session:
            yield SessionRunner(session)
            await session.commit()

    async def open(self) -> None:
        """Open the process's resources on the running loop (the worker boot does this)."""
        self._loop = asyncio.get_running_loop()
        self._resources = Resources.from_settings(self.settings, serves_api=False)
        engine = self._resources.engine
        if (
            engine is not None
            and engine.dialect.driver == "asyncpg"
            and self.settings.prepared_on_driver
        ):
            # Every worker thread may hold one connection, plus the sweep, plus local jobs:
            # those hold one only for their statements (never across an HTTP call), so a
            # fraction of them keeps the pool from becoming the queue.
            size = self.settings.worker_threads + 1 + min(self.settings.worker_local_jobs, 16)
            # Commits return before the WAL reaches the disk (PostgreSQL stays consistent; a
            # crash may forget the last fraction of a second). Safe here because every job
            # statement is redone when lost: the job's row goes back to pending and runs again
            # (at worst a webhook is delivered twice, with the same webhook-id). Each commit
            # otherwise waited for an fsync, which capped a worker at ~200 deliveries/s.
            pool = DriverPool(
                self.settings.database_url, engine.dialect, size, synchronous_commit=False
            )
            await pool.open()
            self._driver_pool = pool
        self._sweeper = asyncio.create_task(self._sweep_forever())

    def hand_over(self, refs: Sequence[outbox.JobRef]) -> None:
        """Jobs this process just committed: run what fits on this loop, relay the rest."""
        for index, ref in enumerate(refs):
            task = self.tasks.get(ref.actor)
            if task is None or not self._room.acquire(blocking=False):
                outbox.relay(refs[index:])
                return
            self._start(ref.id, task.body)

    def taken(self, job_id: str) -> None:
        """A worker thread took the job's message (the broker no longer holds it)."""
        if self.relay is not None:
            self.relay.taken(job_id)

    def start_detached(self, job_id: str, body: JobBody) -> None:
        """From a worker thread: start the job on the loop and return, waiting only while the
        process already runs `worker_local_jobs` jobs there.

        The job is still an outbox row claimed under a lease: if this process dies, the sweep
        sends it through the broker like any other.
        """
        loop = self._loop
        if loop is None:
            raise RuntimeError("the job runtime is not open (is the worker booted?)")
        self._room.acquire()
        try:
            loop.call_soon_threadsafe(self._start, job_id, body)
        except RuntimeError:  # the loop closed under us: the sweep sends the job again
            self._room.release()
            raise

    def _start(self, job_id: str, body: JobBody) -> None:
        """On the loop, with a room slot taken: run the job, then free the slot."""
        task = asyncio.ensure_future(run_job(self, job_id, body))
        self._local_jobs.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._local_jobs.discard(finished)
            self._room.release()

        task.add_done_callback(done)

    async def close(self) -> None:
        if self._local_jobs:
            # Let deliveries in flight finish (each is bounded by the webhook timeout).
            _, pending = await asyncio.wait(
                set(self._local_jobs), timeout=self.settings.webhook_timeout_seconds + 5
            )
            for task in pending:
                task.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await _bounded(asyncio.gather(self._sweeper, return_exceptions=True), "sweep")
            self._sweeper = None
        for shared in self._shared.values():
            close = getattr(shared, "aclose", None)
            if close is not None:
                await _bounded(close(), type(shared).__name__)
        self._shared.clear()
        if self._driver_pool is not None:
            await self._driver_pool.close()
            self._driver_pool = None
        if self._resources is not None:
            await self._resources.aclose()
            self._resources = None

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("outbox sweep failed", exc_info=True)
            await asyncio.sleep(self.settings.outbox_sweep_seconds)

    async def sweep_once(self) -> int:
        """Send due jobs the broker does not hold; returns how many were sent."""
        async with self.resources.session(writes=True) as session:
            refs = await outbox.sweep(
                session,
                self.settings.outbox_redispatch_seconds,
                self.known_actors,
                held=self._held if self.relay is not None else None,
            )
            await session.commit()
            counts = await outbox.count_by_status(session)
        metrics.record_outbox(counts)
        if refs and self.relay is not None:
            # Off the loop: a slow Redis costs the sweep's thread, never the loop's other jobs.
            return await asyncio.to_thread(self.relay.send, refs)
        return 0

    async def _held(self, refs: Sequence[outbox.JobRef], due: dict[str, Any]) -> set[str]:
        assert self.relay is not None
        return await asyncio.to_thread(self.relay.held, refs, due)


def _loop_thread() -> Any:
    thread = get_event_loop_thread()
    if thread is None:
        raise RuntimeError("the AsyncIO middleware must come before JobRuntime")
    return thread


def _error_backoff(starts: int, settings: Settings) -> timedelta:
    seconds = min(MAX_ERROR_BACKOFF_SECONDS, 2.0 ** (starts - 1)) * settings.webhook_retry_scale
    return timedelta(seconds=seconds)


async def run_job(runtime: JobRuntime, job_id: str, body: JobBody) -> None:
    """Claim, run, and finish (or reschedule) one outbox job."""
    settings = runtime.settings
    # Single statements (the claim, a park, a reschedule) commit on their own.
    async with runtime.statements(transaction=False) as runner:
        claimed = await outbox.claim(
            runner,
            job_id,
            lease_seconds=settings.job_lease_seconds,
            max_starts=settings.job_max_starts,
        )
    if claimed is None:
        return
    context = JobContext(runtime, job_id, claimed.args, claimed.token)
    try:
        again = await body(context)
        if not context.settled:
            async with runtime.statements(transaction=False) as runner:
                await context.settle(runner, again)
    except outbox.StaleRun:
        # Another run claimed the job after this one's lease ran out; it settles the job.
        logger.warning("stale run refused", job_id=job_id, actor=claimed.actor)
        metrics.STALE_RUNS.labels(claimed.actor).inc()
    except Exception as exc:
        logger.exception("job failed", job_id=job_id, actor=claimed.actor)
        metrics.JOB_FAILURES.labels(claimed.actor).inc()
        retry_at = utcnow() + _error_backoff(claimed.starts, settings)
        error = f"{type(exc).__name__}: {exc}"
        try:
            async with runtime.statements(transaction=False) as runner:
                await outbox.reschedule(runner, job_id, claimed.token, retry_at, error=error)
        except outbox.StaleRun:
            logger.warning("stale run refused", job_id=job_id, actor=claimed.actor)


async def _bounded(closing: Awaitable[Any], what: str) -> None:
    try:
        await asyncio.wait_for(closing, CLOSE_STEP_SECONDS)
    except TimeoutError:
        logger.warning("worker shutdown: gave up waiting", closing=what, seconds=CLOSE_STEP_SECONDS)
