"""The knowledge base's jobs: index a document generation; collect an unreferenced object."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.jobs import JobContext, Task
from app.knowledge import service
from app.knowledge.runtime import knowledge_runtime


async def index_document(job: JobContext) -> datetime | None:
    organization_id, document_id, generation = job.args
    resources = job.runtime.resources

    async def settle(session: AsyncSession) -> None:
        await job.settle(session, None)

    await service.index_document(
        resources,
        knowledge_runtime(resources.settings),
        organization_id,
        document_id,
        int(generation),
        settle,
    )
    return None


async def collect_object(job: JobContext) -> datetime | None:
    organization_id, key = job.args
    resources = job.runtime.resources
    await service.collect_object(
        resources, knowledge_runtime(resources.settings), organization_id, key
    )
    return None


# Extraction runs in a child process the job waits for: it holds a worker thread, not the loop.
TASKS = (
    Task(service.INDEX_ACTOR, service.KNOWLEDGE_QUEUE, index_document),
    Task(service.COLLECT_ACTOR, service.KNOWLEDGE_QUEUE, collect_object),
)
