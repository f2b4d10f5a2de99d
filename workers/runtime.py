"""What every worker process holds while it runs jobs, and the one way a job runs.

`JobRuntime` is Dramatiq middleware: as the worker boots (once the AsyncIO middleware has
started its event loop thread, before any worker thread takes a message) it opens the
database engine and the HTTP client on that loop, and starts the outbox sweep; it closes them
once the worker threads have stopped.

`run_job` wraps every job: claim the outbox row, run the job body, then finish or reschedule
the row. Bodies receive the runtime and the row's arguments, and return None when done or the
time to run again. An exception is retried with backoff from the database (never by Dramatiq's
own retries, which Redis may lose), and counts towards parking.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dramatiq
import structlog
from dramatiq.asyncio import get_event_loop_thread
from dramatiq.middleware import Middleware
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.db.runner import SessionRunner, StatementPool, StatementRunner
from app.kit import outbox
from app.kit.clock import utcnow
from app.resources import Resources
from app.webhooks.sender import WebhookSender
from workers import metrics

logger = structlog.get_logger("switchboard.worker")

JobBody = Callable[["JobContext"], Awaitable[datetime | None]]
MAX_ERROR_BACKOFF_SECONDS = 300.0


class JobRuntime(Middleware):
    """Per-process resources of the job engine, and the outbox sweep."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._resources: Resources | None = None
        self._sender: WebhookSender | None = None
        self._statement_pool: StatementPool | None = None
        # Jobs started on this process's loop by `run_locally`, awaited before closing.
        self._local_jobs: set[asyncio.Task[None]] = set()
        # Actors this process can run; the sweep sends nothing else (see outbox.sweep).
        self.known_actors: frozenset[str] = frozenset()
        self._sweeper: asyncio.Task[None] | None = None

    # Dramatiq hooks (called from the worker's main thread). "before" hooks run in middleware
    # order, so the AsyncIO middleware's loop exists; the worker threads do not yet.
    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.known_actors = frozenset(broker.get_declared_actors())
        _loop_thread().run_coroutine(self._open())

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # After the worker threads finished their messages: a delivery in flight keeps its
        # connection and database pool. "after" hooks run in reverse middleware order, so the
        # AsyncIO middleware's loop is still running here.
        _loop_thread().run_coroutine(self._close())

    @property
    def resources(self) -> Resources:
        if self._resources is None:
            raise RuntimeError("the job runtime is not open (is the worker booted?)")
        return self._resources

    @property
    def sender(self) -> WebhookSender:
        if self._sender is None:
            raise RuntimeError("the job runtime is not open (is the worker booted?)")
        return self._sender

    @asynccontextmanager
    async def statements(self, *, transaction: bool = True) -> AsyncIterator[StatementRunner]:
        """A runner for a few hot statements (app/db/runner.py): a driver connection on
        PostgreSQL, whose statements commit together when `transaction` is set and one by one
        otherwise; elsewhere a session, always one transaction committed at the end."""
        if self._statement_pool is not None:
            async with self._statement_pool.runner(transaction=transaction) as runner:
                yield runner
            return
        async with self.resources.session(writes=True) as session:
            yield SessionRunner(session)
            await session.commit()

    async def _open(self) -> None:
        self._resources = Resources.from_settings(self.settings, serves_api=False)
        engine = self._resources.engine
        if engine is not None and engine.dialect.driver == "asyncpg":
            # Every worker thread may hold one connection, plus the sweep, plus local jobs:
            # those hold one only for their statements (never across an HTTP call), so a
            # fraction of them keeps the pool from becoming the queue.
            size = self.settings.worker_threads + 1 + min(self.settings.worker_local_jobs, 16)
            pool = StatementPool(self.settings.database_url, engine.dialect, size)
            await pool.open()
            self._statement_pool = pool
        self._sender = WebhookSender(
            allow_private=self.settings.allow_private_webhook_urls,
            timeout_seconds=self.settings.webhook_timeout_seconds,
        )
        self._sweeper = asyncio.create_task(self._sweep_forever())

    def local_room(self) -> int:
        """How many more jobs `run_locally` may start now."""
        return max(0, self.settings.worker_local_jobs - len(self._local_jobs))

    def run_locally(self, job: Awaitable[None]) -> None:
        """Run a job this process just committed on its own loop, skipping the broker round trip.

        The job is still an outbox row claimed under a lease: if this process dies, the sweep
        sends it through the broker like any other.
        """
        task = asyncio.ensure_future(job)
        self._local_jobs.add(task)
        task.add_done_callback(self._local_jobs.discard)

    async def _close(self) -> None:
        if self._local_jobs:
            # Let deliveries in flight finish (each is bounded by the webhook timeout).
            _, pending = await asyncio.wait(
                set(self._local_jobs), timeout=self.settings.webhook_timeout_seconds + 5
            )
            for task in pending:
                task.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        if self._sender is not None:
            await self._sender.aclose()
            self._sender = None
        if self._statement_pool is not None:
            await self._statement_pool.close()
            self._statement_pool = None
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
                session, self.settings.outbox_redispatch_seconds, self.known_actors
            )
            await session.commit()
            counts = await outbox.count_by_status(session)
        metrics.record_outbox(counts)
        if refs:
            outbox.broker_dispatcher(refs)
        return len(refs)


@dataclass
class JobContext:
    """One run of one job, as its body sees it."""

    runtime: JobRuntime
    job_id: str
    args: list[Any]
    settled: bool = False

    async def settle(self, runner: StatementRunner | AsyncSession, again: datetime | None) -> None:
        """Finish (or reschedule) the job inside the body's own last transaction: one commit
        less per run. The body must then commit that transaction."""
        if isinstance(runner, AsyncSession):
            runner = SessionRunner(runner)
        if again is None:
            await outbox.finish(runner, self.job_id)
        else:
            await outbox.reschedule(runner, self.job_id, again)
        self.settled = True


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
    context = JobContext(runtime, job_id, claimed.args)
    try:
        again = await body(context)
    except Exception as exc:
        logger.exception("job failed", job_id=job_id, actor=claimed.actor)
        metrics.JOB_FAILURES.labels(claimed.actor).inc()
        async with runtime.statements(transaction=False) as runner:
            retry_at = utcnow() + _error_backoff(claimed.starts, settings)
            await outbox.reschedule(runner, job_id, retry_at, error=f"{type(exc).__name__}: {exc}")
        return
    if not context.settled:
        async with runtime.statements(transaction=False) as runner:
            await context.settle(runner, again)
