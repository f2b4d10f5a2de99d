"""The contact imports domain's job: read the stored CSV in batches (app/contact_imports/runner.py)
for a slice of the lease, then continue as a new run until the file ends or is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import structlog

from app.contact_imports import service
from app.contact_imports.models import ContactImport, ImportStatus
from app.contact_imports.parsing import FileRefused
from app.contact_imports.runner import Batch, FileReader, read_batch, write_batch
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


async def _write(resources: Resources, import_id: str, batch: Batch, offset: int) -> bool:
    """One batch committed with its progress; False when another run committed it first."""
    async with resources.session(writes=True) as session:
        job = await session.get(ContactImport, import_id)
        assert job is not None
        if await write_batch(session, job, batch, offset) is None:
            await session.rollback()
            return False
        await session.commit()
        return True


async def run_import(resources: Resources, import_id: str, seconds: float) -> datetime | None:
    """One run: batches until `seconds` pass (then: run again now) or the file ends."""
    async with resources.session(writes=True) as session:
        job = await session.get(ContactImport, import_id, populate_existing=True)
        if job is None or job.status in (ImportStatus.COMPLETED, ImportStatus.FAILED):
            return None
        job.status = ImportStatus.PROCESSING.value
        await session.commit()
        offset, rows_read, region = job.committed_offset, job.rows_read, job.default_region
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
                try:
                    while True:
                        batch = await ahead
                        last = time.monotonic() > deadline
                        if not (batch.finished or last):
                            ahead = asyncio.ensure_future(
                                read_batch(reader, rows_read + len(batch.rows) + 1)
                            )
                        if not await _write(resources, import_id, batch, offset):
                            return None  # another run committed this batch: it carries on
                        offset, rows_read = batch.end_offset, rows_read + len(batch.rows)
                        if batch.finished:
                            await _finish(resources, import_id, ImportStatus.COMPLETED)
                            return None
                        if last:
                            return utcnow()
                finally:
                    # The file stays open until the thread reading ahead is done with it.
                    await asyncio.gather(ahead, return_exceptions=True)
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
