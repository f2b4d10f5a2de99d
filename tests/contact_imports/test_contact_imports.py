"""Contact imports and the contacts export, end to end: upload (REST), the job through the
worker path, progress (REST and GraphQL), the error report, duplicates, bad files, resuming
after a dead run, the export round trip, other tenants and scopes."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.contact_imports import runner
from app.contact_imports.models import ContactImport
from app.contact_imports.service import RUN_ACTOR, import_store
from app.contact_imports.tasks import run_import
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from tests.conftest import Tenant, TenantFactory, client_with, graphql
from tests.conversations.conftest import JobWorker

IMPORTS = "/api/v1/contacts/imports"
CONTACTS = "/api/v1/contacts"

GOOD_BAD_DUPLICATE = (
    "name,phone_number,tags,notes,cf.plan,marketing_opt_out,do_not_call\r\n"
    "Ada Lovelace,+1 415 555 0100,vip|b2b,met at expo,pro,,\r\n"
    "Grace Hopper,4155550101,,,basic,true,yes\r\n"  # national number: default_region US
    "Nobody,not-a-number,,,,,\r\n"
    ",+14155550102,,,,,\r\n"
    "Too,+14155550103,few\r\n"
    "Ada again,+14155550100,vip,,,,\r\n"
    "Alan,+442079460958,,,,maybe,\r\n"
    '"=HYPERLINK(""http://x"")",+14155550104,,,,,\r\n'
)


async def upload(
    client: httpx.AsyncClient, tenant: Tenant, data: bytes, **params: str
) -> httpx.Response:
    return await client.post(
        IMPORTS,
        params=params,
        files={"file": ("contacts.csv", data, "text/csv")},
        headers=tenant.headers,
    )


async def run_jobs(resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
    worker = JobWorker(resources)
    for _ in range(50):
        async with sessionmaker() as session:
            ids = list(
                await session.scalars(select(OutboxJob.id).where(OutboxJob.actor == RUN_ACTOR))
            )
        if not ids:
            return
        for job_id in ids:
            await worker.run(job_id)
    raise AssertionError("import jobs kept coming")


async def imported(
    client: httpx.AsyncClient,
    tenant: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
    data: bytes,
    **params: str,
) -> dict[str, Any]:
    response = await upload(client, tenant, data, **params)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"
    await run_jobs(resources, sessionmaker)
    done = await client.get(f"{IMPORTS}/{response.json()['id']}", headers=tenant.headers)
    body: dict[str, Any] = done.json()
    return body


async def by_phone(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, dict[str, Any]]:
    response = await client.get(CONTACTS, params={"limit": 100}, headers=tenant.headers)
    return {row["phone_number"]: row for row in response.json()["data"]}


async def test_import_of_good_bad_and_duplicate_rows(
    client: httpx.AsyncClient,
    acme: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await client.post(
        CONTACTS, json={"phone_number": "+14155550104", "name": "Existing"}, headers=acme.headers
    )
    result = await imported(
        client, acme, resources, sessionmaker, GOOD_BAD_DUPLICATE.encode(), default_region="us"
    )
    assert result["status"] == "completed", result
    assert result["default_region"] == "US"
    assert (result["rows_read"], result["created_count"], result["updated_count"]) == (8, 2, 0)
    assert (result["skipped_count"], result["failed_count"]) == (2, 4)
    assert result["finished_at"] is not None
    contacts = await by_phone(client, acme)
    ada = contacts["+14155550100"]
    assert ada["name"] == "Ada Lovelace"
    assert ada["tags"] == ["vip", "b2b"]
    assert ada["custom_fields"] == {"plan": "pro"}
    grace = contacts["+14155550101"]
    assert grace["marketing_opt_out"]["source"] == "import"
    assert grace["do_not_call"] is True
    assert contacts["+14155550104"]["name"] == "Existing"  # skipped: on_duplicate skip

    report = await client.get(f"{IMPORTS}/{result['id']}/errors.csv", headers=acme.headers)
    assert report.status_code == 200
    assert report.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(report.text)))
    assert rows[0] == ["row", "phone_number", "name", "reason"]
    assert [(row[0], row[3]) for row in rows[1:]] == [
        ("3", "invalid phone number"),
        ("4", "name must be 1 to 255 characters"),
        ("5", "expected 7 fields, found 3"),
        ("7", "marketing_opt_out must be true, false or an ISO 8601 time"),
    ]


async def test_update_on_duplicate_and_formula_cells_round_trip(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await client.post(
        CONTACTS,
        json={"phone_number": "+14155550104", "name": "Existing", "tags": ["old"]},
        headers=acme.headers,
    )
    result = await imported(
        client,
        acme,
        resources,
        sessionmaker,
        GOOD_BAD_DUPLICATE.encode(),
        default_region="US",
        on_duplicate="update",
    )
    assert (result["created_count"], result["updated_count"], result["skipped_count"]) == (2, 2, 0)
    contacts = await by_phone(client, acme)
    assert contacts["+14155550100"]["name"] == "Ada again"  # the later row of the file wins
    assert contacts["+14155550100"]["tags"] == ["vip"]
    formula = contacts["+14155550104"]
    assert formula["name"] == '=HYPERLINK("http://x")'  # stored as written
    assert formula["tags"] == []

    # The export escapes it; imported into another organization, everything comes back.
    export = await client.get(f"{CONTACTS}.csv", headers=acme.headers)
    assert export.status_code == 200
    assert export.headers["content-disposition"] == 'attachment; filename="contacts.csv"'
    assert "'=HYPERLINK" in export.text
    copied = await imported(client, globex, resources, sessionmaker, export.content)
    assert copied["status"] == "completed", copied
    assert copied["created_count"] == len(contacts)
    theirs = await by_phone(client, globex)
    keys = ("name", "tags", "notes", "custom_fields", "do_not_call")
    for phone, ours in contacts.items():
        assert {key: theirs[phone][key] for key in keys} == {key: ours[key] for key in keys}
        assert (theirs[phone]["marketing_opt_out"] is None) == (ours["marketing_opt_out"] is None)
    assert (
        theirs["+14155550101"]["marketing_opt_out"]["at"]
        == (contacts["+14155550101"]["marketing_opt_out"]["at"])
    )


async def test_export_uses_the_list_filters_and_sees_only_its_organization(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    for phone, name, tags in (
        ("+14155550100", "Ada", ["vip"]),
        ("+14155550101", "Grace", []),
        ("+14155550102", "Adam", ["vip"]),
    ):
        await client.post(
            CONTACTS, json={"phone_number": phone, "name": name, "tags": tags}, headers=acme.headers
        )
    await client.post(
        CONTACTS, json={"phone_number": "+14155550199", "name": "Ada G"}, headers=globex.headers
    )
    tagged = await client.get(f"{CONTACTS}.csv", params={"tag": "vip"}, headers=acme.headers)
    rows = list(csv.DictReader(io.StringIO(tagged.text)))
    assert [row["name"] for row in rows] == ["Adam", "Ada"]
    searched = await client.get(f"{CONTACTS}.csv", params={"search": "ada"}, headers=acme.headers)
    assert {row["name"] for row in csv.DictReader(io.StringIO(searched.text))} == {"Ada", "Adam"}
    narrow = await tenants.key(acme, ["calls:read"])
    assert (await client.get(f"{CONTACTS}.csv", headers=narrow.headers)).status_code == 403


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR", "NUL"),
        ("name,phone_number\nJos\u00e9,+14155550100\n".encode("latin-1"), "UTF-8"),
        (b"name,phone_number,name\nA,+14155550100,B\n", "Duplicate columns: name"),
        (b"name,notes\nA,x\n", "Missing required columns: phone_number"),
        (b"name,phone_number,emial\nA,+1,x\n", "Unknown columns: emial"),
    ],
)
async def test_bad_files_are_refused_at_upload(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
    data: bytes,
    message: str,
) -> None:
    response = await upload(client, acme, data)
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]
    async with sessionmaker() as session:
        assert list(await session.scalars(select(ContactImport.id))) == []


async def test_upload_limits_and_options(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources
) -> None:
    assert (
        await upload(client, acme, b"name,phone_number\n", default_region="XX")
    ).status_code == 400
    assert (
        await upload(client, acme, b"name,phone_number\n", on_duplicate="merge")
    ).status_code == 422
    missing = await client.post(IMPORTS, files={"other": ("a.csv", b"x")}, headers=acme.headers)
    assert missing.status_code == 422
    async with client_with(resources, contact_import_max_bytes=1024) as small:
        big = b"name,phone_number\n" + b"A,+14155550100\n" * 200
        refused = await upload(small, acme, big)
        assert refused.status_code == 413
        assert "upload limit" in refused.json()["detail"]
        # Announced as larger than the limit: refused before the body is read.
        announced = await small.post(
            IMPORTS,
            content=b"x",
            headers={
                **acme.headers,
                "Content-Type": "multipart/form-data; boundary=b",
                "Content-Length": str(2 * 1024**3),
            },
        )
        assert announced.status_code == 413


async def test_bad_bytes_past_the_sniffed_head_fail_the_import_cleanly(
    client: httpx.AsyncClient,
    acme: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "BATCH_ROWS", 1000)
    lines = [f"P{n},+1415555{n:04d}\n" for n in range(5000)]
    data = ("name,phone_number\n" + "".join(lines)).encode() + b"Jos\xe9,+14155559999\n"
    result = await imported(client, acme, resources, sessionmaker, data)
    assert result["status"] == "failed"
    assert "not UTF-8" in result["error"]
    # Progress says exactly what was written: every whole batch before the bad bytes.
    assert result["rows_read"] == result["created_count"] == 5000
    listed = await client.get(CONTACTS, params={"limit": 1}, headers=acme.headers)
    assert listed.json()["total_count"] == 5000


async def test_a_dead_run_resumes_from_the_committed_offset_without_doubles(
    client: httpx.AsyncClient,
    acme: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "BATCH_ROWS", 100)
    data = "name,phone_number\n" + "".join(f"P{n},+1415555{n:04d}\n" for n in range(450))
    response = await upload(client, acme, data.encode())
    import_id = response.json()["id"]
    # A run whose time is up after its first batch: what a killed worker leaves behind.
    assert await run_import(resources, import_id, seconds=0) is not None
    partial = (await client.get(f"{IMPORTS}/{import_id}", headers=acme.headers)).json()
    assert (partial["status"], partial["rows_read"]) == ("processing", 100)
    # A stale run that read the first batch again cannot commit it.
    async with sessionmaker() as session:
        job = await session.get(ContactImport, import_id)
        assert job is not None
        async with import_store(resources.settings).local_copy(job.object_key) as path:
            handle = path.open("rb")
            with handle:
                stale = runner.FileReader(handle, 0, None).batch(1)
        assert await runner.write_batch(session, job, stale, 0) is None
        await session.rollback()
    await run_jobs(resources, sessionmaker)
    done = (await client.get(f"{IMPORTS}/{import_id}", headers=acme.headers)).json()
    assert (done["status"], done["rows_read"], done["created_count"]) == ("completed", 450, 450)
    listed = await client.get(CONTACTS, params={"limit": 1}, headers=acme.headers)
    assert listed.json()["total_count"] == 450


async def test_lists_graphql_other_tenants_and_scopes(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ids = []
    for n in range(3):
        data = f"name,phone_number\nP,+1415555010{n}\n".encode()
        ids.append((await imported(client, acme, resources, sessionmaker, data))["id"])
    page = await client.get(IMPORTS, params={"limit": 2}, headers=acme.headers)
    body = page.json()
    assert [row["id"] for row in body["data"]] == ids[::-1][:2]
    assert body["has_more"] is True
    assert body["total_count"] == 3
    after = await client.get(
        IMPORTS, params={"limit": 2, "starting_after": body["next_cursor"]}, headers=acme.headers
    )
    assert [row["id"] for row in after.json()["data"]] == [ids[0]]

    assert (await client.get(f"{IMPORTS}/{ids[0]}", headers=globex.headers)).status_code == 404
    report = await client.get(f"{IMPORTS}/{ids[0]}/errors.csv", headers=globex.headers)
    assert report.status_code == 404
    assert (await client.get(IMPORTS, headers=globex.headers)).json()["data"] == []
    narrow = await tenants.key(acme, ["calls:read"])
    assert (await client.get(IMPORTS, headers=narrow.headers)).status_code == 403
    assert (await upload(client, narrow, b"name,phone_number\n")).status_code == 403

    query = """
    query($id: ID!) {
      contactImport(id: $id) { id status rowsRead createdCount failedCount }
      contactImports(first: 5) { totalCount edges { node { id } } }
    }"""
    result = await graphql(client, query, {"id": ids[0]}, acme.headers)
    assert result["data"]["contactImport"] == {
        "id": ids[0],
        "status": "completed",
        "rowsRead": 1,
        "createdCount": 1,
        "failedCount": 0,
    }
    assert result["data"]["contactImports"]["totalCount"] == 3
    foreign = await graphql(client, query, {"id": ids[0]}, globex.headers)
    assert foreign["data"]["contactImport"] is None
    assert foreign["data"]["contactImports"]["totalCount"] == 0


@pytest.mark.parametrize("on_duplicate", ["skip", "update"])
async def test_numbers_repeated_across_batches_are_written_once(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    on_duplicate: str,
) -> None:
    monkeypatch.setattr(runner, "BATCH_ROWS", 4)
    # Another organization's contact with one of the numbers changes nothing here.
    await client.post(
        CONTACTS, json={"phone_number": "+14155550107", "name": "Theirs"}, headers=globex.headers
    )
    await client.post(
        CONTACTS, json={"phone_number": "+14155550105", "name": "Known"}, headers=acme.headers
    )
    rows = [f"P{n},+1415555010{n % 8},t{n}" for n in range(20)]
    data = ("name,phone_number,tags\n" + "\n".join(rows) + "\n").encode()
    result = await imported(client, acme, resources, sessionmaker, data, on_duplicate=on_duplicate)
    assert result["status"] == "completed", result
    assert result["rows_read"] == 20
    assert result["created_count"] == 7
    contacts = await by_phone(client, acme)
    assert len(contacts) == 8
    if on_duplicate == "skip":
        assert (result["updated_count"], result["skipped_count"]) == (0, 13)
        assert contacts["+14155550100"]["name"] == "P0"
        assert contacts["+14155550105"]["name"] == "Known"
    else:
        assert (result["updated_count"], result["skipped_count"]) == (13, 0)
        assert contacts["+14155550100"]["name"] == "P16"  # the last row of the number
        assert contacts["+14155550100"]["tags"] == ["t16"]
        assert contacts["+14155550105"]["name"] == "P13"
    assert (await by_phone(client, globex))["+14155550107"]["name"] == "Theirs"
    for phone, contact in contacts.items():
        parsed = uuid.UUID(contact["id"])
        assert str(parsed) == contact["id"]  # canonical, as every id of the API
        if phone != "+14155550105" and resources.dialect_name == "postgresql":
            # Time-ordered (version 7): the batch's millisecond, as created_at.
            assert parsed.version == 7
            created = datetime.fromisoformat(contact["created_at"].replace("Z", "+00:00"))
            epoch = datetime(1970, 1, 1, tzinfo=UTC)
            assert int.from_bytes(parsed.bytes[:6], "big") == (created - epoch) // timedelta(
                milliseconds=1
            )
