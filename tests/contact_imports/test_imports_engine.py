"""A contact import through the real job engine: the upload's job reaches a Dramatiq worker
(StubBroker on SQLite and PostgreSQL, RedisBroker on PostgreSQL) through the outbox, runs in
batches, and its progress, contacts and error report are what the file says."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from app.contact_imports import runner, tasks
from app.contact_imports.models import ContactImport
from app.contact_imports.service import import_store
from app.contact_imports.tasks import run_import
from app.core.ids import new_id
from app.kit.ratelimit import MemoryRateLimiter
from app.resources import Resources
from tests.contact_imports.rows import import_key, queued_import
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


def _overlapping_file() -> bytes:
    """24 rows in batches of 4: the first two batches' numbers are all different; later ones
    repeat numbers R0-R5 of the batch before (and R5 is a contact of the organization)."""
    lines = ["name,phone_number,tags"]
    for n in range(24):
        phone = f"+141555502{n:02d}" if n < 8 else f"+141555501{n % 6:02d}"
        lines.append(f"P{n},{phone},t{n}")
    return ("\n".join(lines) + "\n").encode()


def _check_overlapping(done: dict[str, Any], contacts: dict[str, Any], on_duplicate: str) -> None:
    assert done["status"] == "completed", done
    assert (done["rows_read"], done["created_count"], done["failed_count"]) == (24, 13, 0)
    assert len(contacts) == 14  # the 13 created and the known R5: no number twice
    names = {phone[-2:]: row["name"] for phone, row in contacts.items() if "5501" in phone}
    if on_duplicate == "skip":
        assert (done["updated_count"], done["skipped_count"]) == (0, 11)
        # The first row of each number; the known contact is left alone.
        assert names == {"00": "P12", "01": "P13", "02": "P8", "03": "P9", "04": "P10"} | {
            "05": "Known"
        }
    else:
        assert (done["updated_count"], done["skipped_count"]) == (11, 0)
        # The last row of each number, known or created by the batch before.
        assert names == {f"{i:02d}": f"P{18 + i}" for i in range(6)}
        assert contacts["+14155550100"]["tags"] == ["t18"]


async def _contacts(engine: Engine, tenant: Any) -> dict[str, Any]:
    listed = await engine.client.get(
        "/api/v1/contacts", params={"limit": 100}, headers=tenant.headers
    )
    body = listed.json()
    assert body["total_count"] == len(body["data"])
    return {row["phone_number"]: row for row in body["data"]}


@pytest.mark.parametrize("on_duplicate", ["skip", "update"])
async def test_batches_written_side_by_side_resolve_repeated_numbers_in_file_order(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, on_duplicate: str
) -> None:
    monkeypatch.setattr(runner, "BATCH_ROWS", 4)
    calls: list[tuple[int, frozenset[str], bool]] = []

    async def spied(session: Any, job: Any, batch: Any, offset: int, **kwargs: Any) -> Any:
        first = batch.rows[0].line if batch.rows else 25
        calls.append((first, frozenset(kwargs["earlier"]), kwargs["turn"] is not None))
        return await runner.write_batch(session, job, batch, offset, **kwargs)

    monkeypatch.setattr(tasks, "write_batch", spied)
    tenant = await engine.tenants.organization()
    await engine.client.post(
        "/api/v1/contacts",
        json={"phone_number": "+14155550105", "name": "Known"},
        headers=tenant.headers,
    )
    response = await engine.client.post(
        IMPORTS,
        params={"on_duplicate": on_duplicate},
        files={"file": ("contacts.csv", _overlapping_file(), "text/csv")},
        headers=tenant.headers,
    )
    assert response.status_code == 202, response.text
    done: dict[str, Any] = {}

    async def finished() -> bool:
        found = await engine.client.get(
            f"{IMPORTS}/{response.json()['id']}", headers=tenant.headers
        )
        done.update(found.json())
        return done["status"] in ("completed", "failed")

    await eventually(finished, 30.0)
    _check_overlapping(done, await _contacts(engine, tenant), on_duplicate)
    side_by_side = {first: earlier for first, earlier, waited in calls if waited}
    if engine.settings.database_url.startswith("sqlite"):
        assert side_by_side == {}
        return
    phones = [f"+141555502{n:02d}" for n in range(8)]
    phones += [f"+141555501{n % 6:02d}" for n in range(8, 24)]
    batches = {first: frozenset(phones[first - 1 : first + 3]) for first in range(1, 26, 4)}
    if on_duplicate == "skip":
        # Batches were written beside the one before (a run's first one waits for none),
        # skipping its numbers.
        assert len(side_by_side) >= 3
        assert all(earlier == batches[first - 4] for first, earlier in side_by_side.items())
    else:
        # Only a batch sharing no number with the one before goes beside it: the second,
        # the third, the empty last one.
        assert side_by_side
        assert set(side_by_side) <= {5, 9, 25}
        assert all(earlier == frozenset() for earlier in side_by_side.values())


async def test_a_batch_beside_one_that_fails_is_rolled_back_and_the_import_resumes(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite writes one batch at a time")
    monkeypatch.setattr(runner, "BATCH_ROWS", 4)
    tenant = await engine.tenants.organization()
    await engine.client.post(
        "/api/v1/contacts",
        json={"phone_number": "+14155550105", "name": "Known"},
        headers=tenant.headers,
    )
    bind = engine.sessionmaker.kw["bind"]
    resources = Resources(
        settings=engine.settings,
        sessionmaker=engine.sessionmaker,
        rate_limiter=MemoryRateLimiter(),
        secret_key=engine.settings.secret_key,
        dialect_name=bind.dialect.name,
        engine=bind,
    )
    import_id = new_id()
    key = import_key(tenant.organization_id, import_id)
    data = _overlapping_file()
    size = await import_store(engine.settings).put(key, io.BytesIO(data), "text/csv")
    async with engine.sessionmaker() as session:
        session.add(queued_import(tenant.organization_id, import_id, size_bytes=size))
        await session.commit()
    started: list[int] = []

    async def failing(session: Any, job: Any, batch: Any, offset: int, **kwargs: Any) -> Any:
        started.append(batch.rows[0].line)
        written = await runner.write_batch(session, job, batch, offset, **kwargs)
        if batch.rows[0].line == 9:  # the third batch: its rows are written, then it fails
            raise RuntimeError("worker lost")
        return written

    monkeypatch.setattr(tasks, "write_batch", failing)
    with pytest.raises(RuntimeError, match="worker lost"):
        await run_import(resources, import_id, seconds=60.0)
    assert sorted(started) == [1, 5, 9, 13]  # the fourth was under way beside the third
    async with engine.sessionmaker() as session:
        job = await session.get(ContactImport, import_id)
        assert job is not None
        assert (job.status, job.rows_read, job.created_count) == ("processing", 8, 8)
    assert len(await _contacts(engine, tenant)) == 8 + 1  # neither batch left a contact

    monkeypatch.setattr(tasks, "write_batch", runner.write_batch)
    while await run_import(resources, import_id, seconds=60.0) is not None:
        pass
    done = (await engine.client.get(f"{IMPORTS}/{import_id}", headers=tenant.headers)).json()
    _check_overlapping(done, await _contacts(engine, tenant), "skip")
