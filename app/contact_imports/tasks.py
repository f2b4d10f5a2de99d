"""The contact imports domain's job: read the stored CSV in batches (app/contact_imports/runner.py)
for a slice of the lease, then continue as a new run until the file ends or is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Collection
from datetime import datetime

import structlog

from app.contact_imports import service
from app.contact_imports.models import ContactImport, ImportStatus, OnDuplicate
from app.contact_imports.parsing import FileRefused
from app.contact_imports.runner import Batch, FileReader, numbers, read_batch, write_batch
from app.core.clock import utcnow
from app.jobs import JobContext, Task
from app.kit import outbox
from app.knowledge.storage import ObjectMissing
from app.resources import Resources

logger = structlog.get_logger("switchboard.contact_imports")
RUN_SECONDS = 20.0


async def _finish(
    resources: Resources, import_id: str, status: ImportStatus, error: str | None = None
) -> None:
    async with resources.session(writes=True) as session:
        job = await session.get(ContactImport, import_id, populate_existing=True)
        if job is not None and job.status == ImportStatus.PROCESSING.value:
            job.status = status.value
            job.error = error
            job.finished_at = utcnow()
        await session.commit()


async def _write(
    resources: Resources,
    import_id: str,
    batch: Batch,
    offset: int,
    earlier: Collection[str] = (),
    turn: Awaitable[bool] | None = None,
    committed: asyncio.Future[bool] | None = None,
) -> bool:
    """One batch committed with its progress; False when another run committed it first (or
    the batch before, written alongside, did not commit). `committed` is told which."""
    done = False
    try:
        async with resources.session(writes=True) as session:
            job = await session.get(ContactImport, import_id)
            assert job is not None
            if await write_batch(session, job, batch, offset, earlier=earlier, turn=turn) is None:
                await session.rollback()
                return False
            await session.commit()
            done = True
            return True
    finally:
        if committed is not None:
            committed.set_result(done)


async def run_import(resources: Resources, import_id: str, seconds: float) -> datetime | None:
    """One run: batches until `seconds` pass (then: run again now) or the file ends."""
    async with resources.session(writes=True) as session:
        job = await session.get(ContactImport, import_id, populate_existing=True)
        if job is None or job.status in (ImportStatus.COMPLETED, ImportStatus.FAILED):
            return None
        job.status = ImportStatus.PROCESSING.value
        await session.commit()
        offset, rows_read, region = job.committed_offset, job.rows_read, job.default_region
        mode = job.on_duplicate
        key = job.object_key
    deadline = time.monotonic() + seconds
    store = service.import_store(resources.settings)
    try:
        async with store.local_copy(key) as path:
            with open(path, "rb") as handle:  # noqa: ASYNC230 (read in batches off the loop)
                reader = FileReader(handle, offset, region)
                # The next batch is parsed (in a thread) while this one is written: parsing
                # and the database's work overlap. A batch read ahead is only ever written
                # in its turn; a file refused past this batch is reported after it commits.
                ahead = asyncio.ensure_future(read_batch(reader, rows_read + 1))
                # PostgreSQL: a batch's write starts while the one before is still being
                # written, on another connection of the process's pool, so the server works
                # on two cores; it commits after that one (write_batch). SQLite has one
                # writer at a time; sessions sharing one connection (tests) cannot overlap.
                overlap = resources.dialect_name == "postgresql" and resources.engine is not None
                writing: asyncio.Task[bool] | None = None
                before: frozenset[str] = frozenset()
                committed: asyncio.Future[bool] | None = None
                try:
                    while True:
                        batch = await ahead
                        last = time.monotonic() > deadline
                        if not (batch.finished or last):
                            ahead = asyncio.ensure_future(
                                read_batch(reader, rows_read + len(batch.rows) + 1)
                            )
                        mine = numbers(batch)
                        # `update` rows of a number the batch in flight has wait for it: they
                        # change what it writes.
                        if (
                            writing is not None
                            and mode == OnDuplicate.UPDATE
                            and not before.isdisjoint(mine)
                        ):
                            if not await writing:
                                return None
                            writing = None
                        after, turn = writing, committed
                        committed = asyncio.get_running_loop().create_future()
                        earlier = before if after is not None and mode == OnDuplicate.SKIP else ()
                        writing = asyncio.ensure_future(
                            _write(
                                resources,
                                import_id,
                                batch,
                                offset,
                                earlier,
                                turn if after is not None else None,
                                committed,
                            )
                        )
                        before = mine
                        if after is not None and not await after:
                            return None  # another run committed it: it carries on
                        offset, rows_read = batch.end_offset, rows_read + len(batch.rows)
                        if not overlap or batch.finished or last:
                            done, writing = writing, None
                            if not await done:
                                return None
                        if batch.finished:
                            await _finish(resources, import_id, ImportStatus.COMPLETED)
                            return None
                        if last:
                            return utcnow()
                finally:
                    # The file stays open until the thread reading ahead is done with it,
                    # and a write in flight ends (commits or rolls back) before the run does.
                    await asyncio.gather(
                        ahead, *([writing] if writing else []), return_exceptions=True
                    )
    except FileRefused as exc:
        await _finish(resources, import_id, ImportStatus.FAILED, str(exc))
    except ObjectMissing:
        await _finish(resources, import_id, ImportStatus.FAILED, "The uploaded file is gone")
    return None


async def run_job(job: JobContext) -> datetime | None:
    (import_id,) = job.args
    resources = job.runtime.resources
    seconds = min(RUN_SECONDS, resources.settings.job_lease_seconds / 3)
    again = await run_import(resources, str(import_id), seconds)
    if again is None:
        return None
    # Carry on at once on this process, as a new claim of the same job.
    async with job.runtime.statements(transaction=False) as runner:
        await job.settle(runner, again)
    job.runtime.hand_over([outbox.JobRef(job.job_id, service.RUN_ACTOR, service.RUN_QUEUE)])
    return None


TASKS = (Task(service.RUN_ACTOR, service.RUN_QUEUE, run_job),)
