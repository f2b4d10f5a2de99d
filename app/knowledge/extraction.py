"""Text out of an uploaded document, in a child process with hard limits.

Parsing hostile files is the riskiest thing the service does, so it never happens in a worker
or server process. `extract_document` runs `python -m app.knowledge.extraction` on a local copy
of the object; the child caps its own address space and CPU time before it opens the file, and
the parent kills it when the wall-clock budget runs out. The child answers one JSON object on
stdout: `{"pages": [[page, text], ...]}` or `{"error": reason}`. Whatever goes wrong (a
decompression bomb, an encrypted or broken PDF, too many pages or characters, a crash), the
outcome is an `ExtractionFailed` whose message is shown on the document.

This module imports nothing of the application, so the child starts quickly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Headroom over what pypdf and python-docx legitimately use on large files.
DEFAULT_MEMORY_BYTES = 1024 * 1024 * 1024
# The folder holding the `app` package, where the child starts.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class ExtractionFailed(Exception):
    """The document yields no text within the limits; the message says why."""


@dataclass(frozen=True, slots=True)
class ExtractionLimits:
    max_pages: int = 2000
    max_characters: int = 5_000_000
    max_zip_entries: int = 1000
    max_zip_uncompressed_bytes: int = 200 * 1024 * 1024
    seconds: float = 30.0
    memory_bytes: int = DEFAULT_MEMORY_BYTES


@dataclass(frozen=True, slots=True)
class PageText:
    """Text of one page (PDF, numbered from 1) or of the whole document (page None)."""

    page: int | None
    text: str


# --- the child ---------------------------------------------------------------------------


class _CharacterBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def spend(self, text: str) -> str:
        self.used += len(text)
        if self.used > self.limit:
            raise ExtractionFailed(f"The document has more than {self.limit} characters of text")
        return text


def extract_pdf(path: Path, limits: ExtractionLimits) -> list[PageText]:
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import LimitReachedError, PdfReadError

    budget = _CharacterBudget(limits.max_characters)
    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            # An owner password alone still lets anyone read; a user password does not.
            raise ExtractionFailed("The PDF is encrypted with a password")
        count = len(reader.pages)
        if count > limits.max_pages:
            raise ExtractionFailed(f"The PDF has {count} pages; the limit is {limits.max_pages}")
        pages: list[PageText] = []
        for number, page in enumerate(reader.pages, start=1):
            _decode_streams(page)
            pages.append(PageText(number, budget.spend(page.extract_text() or "")))
        return pages
    except LimitReachedError as exc:
        raise ExtractionFailed(
            "The PDF holds a stream that expands beyond the decompression limit"
        ) from exc
    except PdfReadError as exc:
        raise ExtractionFailed(f"The PDF could not be read: {exc}") from exc


def _decode_streams(page: Any) -> None:
    """Decode the page's content streams and form XObjects up front.

    `extract_text` swallows a stream that hits pypdf's decompression limit and returns no
    text for it; decoding first (the result is cached for `extract_text`) turns such a bomb
    into a visible LimitReachedError instead of a silently empty page.
    """
    from pypdf.generic import ArrayObject

    contents = page.get("/Contents")
    if contents is not None:
        resolved = contents.get_object()
        for stream in resolved if isinstance(resolved, ArrayObject) else [resolved]:
            stream.get_object().get_data()
    resources = page.get("/Resources")
    xobjects = resources.get_object().get("/XObject") if resources is not None else None
    if xobjects is not None:
        for reference in xobjects.get_object().values():
            xobject = reference.get_object()
            if xobject.get("/Subtype") == "/Form":
                xobject.get_data()


def check_zip_limits(path: Path, limits: ExtractionLimits) -> None:
    """Declared sizes bound what `zipfile` inflates, so checking them bounds the work."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except zipfile.BadZipFile as exc:
        raise ExtractionFailed("The DOCX file is not a valid zip archive") from exc
    if len(entries) > limits.max_zip_entries:
        raise ExtractionFailed(f"The DOCX archive holds more than {limits.max_zip_entries} entries")
    if sum(entry.file_size for entry in entries) > limits.max_zip_uncompressed_bytes:
        raise ExtractionFailed(
            "The DOCX archive expands to more than "
            f"{limits.max_zip_uncompressed_bytes // (1024 * 1024)} MiB"
        )


def _table_lines(table: Any) -> Iterator[str]:
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = cell.text.strip()
            if text and (not cells or cells[-1] != text):  # merged cells repeat their text
                cells.append(text)
        if cells:
            yield " | ".join(cells)
        for cell in row.cells:
            for inner in cell.tables:
                yield from _table_lines(inner)


def extract_docx(path: Path, limits: ExtractionLimits) -> list[PageText]:
    import docx
    from docx.table import Table

    check_zip_limits(path, limits)
    budget = _CharacterBudget(limits.max_characters)
    try:
        document = docx.Document(str(path))
    except Exception as exc:  # python-docx raises many types for broken packages
        raise ExtractionFailed(f"The DOCX file could not be read: {type(exc).__name__}") from exc
    lines: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            lines.extend(budget.spend(line + "\n") for line in _table_lines(block))
        else:
            lines.append(budget.spend(block.text + "\n"))
    return [PageText(None, "".join(lines))]


def extract_txt(path: Path, limits: ExtractionLimits) -> list[PageText]:
    budget = _CharacterBudget(limits.max_characters)
    with path.open("rb") as handle:
        data = handle.read(limits.max_characters * 4 + 4)  # UTF-8: at most 4 bytes a character
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionFailed("The text file is not valid UTF-8") from exc
    return [PageText(None, budget.spend(text))]


EXTRACTORS = {"pdf": extract_pdf, "docx": extract_docx, "txt": extract_txt}


# The child yields the CPU to the server and the other jobs of its machine: a hostile document
# may burn its whole time limit.
CHILD_NICENESS = 10


def _limit_self(limits: ExtractionLimits) -> None:
    import os
    import resource

    os.nice(CHILD_NICENESS)
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    cpu = max(1, int(limits.seconds) + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # it reads; it never writes files
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_child(argv: list[str]) -> dict[str, Any]:
    path, document_type, raw_limits = argv
    limits = ExtractionLimits(**json.loads(raw_limits))
    _limit_self(limits)
    logging.disable(logging.CRITICAL)  # pypdf warns on every oddity; reasons go in the JSON
    try:
        pages = EXTRACTORS[document_type](Path(path), limits)
    except ExtractionFailed as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"error": "The document needs more memory to extract than the limit allows"}
    except RecursionError:
        return {"error": "The document is nested too deeply to extract"}
    except Exception as exc:
        return {"error": f"The document could not be read: {type(exc).__name__}"}
    return {"pages": [[page.page, page.text] for page in pages]}


# --- the parent --------------------------------------------------------------------------


async def extract_document(
    path: Path, document_type: str, limits: ExtractionLimits
) -> list[PageText]:
    """The document's text, extracted by a limited child process; ExtractionFailed if not."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-s",  # no user site-packages
        "-m",
        __name__,
        str(path),
        document_type,
        json.dumps(asdict(limits)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        # `-m` puts the working directory first on sys.path: the folder holding `app`.
        cwd=_PACKAGE_ROOT,
    )
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout=limits.seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ExtractionFailed(
            f"Extracting the text took longer than {limits.seconds:g} seconds"
        ) from None
    except BaseException:
        process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        raise ExtractionFailed("Extracting the text ran out of time or memory")
    try:
        answer = json.loads(stdout)
    except ValueError:
        raise ExtractionFailed("Extracting the text failed") from None
    if "error" in answer:
        raise ExtractionFailed(str(answer["error"]))
    return [PageText(page, text) for page, text in answer["pages"]]


if __name__ == "__main__":
    sys.stdout.write(json.dumps(run_child(sys.argv[1:]), ensure_ascii=False))
