"""A contact import through the real job engine: the upload's job reaches a Dramatiq worker
(StubBroker on SQLite and PostgreSQL, RedisBroker on PostgreSQL) through the outbox, runs in
batches, and its progress, contacts and error report are what the file says."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from app.contact_imports import runner
from tests.engine.fixtures import backend_fixture, stack_fixture
from tests.webhooks.test_delivery_engine import Engine, eventually

IMPORTS = "/api/v1/contacts/imports"


backend = backend_fixture("imports")
engine = stack_fixture()


async def test_an_import_runs_on_the_worker(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "BATCH_ROWS", 50)  # several batches, read ahead while written
    client = engine.client
    tenant = await engine.tenants.organization()
    lines = ["name,phone_number,tags"]
    for n in range(300):
        phone = "not-a-number" if n % 50 == 7 else f"+1415555{n % 250:04d}"
        lines.append(f"P{n},{phone},t{n % 3}")
    data = ("\n".join(lines) + "\n").encode()
    response = await client.post(
        IMPORTS,
        files={"file": ("contacts.csv", data, "text/csv")},
        headers=tenant.headers,
    )
    assert response.status_code == 202, response.text
    import_id = response.json()["id"]
    done: dict[str, Any] = {}

    async def finished() -> bool:
        found = await client.get(f"{IMPORTS}/{import_id}", headers=tenant.headers)
        done.update(found.json())
        return done["status"] in ("completed", "failed")

    await eventually(finished, 30.0)
    assert done["status"] == "completed", done
    assert (done["rows_read"], done["failed_count"]) == (300, 6)
    # Rows 250-299 repeat numbers 0-49 (six of those rows are the refused ones' places).
    assert done["created_count"] == 250 - 5
    assert done["skipped_count"] == 300 - 6 - 245
    listed = await client.get("/api/v1/contacts", params={"limit": 1}, headers=tenant.headers)
    assert listed.json()["total_count"] == 245
    report = await client.get(f"{IMPORTS}/{import_id}/errors.csv", headers=tenant.headers)
    rows = list(csv.reader(io.StringIO(report.text)))
    assert [row[0] for row in rows[1:]] == [str(n + 1) for n in range(300) if n % 50 == 7]
