"""Indexing through the real job path: upload → outbox → Dramatiq (StubBroker) worker →
extraction child process → chunks, on a committed SQLite file and PostgreSQL database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.events.models import Event
from app.knowledge import fairness, service
from app.knowledge.service import DOCUMENT_UPDATED
from tests.conftest import fresh_database
from tests.knowledge.conftest import BASE, stored_files
from tests.knowledge.documents import encrypted_pdf, make_pdf
from tests.webhooks.receiver import running_receiver
from tests.webhooks.test_delivery_engine import Engine, running_engine, wait_for


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


SLOW_MARK = b"SLOW"


class SlowExtractions:
    """Stands in for documents whose extraction takes its whole time limit (the issue's 390 KB
    PDF of 1,990 pages sharing one content stream: 31 s of CPU): a TXT starting with SLOW_MARK
    is extracted only once `release` is set. Counts how many of them run at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.running = 0
        self.most_at_once = 0
        self.started = 0
        self._lock = threading.Lock()
        extract = service.extract_document

        async def slow_or_not(path: Path, document_type: str, limits: Any) -> Any:
            if (await asyncio.to_thread(path.read_bytes)).startswith(SLOW_MARK):
                with self._lock:
                    self.running += 1
                    self.started += 1
                    self.most_at_once = max(self.most_at_once, self.running)
                try:
                    # Waiting, as the old job waited on its child (the event is another loop's).
                    await asyncio.to_thread(self.release.wait)
                finally:
                    with self._lock:
                        self.running -= 1
            return await extract(path, document_type, limits)

        monkeypatch.setattr(service, "extract_document", slow_or_not)


async def test_one_organizations_slow_documents_never_stall_another_organizations_jobs(
    committed_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's reproduction, scaled to a worker of 2 threads: org A uploads 6 documents
    whose extraction takes its whole limit; org B's small TXT must still be indexed, and its
    webhook delivered, while every one of org A's extractions is still running. Org A holds
    one extraction slot at a time; its other documents wait `pending`, then all get indexed."""
    monkeypatch.setattr(fairness, "DEFER_SECONDS", (0.05, 0.1))
    slow = SlowExtractions(monkeypatch)
    async with running_engine(committed_url, tmp_path, worker_threads=2) as engine:
        org_a = await engine.tenants.organization("Org A")
        org_b = await engine.tenants.organization("Org B")
        try:
            uploads = [
                await engine.client.post(
                    f"{BASE}/upload",
                    files={"file": (f"slow-{index}.txt", SLOW_MARK + b" report %d" % index)},
                    headers=org_a.headers,
                )
                for index in range(6)
            ]
            assert all(response.status_code == 201 for response in uploads)

            async def extracting() -> bool:
                return slow.running >= 1

            await _until(extracting)
            with running_receiver() as receiver:
                await engine.subscribe(org_b, receiver.url, ["lead.created"])
                small = await engine.client.post(
                    f"{BASE}/upload",
                    files={"file": ("note.txt", b"Opening hours: 9 to 5.")},
                    headers=org_b.headers,
                )
                await engine.create_contact(org_b)

                async def b_ready() -> Any:
                    found = await _document(engine, org_b.headers, small.json()["id"])
                    return found if found["index_status"] == "ready" else None

                await _until(b_ready, seconds=15)
                await wait_for(receiver, 1, seconds=15)
            assert not slow.release.is_set()  # all of it while org A's extraction still ran
            assert slow.most_at_once == 1  # org A never held more than its share
            statuses = [
                (await _document(engine, org_a.headers, response.json()["id"]))["index_status"]
                for response in uploads
            ]
            assert statuses.count("indexing") == 1
            assert statuses.count("pending") == 5
        finally:
            slow.release.set()

        async def a_ready() -> bool:
            documents = [
                await _document(engine, org_a.headers, response.json()["id"])
                for response in uploads
            ]
            return all(document["index_status"] == "ready" for document in documents)

        await _until(a_ready)
        assert slow.started == 6
