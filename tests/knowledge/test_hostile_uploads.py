"""Uploads that used to cost other tenants or slip past a limit, on SQLite and PostgreSQL.

- A DOCX whose zip directory lists far more entries than the limit (the issue's 23 MiB file
  listed 520,000) was parsed whole inside the upload request, on the event loop, before the
  1,000-entry limit was checked. The declared count is now judged first, and what parsing
  remains runs off the loop.
"""

from __future__ import annotations

import io
import struct
import threading
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.knowledge import filetypes
from app.knowledge.filetypes import ZipLimits, declared_zip_entries
from tests.conftest import Tenant, make_settings
from tests.knowledge.conftest import stored_files, upload
from tests.knowledge.documents import make_docx, many_entries_docx

DOCX_ENTRIES_LIMIT = 1000


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        storage_url=f"file://{tmp_path / 'objects'}",
        knowledge_max_upload_bytes=4 * 1024 * 1024,
    )


class DirectoryReads:
    """Counts `zipfile.ZipFile` archives opened by the upload checks, and on which thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[int] = []
        original = zipfile.ZipFile
        reads = self

        class Counting(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                reads.threads.append(threading.get_ident())
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(filetypes.zipfile, "ZipFile", Counting)


async def test_a_docx_listing_too_many_entries_is_refused_before_its_directory_is_parsed(
    client: httpx.AsyncClient, acme: Tenant, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    # 5,000 entries (the file listed 520,000): five times the limit.
    crowded = many_entries_docx(5000)
    reads = DirectoryReads(monkeypatch)
    response = await upload(client, acme, "crowded.docx", crowded)
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"The DOCX archive holds more than {DOCX_ENTRIES_LIMIT} entries"
    }
    assert reads.threads == []  # judged from the end record alone
    assert stored_files(settings) == []


async def test_a_docx_within_the_limits_is_parsed_off_the_event_loop(
    client: httpx.AsyncClient, acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = DirectoryReads(monkeypatch)
    response = await upload(client, acme, "fine.docx", make_docx(["Hello."]))
    assert response.status_code == 201, response.text
    assert len(reads.threads) == 1
    assert reads.threads[0] != threading.get_ident()  # not the loop's thread


def test_the_declared_count_is_read_from_the_end_records() -> None:
    small = many_entries_docx(3)
    assert declared_zip_entries(io.BytesIO(small)) == 5
    commented = io.BytesIO()
    with zipfile.ZipFile(commented, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
        archive.comment = b"a comment after the record " + b"x" * 2000
    assert declared_zip_entries(io.BytesIO(commented.getvalue())) == 1
    assert declared_zip_entries(io.BytesIO(b"PK\x03\x04 no end record")) is None


def test_a_zip64_count_is_read_where_the_classic_record_says_0xffff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over 65,535 entries the classic record holds 0xFFFF and the real count sits in the
    ZIP64 record: written here with zipfile's threshold lowered, then the classic count set
    to 0xFFFF as a real 70,000-entry archive has it."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index in range(4):
            archive.writestr(f"item{index}", "")
    data = bytearray(buffer.getvalue())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 0xFFFF, 0xFFFF)
    assert declared_zip_entries(io.BytesIO(bytes(data))) == 4
    with pytest.raises(Exception, match="more than 3 entries"):
        filetypes.check_docx_container(io.BytesIO(bytes(data)), ZipLimits(3, 1 << 30))
