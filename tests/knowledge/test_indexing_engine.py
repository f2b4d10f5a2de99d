"""Indexing through the real job path: upload → outbox → Dramatiq (StubBroker) worker →
extraction child process → chunks, on a committed SQLite file and PostgreSQL database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.events.models import Event
from app.knowledge.service import DOCUMENT_UPDATED
from tests.conftest import fresh_database
from tests.knowledge.conftest import BASE, stored_files
from tests.knowledge.documents import encrypted_pdf, make_pdf
from tests.webhooks.test_delivery_engine import Engine, running_engine


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("kb"), "sb_kb") as url:
        yield url


async def _document(engine: Engine, headers: dict[str, str], document_id: str) -> Any:
    response = await engine.client.get(f"{BASE}/{document_id}", headers=headers)
    return response.json() if response.status_code == 200 else None


async def _until(check: Any, seconds: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_upload_is_indexed_by_the_worker_and_delete_collects_the_object(
    committed_url: str, tmp_path: Path
) -> None:
    async with running_engine(committed_url, tmp_path) as engine:
        tenant = await engine.tenants.organization()
        pdf = make_pdf(["The warranty covers batteries for two years.", "Returns by mail."])
        response = await engine.client.post(
            f"{BASE}/upload", files={"file": ("warranty.pdf", pdf)}, headers=tenant.headers
        )
        assert response.status_code == 201, response.text
        document_id = response.json()["id"]
        locked = await engine.client.post(
            f"{BASE}/upload",
            files={"file": ("locked.pdf", encrypted_pdf())},
            headers=tenant.headers,
        )

        async def ready() -> Any:
            found = await _document(engine, tenant.headers, document_id)
            return found if found["index_status"] in ("ready", "failed") else None

        document = await _until(ready)
        assert document["index_status"] == "ready", document
        assert document["chunk_count"] == 1

        async def failed() -> Any:
            found = await _document(engine, tenant.headers, locked.json()["id"])
            return found if found["index_status"] == "failed" else None

        assert (await _until(failed))["index_error"] == "The PDF is encrypted with a password"

        search = await engine.client.post(
            f"{BASE}/search", json={"query": "battery warranty"}, headers=tenant.headers
        )
        [hit] = search.json()["results"]
        assert (hit["document_id"], hit["page"]) == (document_id, 1)

        async with engine.sessionmaker() as session:
            statuses = [
                event.data["index_status"]
                for event in (
                    await session.scalars(
                        select(Event)
                        .where(Event.type == DOCUMENT_UPDATED)
                        .order_by(Event.created_at)
                    )
                ).all()
                if event.data["id"] == document_id
            ]
        assert statuses == ["indexing", "ready"]

        assert len(stored_files(engine.settings)) == 2
        deleted = await engine.client.delete(f"{BASE}/{document_id}", headers=tenant.headers)
        assert deleted.status_code == 204

        async def collected() -> bool:
            return len(stored_files(engine.settings)) == 1

        await _until(collected)
