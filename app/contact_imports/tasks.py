"""The contact imports domain's job: read the stored CSV in batches (app/contact_imports/runner.py)
for a slice of the lease, then continue as a new run until the file ends or is refused."""

from __future__ import annotations

import time
from datetime import datetime

import structlog

from app.contact_imports import service
from app.contact_imports.models import ContactImport, ImportStatus
from app.contact_imports.parsing import FileRefused
from app.contact_imports.runner import FileReader, read_batch, write_batch
from app.jobs import JobContext, Task
from app.kit import outbox
from app.kit.clock import utcnow
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
                while True:
                    batch = await read_batch(reader, rows_read + 1)
                    async with resources.session(writes=True) as session:
                        job = await session.get(ContactImport, import_id)
                        assert job is not None
                        counts = await write_batch(session, job, batch, offset)
                        if counts is None:
                            # Another run committed this batch: it carries on, this one stops.
                            await session.rollback()
                            return None
                        await session.commit()
                    offset, rows_read = batch.end_offset, rows_read + len(batch.rows)
                    if batch.finished:
                        await _finish(resources, import_id, ImportStatus.COMPLETED)
                        return None
                    if time.monotonic() > deadline:
                        return utcnow()
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
