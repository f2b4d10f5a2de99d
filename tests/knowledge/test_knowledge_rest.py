"""The knowledge base over REST on SQLite and PostgreSQL: uploads of real files, every
refusal, downloads, deletes, re-index and search, each organization alone with its own."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.config import Settings
from app.knowledge import service
from app.knowledge.runtime import KnowledgeRuntime
from app.resources import Resources
from tests.conftest import Tenant, TenantFactory
from tests.knowledge.conftest import (
    BASE,
    index_all,
    run_jobs,
    stored_files,
    upload,
    uploaded,
)
from tests.knowledge.documents import (
    encrypted_pdf,
    flate_bomb_pdf,
    make_docx,
    make_pdf,
    zip_bomb_docx,
)

PDF_TYPE = "application/pdf"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
UNSUPPORTED = "Unsupported file type. Please upload a PDF, DOCX or TXT file."

REFUND_PDF = make_pdf(
    [
        "Refund policy. Customers on annual plans may ask for a full refund within 30 days.",
        "Shipping. Orders leave our warehouse in Lisbon within two business days.",
    ]
)
HANDBOOK_DOCX = make_docx(
    ["Office hours are nine to five.", "Parking is free for visitors."],
    table=[["Plan", "Seats"], ["Starter", "5"], ["Enterprise", "unlimited"]],
)
NOTES_TXT = b"Support escalations go to the duty engineer.\nPager rotation is weekly.\n"


async def _download(client: httpx.AsyncClient, tenant: Tenant, document_id: str) -> httpx.Response:
    return await client.get(f"{BASE}/{document_id}/download", headers=tenant.headers)


@pytest.mark.parametrize(
    ("name", "data", "document_type", "content_type"),
    [
        ("Refunds 2026.pdf", REFUND_PDF, "pdf", PDF_TYPE),
        ("handbook.docx", HANDBOOK_DOCX, "docx", DOCX_TYPE),
        ("notes.TXT", NOTES_TXT, "txt", "text/plain"),
    ],
)
async def test_upload_and_download_round_trip(
    client: httpx.AsyncClient,
    acme: Tenant,
    name: str,
    data: bytes,
    document_type: str,
    content_type: str,
) -> None:
    document = await uploaded(client, acme, name, data)
    assert set(document) == {
        "id",
        "organization_id",
        "document_type",
        "file_name",
        "uploaded_at",
        "updated_at",
        "index_status",
        "index_error",
        "chunk_count",
    }
    assert document["organization_id"] == acme.organization_id
    assert document["document_type"] == document_type
    assert document["file_name"] == name
    assert (document["index_status"], document["index_error"], document["chunk_count"]) == (
        "pending",
        None,
        0,
    )
    response = await _download(client, acme, document["id"])
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == content_type
    assert response.headers["content-length"] == str(len(data))
    disposition = response.headers["content-disposition"]
    assert disposition.startswith("attachment; filename=")
    assert f"filename*=UTF-8''{quote(name, safe='')}" in disposition

    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["documents"]] == [document["id"]]
    assert listed["documents"][0] == document


async def test_file_names_are_sanitised(
    client: httpx.AsyncClient, acme: Tenant, settings: Settings
) -> None:
    # A raw body: clients percent-encode control characters, a hostile one need not.
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; '
        + 'filename="..\\..\\etc/Résumé\x07 final.txt"'.encode()
        + b"\r\n\r\nhello\r\n--b--\r\n"
    )
    response = await client.post(
        f"{BASE}/upload",
        content=body,
        headers={**acme.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["file_name"] == "Résumé final.txt"
    [path] = stored_files(settings)
    assert path.name == "Resume_final.txt"
    response = await _download(client, acme, document["id"])
    assert 'filename="Resume_final.txt"' in response.headers["content-disposition"]
    assert (
        "filename*=UTF-8''R%C3%A9sum%C3%A9%20final.txt" in response.headers["content-disposition"]
    )


@pytest.mark.parametrize(
    ("name", "data", "status", "detail"),
    [
        ("virus.exe", b"MZ\x90\x00", 400, UNSUPPORTED),
        ("noextension", b"hello", 400, UNSUPPORTED),
        ("report.pdf.exe", REFUND_PDF, 400, UNSUPPORTED),
        (
            "fake.pdf",
            b"just some text pretending",
            400,
            "The file content does not match its .pdf extension. "
            "Please upload a PDF, DOCX or TXT file.",
        ),
        (
            "fake.docx",
            REFUND_PDF,
            400,
            "The file content does not match its .docx extension. "
            "Please upload a PDF, DOCX or TXT file.",
        ),
        (
            "binary.txt",
            b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
            400,
            "The file content does not match its .txt extension. "
            "Please upload a PDF, DOCX or TXT file.",
        ),
        (
            "zip.docx",
            b"PK\x03\x04 not really a zip",
            400,
            "The file is not a valid DOCX document. Please upload a PDF, DOCX or TXT file.",
        ),
        ("empty.txt", b"", 400, "The file is empty"),
    ],
)
async def test_refused_uploads_store_nothing(
    client: httpx.AsyncClient,
    acme: Tenant,
    settings: Settings,
    name: str,
    data: bytes,
    status: int,
    detail: str,
) -> None:
    response = await upload(client, acme, name, data)
    assert response.status_code == status, response.text
    assert response.json() == {"detail": detail}
    assert stored_files(settings) == []
    assert (await client.get(BASE, headers=acme.headers)).json() == {"documents": []}


async def test_zip_bomb_docx_is_refused_at_upload(
    client: httpx.AsyncClient, acme: Tenant, settings: Settings
) -> None:
    bomb = zip_bomb_docx()  # 64 MiB expanded; the test limit is 16 MiB
    assert len(bomb) < settings.knowledge_max_upload_bytes
    response = await upload(client, acme, "bomb.docx", bomb)
    assert response.status_code == 400
    assert response.json() == {"detail": "The DOCX archive expands to more than 16 MiB"}
    assert stored_files(settings) == []


async def test_oversize_upload_is_413_while_streaming(
    client: httpx.AsyncClient, acme: Tenant, settings: Settings
) -> None:
    limit = settings.knowledge_max_upload_bytes
    response = await upload(client, acme, "big.txt", b"a" * (limit + 1))
    assert response.status_code == 413
    assert response.json() == {"detail": "The file is larger than the upload limit of 524288 bytes"}

    sent: list[int] = []

    async def endless() -> Any:
        # No Content-Length: the limit must be found while counting, not from a header.
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.txt"\r\n\r\n'
        for _ in range(10_000):
            sent.append(1)
            yield b"a" * 65536

    response = await client.post(
        f"{BASE}/upload",
        content=endless(),
        headers={**acme.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert response.status_code == 413
    assert len(sent) < 20  # stopped after ~limit bytes, not 655 MB
    assert stored_files(settings) == []


async def test_announced_oversize_is_refused_before_reading(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    response = await client.post(
        f"{BASE}/upload",
        content=b"x",
        headers={
            **acme.headers,
            "Content-Type": "multipart/form-data; boundary=b",
            "Content-Length": str(50 * 1024 * 1024),
        },
    )
    assert response.status_code == 413


@pytest.mark.parametrize(
    "kwargs",
    [
        {"json": {"file": "x"}},
        {"files": {"document": ("a.txt", b"hello")}},
        {"data": {"file": "not a file"}, "files": {"other": ("a.txt", b"x")}},
    ],
)
async def test_missing_file_part_is_422(
    client: httpx.AsyncClient, acme: Tenant, kwargs: dict[str, Any]
) -> None:
    response = await client.post(f"{BASE}/upload", headers=acme.headers, **kwargs)
    assert response.status_code in (400, 422), response.text
    if response.status_code == 422:
        assert response.json()["detail"][0]["loc"] == ["body", "file"]


async def test_upload_rate_limit(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, settings: Settings
) -> None:
    settings.knowledge_upload_rate_limit = "2/m"
    settings.__dict__.pop("knowledge_upload_limit", None)
    for index in range(2):
        await uploaded(client, acme, f"n{index}.txt", b"hello")
    response = await upload(client, acme, "n3.txt", b"hello")
    assert response.status_code == 429
    body = response.json()
    assert body["error"] == "rate_limit_exceeded"
    assert body["retry_after"] == 60
    assert "retry" in body["message"].lower()
    assert int(response.headers["retry-after"]) > 0
    # Another organization has its own bucket.
    await uploaded(client, globex, "g.txt", b"hello")


async def test_scope_and_credentials(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, settings: Settings
) -> None:
    reader = await tenants.key(acme, ["agents:read"])
    for response in (
        await upload(client, reader, "a.txt", b"x"),
        await client.get(BASE, headers=reader.headers),
        await client.post(f"{BASE}/search", json={"query": "x"}, headers=reader.headers),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "insufficient_scope"
    response = await client.post(f"{BASE}/upload", files={"file": ("a.txt", b"x")})
    assert response.status_code == 401
    assert stored_files(settings) == []


async def test_other_organizations_documents_are_not_found(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    document = await uploaded(client, acme, "notes.txt", NOTES_TXT)
    for response in (
        await client.get(f"{BASE}/{document['id']}", headers=globex.headers),
        await _download(client, globex, document["id"]),
        await client.delete(f"{BASE}/{document['id']}", headers=globex.headers),
        await client.post(f"{BASE}/{document['id']}/reindex", headers=globex.headers),
        await _download(client, acme, "not-a-uuid"),
    ):
        assert response.status_code == 404
        assert response.json() == {"detail": "Document not found"}
    assert (await client.get(BASE, headers=globex.headers)).json() == {"documents": []}
    assert (await _download(client, acme, document["id"])).content == NOTES_TXT


async def test_indexing_then_search_with_pages(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, resources: Resources
) -> None:
    pdf = await uploaded(client, acme, "refunds.pdf", REFUND_PDF)
    docx = await uploaded(client, acme, "handbook.docx", HANDBOOK_DOCX)
    await uploaded(client, globex, "globex.txt", b"Globex refund secrets: annual plans refunded.")
    assert await index_all(resources) == 3

    listed = {
        d["id"]: d for d in (await client.get(BASE, headers=acme.headers)).json()["documents"]
    }
    assert listed[pdf["id"]]["index_status"] == "ready"
    assert listed[pdf["id"]]["chunk_count"] >= 1
    assert listed[docx["id"]]["index_status"] == "ready"

    response = await client.post(
        f"{BASE}/search",
        json={"query": "refund for annual plans", "top_k": 3},
        headers=acme.headers,
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert results, results
    best = results[0]
    assert set(best) == {"document_id", "file_name", "chunk_index", "text", "score", "page"}
    assert best["document_id"] == pdf["id"]
    assert best["file_name"] == "refunds.pdf"
    assert best["page"] == 1
    assert "refund" in best["text"].lower()
    assert all(r["document_id"] != "" and "Globex" not in r["text"] for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)

    tables = await client.post(
        f"{BASE}/search", json={"query": "Enterprise seats"}, headers=acme.headers
    )
    assert tables.json()["results"][0]["document_id"] == docx["id"]
    assert "Enterprise | unlimited" in tables.json()["results"][0]["text"]

    other = await client.post(f"{BASE}/search", json={"query": "refund"}, headers=globex.headers)
    assert {r["file_name"] for r in other.json()["results"]} == {"globex.txt"}


async def test_search_input_is_validated(client: httpx.AsyncClient, acme: Tenant) -> None:
    for body in (
        {},
        {"query": ""},
        {"query": "   "},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 51},
    ):
        response = await client.post(f"{BASE}/search", json=body, headers=acme.headers)
        assert response.status_code == 422, body
        assert isinstance(response.json()["detail"], list)
    response = await client.post(
        f"{BASE}/search", json={"query": 'NEAR("a" OR) *:^ -- \' ;'}, headers=acme.headers
    )
    assert response.status_code == 200
    assert response.json() == {"results": []}


async def test_failed_indexing_is_visible_with_its_reason(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources
) -> None:
    locked = await uploaded(client, acme, "locked.pdf", encrypted_pdf())
    bomb = await uploaded(client, acme, "bomb.pdf", flate_bomb_pdf())
    scanned = await uploaded(client, acme, "blank.pdf", make_pdf([""]))
    await index_all(resources)
    documents = {
        d["id"]: d for d in (await client.get(BASE, headers=acme.headers)).json()["documents"]
    }
    assert documents[locked["id"]]["index_status"] == "failed"
    assert documents[locked["id"]]["index_error"] == "The PDF is encrypted with a password"
    assert documents[bomb["id"]]["index_status"] == "failed"
    assert "decompression limit" in documents[bomb["id"]]["index_error"]
    assert documents[scanned["id"]]["index_error"] == "The document contains no extractable text"
    assert all(d["chunk_count"] == 0 for d in documents.values())


async def test_delete_removes_object_and_index_entries(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources, settings: Settings
) -> None:
    document = await uploaded(client, acme, "notes.txt", NOTES_TXT)
    keep = await uploaded(client, acme, "keep.txt", b"pager rotation duty")
    await index_all(resources)
    assert len(stored_files(settings)) == 2
    response = await client.delete(f"{BASE}/{document['id']}", headers=acme.headers)
    assert response.status_code == 204
    # Index entries went with the row; the object goes with the collector job after commit.
    search = await client.post(
        f"{BASE}/search", json={"query": "pager rotation"}, headers=acme.headers
    )
    assert {r["document_id"] for r in search.json()["results"]} == {keep["id"]}
    await run_jobs(resources, service.COLLECT_ACTOR)
    assert [path.name for path in stored_files(settings)] == ["keep.txt"]
    assert (await _download(client, acme, document["id"])).status_code == 404
    assert (
        await client.delete(f"{BASE}/{document['id']}", headers=acme.headers)
    ).status_code == 404


async def test_reindex(client: httpx.AsyncClient, acme: Tenant, resources: Resources) -> None:
    document = await uploaded(client, acme, "notes.txt", NOTES_TXT)
    await index_all(resources)
    response = await client.post(f"{BASE}/{document['id']}/reindex", headers=acme.headers)
    assert response.status_code == 202
    assert response.json()["index_status"] == "pending"
    # The first generation's job, had it still been queued, would now be discarded.
    await index_all(resources)
    again = (await client.get(f"{BASE}/{document['id']}", headers=acme.headers)).json()
    assert again["index_status"] == "ready"
    assert again["chunk_count"] == 1


async def test_failed_database_write_leaves_no_object(
    client: httpx.AsyncClient,
    acme: Tenant,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_args: Any) -> None:
        raise RuntimeError("database write failed")

    monkeypatch.setattr(service, "_schedule_index", broken)
    response = await upload(client, acme, "notes.txt", NOTES_TXT)
    assert response.status_code == 500
    assert stored_files(settings) == []
    monkeypatch.undo()
    assert (await client.get(BASE, headers=acme.headers)).json() == {"documents": []}


async def test_failed_delete_keeps_row_and_object(
    client: httpx.AsyncClient,
    acme: Tenant,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    document = await uploaded(client, acme, "notes.txt", NOTES_TXT)

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("outbox write failed")

    monkeypatch.setattr(service.outbox, "schedule", broken)
    response = await client.delete(f"{BASE}/{document['id']}", headers=acme.headers)
    assert response.status_code == 500
    monkeypatch.undo()
    assert (await _download(client, acme, document["id"])).content == NOTES_TXT
    assert len(stored_files(settings)) == 1


async def test_collector_keeps_objects_a_document_names(
    client: httpx.AsyncClient,
    acme: Tenant,
    resources: Resources,
    settings: Settings,
    runtime: KnowledgeRuntime,
) -> None:
    await uploaded(client, acme, "notes.txt", NOTES_TXT)
    # The upload's own collector (due later) finds its document and leaves the object.
    assert await run_jobs(resources, service.COLLECT_ACTOR) == 1
    assert len(stored_files(settings)) == 1


async def _raw_upload(client: httpx.AsyncClient, tenant: Tenant, body: bytes) -> httpx.Response:
    return await client.post(
        f"{BASE}/upload",
        content=body,
        headers={**tenant.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )


def _part(name: str, filename: str, data: bytes) -> bytes:
    return (
        (
            f'--b\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n\r\n'
        ).encode()
        + data
        + b"\r\n"
    )


async def test_malformed_multipart_bodies_are_400(
    client: httpx.AsyncClient, acme: Tenant, settings: Settings
) -> None:
    truncated = await _raw_upload(client, acme, _part("file", "a.txt", b"hello")[:-2])
    assert truncated.status_code == 400
    assert truncated.json() == {"detail": "The upload ended before the file did"}
    two = await _raw_upload(
        client, acme, _part("file", "a.txt", b"one") + _part("file", "b.txt", b"two") + b"--b--\r\n"
    )
    assert two.status_code == 400
    assert two.json() == {"detail": "Upload one file per request"}
    not_a_file = await _raw_upload(
        client,
        acme,
        b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\ntext\r\n--b--\r\n',
    )
    assert not_a_file.status_code == 400
    parts = b"".join(_part(f"f{n}", "x.txt", b"x") for n in range(17)) + b"--b--\r\n"
    too_many = await _raw_upload(client, acme, parts)
    assert too_many.status_code == 400
    assert stored_files(settings) == []
