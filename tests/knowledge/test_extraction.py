"""Extraction in the limited child process: real documents in, text out; hostile ones fail
with a reason, never a stalled or crashed caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.knowledge.extraction import (
    ExtractionFailed,
    ExtractionLimits,
    PageText,
    extract_document,
)
from tests.knowledge.documents import (
    encrypted_pdf,
    flate_bomb_pdf,
    make_docx,
    make_pdf,
    many_entries_docx,
    zip_bomb_docx,
)

LIMITS = ExtractionLimits(seconds=20.0)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


async def _extract(
    tmp_path: Path, kind: str, data: bytes, limits: ExtractionLimits = LIMITS
) -> list[PageText]:
    return await extract_document(_write(tmp_path, f"doc.{kind}", data), kind, limits)


async def test_pdf_pages_keep_their_numbers(tmp_path: Path) -> None:
    pages = await _extract(tmp_path, "pdf", make_pdf(["Alpha page one", "Beta page two"]))
    assert [page.page for page in pages] == [1, 2]
    assert "Alpha page one" in pages[0].text
    assert "Beta page two" in pages[1].text


async def test_docx_paragraphs_and_tables_in_order(tmp_path: Path) -> None:
    data = make_docx(
        ["Opening paragraph.", "Second paragraph."],
        table=[["Plan", "Price"], ["Gold", "$30"], ["Gold", "$30"]],
    )
    [page] = await _extract(tmp_path, "docx", data)
    assert page.page is None
    lines = page.text.splitlines()
    assert lines[:2] == ["Opening paragraph.", "Second paragraph."]
    assert "Plan | Price" in lines
    assert "Gold | $30" in lines


async def test_txt_is_read_as_utf8_without_bom(tmp_path: Path) -> None:
    [page] = await _extract(tmp_path, "txt", "\ufeffCafé crème\nligne deux".encode())
    assert page.text == "Café crème\nligne deux"


async def test_encrypted_pdf_fails_with_its_reason(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed, match="encrypted with a password"):
        await _extract(tmp_path, "pdf", encrypted_pdf())


async def test_huge_flate_stream_fails_within_the_limits(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed) as failure:
        await _extract(tmp_path, "pdf", flate_bomb_pdf())
    assert "decompression limit" in str(failure.value) or "memory" in str(failure.value)


async def test_zip_bomb_docx_is_refused_before_inflating(tmp_path: Path) -> None:
    limits = ExtractionLimits(max_zip_uncompressed_bytes=16 * 1024 * 1024)
    with pytest.raises(ExtractionFailed, match="expands to more than 16 MiB"):
        await _extract(tmp_path, "docx", zip_bomb_docx(), limits)


async def test_docx_with_too_many_entries_is_refused(tmp_path: Path) -> None:
    limits = ExtractionLimits(max_zip_entries=50)
    with pytest.raises(ExtractionFailed, match="more than 50 entries"):
        await _extract(tmp_path, "docx", many_entries_docx(60), limits)


async def test_page_limit(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed, match="3 pages; the limit is 2"):
        await _extract(tmp_path, "pdf", make_pdf(["a", "b", "c"]), ExtractionLimits(max_pages=2))


async def test_character_limit(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed, match="more than 10 characters"):
        await _extract(tmp_path, "txt", b"x" * 11, ExtractionLimits(max_characters=10))


async def test_time_budget_kills_the_child(tmp_path: Path) -> None:
    # Even a tiny file cannot be parsed within a millisecond: the budget, not the file, ends it.
    with pytest.raises(ExtractionFailed, match=r"took longer than 0\.001 seconds"):
        await _extract(tmp_path, "pdf", make_pdf(["slow"]), ExtractionLimits(seconds=0.001))


async def test_memory_limit_is_enforced_in_the_child(tmp_path: Path) -> None:
    # Under pypdf's own 75 MB inflation limit, over the child's address-space limit.
    limits = ExtractionLimits(memory_bytes=128 * 1024 * 1024)
    with pytest.raises(ExtractionFailed, match="more memory"):
        await _extract(tmp_path, "pdf", flate_bomb_pdf(70_000_000), limits)


async def test_garbage_pdf_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed):
        await _extract(tmp_path, "pdf", b"%PDF-1.7\nthis is not a pdf at all")
