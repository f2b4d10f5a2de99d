"""Knowledge base fixtures: the API with objects under the test's folder, and helpers that
upload files and run the indexing jobs the uploads scheduled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.kit.outbox_models import OutboxJob
from app.knowledge import service
from app.knowledge.runtime import KnowledgeRuntime, knowledge_runtime
from app.resources import Resources
from tests.conftest import Tenant, make_settings

BASE = "/api/v1/knowledge-base"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        storage_url=f"file://{tmp_path / 'objects'}",
        knowledge_max_upload_bytes=512 * 1024,
        knowledge_max_zip_bytes=16 * 1024 * 1024,
        knowledge_chunk_tokens=40,
        knowledge_chunk_overlap=8,
    )


@pytest.fixture
def runtime(settings: Settings) -> KnowledgeRuntime:
    return knowledge_runtime(settings)


def stored_files(settings: Settings) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://"))
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


async def upload(
    client: httpx.AsyncClient,
    tenant: Tenant,
    name: str,
    data: bytes,
    content_type: str = "application/octet-stream",
) -> httpx.Response:
    return await client.post(
        f"{BASE}/upload", files={"file": (name, data, content_type)}, headers=tenant.headers
    )


async def uploaded(client: httpx.AsyncClient, tenant: Tenant, name: str, data: bytes) -> Any:
    response = await upload(client, tenant, name, data)
    assert response.status_code == 201, response.text
    return response.json()


async def run_jobs(resources: Resources, actor: str) -> int:
    """Run every scheduled job of `actor` in process (what the worker's actor does), each
    job settled in the body's own transaction like JobContext.settle."""
    runtime = knowledge_runtime(resources.settings)
    async with resources.session(writes=False) as session:
        jobs = (
            await session.execute(
                select(OutboxJob.id, OutboxJob.args).where(OutboxJob.actor == actor)
            )
        ).all()
        await session.commit()
    for job_id, args in jobs:

        async def settle(session: AsyncSession, job_id: str = job_id) -> None:
            await session.execute(delete(OutboxJob).where(OutboxJob.id == job_id))

        if actor == service.INDEX_ACTOR:
            organization_id, document_id, generation = args
            await service.index_document(
                resources, runtime, organization_id, document_id, generation, settle
            )
        else:
            organization_id, key = args
            await service.collect_object(resources, runtime, organization_id, key)
            async with resources.session(writes=True) as session:
                await settle(session)
                await session.commit()
    return len(jobs)


async def index_all(resources: Resources) -> int:
    return await run_jobs(resources, service.INDEX_ACTOR)
