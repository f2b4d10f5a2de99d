"""The knowledge base's jobs: index a document generation; collect an unreferenced object."""

from __future__ import annotations

from datetime import datetime, timedelta

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.core.clock import utcnow
from app.jobs import JobContext, Task
from app.knowledge import service
from app.knowledge.fairness import ExtractionSlots
from app.knowledge.runtime import knowledge_runtime

EXTRACTIONS_DEFERRED = Counter(
    "switchboard_knowledge_extractions_deferred_total",
    "Indexing runs deferred without extracting (the process's slots, or the organization's "
    "share of them, taken)",
)


def open_extraction_slots(settings: Settings) -> ExtractionSlots:
    return ExtractionSlots(
        settings.knowledge_extraction_concurrency,
        settings.knowledge_extraction_per_organization,
    )


async def index_document(job: JobContext) -> datetime | None:
    organization_id, document_id, generation = job.args
    resources = job.runtime.resources
    slots = job.runtime.shared(open_extraction_slots)
    if not slots.take(organization_id):
        EXTRACTIONS_DEFERRED.inc()
        return utcnow() + timedelta(seconds=slots.defer_seconds())  # a clean reschedule

    async def settle(session: AsyncSession) -> None:
        await job.settle(session, None)

    try:
        await service.index_document(
            resources,
            knowledge_runtime(resources.settings),
            organization_id,
            document_id,
            int(generation),
            settle,
        )
    finally:
        slots.release(organization_id)
    return None


async def collect_object(job: JobContext) -> datetime | None:
    organization_id, key = job.args
    resources = job.runtime.resources
    await service.collect_object(
        resources, knowledge_runtime(resources.settings), organization_id, key
    )
    return None


TASKS = (
    # Detached: extraction runs in a child process the job waits for on the worker's loop, so
    # a slow document never holds a worker thread; ExtractionSlots bound the children.
    Task(service.INDEX_ACTOR, service.KNOWLEDGE_QUEUE, index_document, detached=True),
    Task(service.COLLECT_ACTOR, service.KNOWLEDGE_QUEUE, collect_object),
)
