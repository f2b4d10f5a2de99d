"""What a domain's jobs are made of: `Task` declarations and the `JobContext` a body receives.

A domain with jobs has a `tasks.py` beside its `service.py` that declares them in `TASKS`; the
worker (workers/) collects `<package>.tasks` for every package of app/domains.py and
implements `JobRuntime`. app/ never imports workers/: this module is the whole interface.

A job is an outbox row (app/kit/outbox.py) run under a claim: the body returns None when the
job is done, or the time to run it again. It settles the job itself (`JobContext.settle`)
when it wants the settlement in its own last transaction; otherwise the runtime settles it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.db.runner import SessionRunner, StatementRunner
from app.kit import outbox
from app.resources import Resources

T = TypeVar("T")
JobBody = Callable[["JobContext"], Awaitable[datetime | None]]


@dataclass(frozen=True, slots=True)
class Task:
    """One job of a domain: the actor's name (stored in outbox rows: never rename one that
    may still be pending), its queue and its body."""

    actor: str
    queue: str
    body: JobBody
    # Network-bound jobs (a webhook attempt): the worker runs them on its event loop without
    # holding one of its threads, so a slow receiver never takes a thread for the attempt.
    detached: bool = False
    # Lower runs first when a worker has several messages in hand (Dramatiq's priority).
    priority: int = 0


class JobRuntime(Protocol):
    """What every job body may use from the worker process that runs it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def resources(self) -> Resources: ...

    def statements(
        self, *, transaction: bool = True
    ) -> AbstractAsyncContextManager[StatementRunner]:
        """A runner for a few hot statements (app/db/runner.py); with `transaction` they
        commit together at the end, otherwise each on its own."""
        ...

    def shared(self, factory: Callable[[Settings], T]) -> T:
        """The process's one object made by `factory` (made on first use, on the worker's
        loop; closed with its `aclose()`, if any, when the worker stops)."""
        ...

    def hand_over(self, refs: Sequence[outbox.JobRef]) -> None:
        """Jobs the body just committed: run what fits on this process, relay the rest."""
        ...


@dataclass
class JobContext:
    """One run of one job, as its body sees it."""

    runtime: JobRuntime
    job_id: str
    args: list[Any]
    # The claim's fencing token: settling statements present it (app/kit/outbox.py).
    token: str
    settled: bool = False

    async def settle(self, runner: StatementRunner | AsyncSession, again: datetime | None) -> None:
        """Finish (or reschedule) the job inside the body's own last transaction: one commit
        less per run. The body must then commit that transaction. Raises `outbox.StaleRun`
        when the run no longer holds the job: let it propagate, so the transaction (and every
        write of the stale run in it) rolls back."""
        if isinstance(runner, AsyncSession):
            runner = SessionRunner(runner)
        if again is None:
            await outbox.finish(runner, self.job_id, self.token)
        else:
            await outbox.reschedule(runner, self.job_id, self.token, again)
        self.settled = True


def with_resources(work: Callable[..., Awaitable[datetime | None]]) -> JobBody:
    """The body of a job whose work needs only the process's resources and the job's stored
    arguments: `work(resources, *args)`, returning when to run again or None when done."""

    async def body(job: JobContext) -> datetime | None:
        return await work(job.runtime.resources, *job.args)

    body.__name__ = body.__qualname__ = work.__name__
    return body
