"""Contact imports: receive a CSV into the object store, run it as a job, report progress
and the refused rows (docs/api.md, "Contacts in and out").

The upload owns its transactions, as the knowledge base's does: the body streams to a spool
file with no transaction open, is stored, and only then is the import row written, with its
job, in one short transaction.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import cache
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.config import Settings
from app.contact_imports.models import ContactImport, ImportStatus
from app.contact_imports.parsing import FileRefused, check_region, parse_header
from app.contact_imports.repository import ContactImportRepository, error_batch
from app.contact_imports.schemas import ImportOptions
from app.core.ids import new_id
from app.kit import outbox
from app.kit.csvcells import csv_safe, encode_rows
from app.kit.errors import InvalidInput
from app.kit.multipart import receive_file
from app.kit.pagination import CursorPage, CursorParams
from app.kit.validation import display_name
from app.knowledge.storage import ObjectStore, build_object_store
from app.resources import Resources

logger = structlog.get_logger("switchboard.contact_imports")

RUN_ACTOR = "contact_imports.run"
RUN_QUEUE = "imports"
FILE_FIELD = "file"
# The first bytes of the upload are checked before it is stored: text, and a usable header.
SNIFF_BYTES = 64 * 1024
REPORT_BATCH = 1000
REPORT_COLUMNS = ("row", "phone_number", "name", "reason")
OpenSession = Callable[[], AbstractAsyncContextManager[AsyncSession]]


@cache
def _store(url: str, endpoint: str | None) -> ObjectStore:
    return build_object_store(url, s3_endpoint_url=endpoint)


def import_store(settings: Settings) -> ObjectStore:
    """The object store the knowledge base uses (SWITCHBOARD_STORAGE_URL)."""
    return _store(settings.storage_url, settings.storage_endpoint_url)


def upload_limit(settings: Settings) -> int:
    return settings.contact_import_max_bytes


class _CsvInspector:
    """Refuses, from its first bytes, an upload that is not UTF-8 CSV text with a usable
    header, before the rest of it is stored."""

    def __init__(self, filename: str) -> None:
        self.head = bytearray()
        self.checked = False

    def feed(self, chunk: bytes) -> None:
        if self.checked:
            return
        self.head.extend(chunk[: SNIFF_BYTES - len(self.head)])
        if len(self.head) >= SNIFF_BYTES:
            self._check(final=False)

    def finish(self, size: int) -> None:
        if not self.checked:
            self._check(final=True)

    def _check(self, *, final: bool) -> None:
        self.checked = True
        head = bytes(self.head)
        if not head.strip():
            raise InvalidInput("The file is empty", field="file")
        if b"\x00" in head:
            raise InvalidInput("The file is not CSV text (it holds NUL bytes)", field="file")
        try:
            text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=final)
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                "The file is not UTF-8 text; save it as CSV UTF-8", field="file"
            ) from exc
        first = text.split("\n", 1)
        if len(first) == 1 and not final:
            raise InvalidInput("The header row is longer than 64 KiB", field="file")
        try:
            header = next(csv.reader([first[0]]), [])
            parse_header(header)
        except (FileRefused, csv.Error) as exc:
            raise InvalidInput(str(exc), field="file") from exc


async def create_import(
    resources: Resources,
    subject: Subject,
    options: ImportOptions,
    body: AsyncIterator[bytes],
    content_type: str | None,
    content_length: str | None,
) -> ContactImport:
    region = check_region(options.default_region)
    received = await receive_file(
        body,
        content_type,
        content_length,
        field_name=FILE_FIELD,
        max_bytes=upload_limit(resources.settings),
        inspect=_CsvInspector,
    )
    try:
        try:
            file_name = display_name(received.filename.strip()[:255] or "contacts.csv")
        except ValueError:
            file_name = "contacts.csv"
        import_id = new_id()
        key = f"contact-imports/{subject.organization_id}/{import_id}/contacts.csv"
        await import_store(resources.settings).put(key, received.file, "text/csv")
        async with resources.session(writes=True) as session:
            job = ContactImport(
                id=import_id,
                organization_id=subject.organization_id,
                status=ImportStatus.QUEUED.value,
                file_name=file_name,
                object_key=key,
                size_bytes=received.size,
                on_duplicate=options.on_duplicate.value,
                default_region=region,
                rows_read=0,
                created_count=0,
                updated_count=0,
                skipped_count=0,
                failed_count=0,
                committed_offset=0,
            )
            session.add(job)
            await session.flush()
            outbox.schedule(session, RUN_ACTOR, import_id, queue=RUN_QUEUE)
            await session.commit()
        return job
    finally:
        received.close()


async def get_import(session: AsyncSession, subject: Subject, import_id: str) -> Any:
    return await ContactImportRepository(session, subject).get_row_or_404(import_id)


async def list_imports(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    return await ContactImportRepository(session, subject).cursor_page(params)


async def error_report(
    open_session: OpenSession, import_id: str, batch: int = REPORT_BATCH
) -> AsyncIterator[bytes]:
    """The refused rows as CSV, in row order, one short read per batch."""
    yield encode_rows([list(REPORT_COLUMNS)])
    after = 0
    while True:
        async with open_session() as session:
            rows = await error_batch(session, import_id, after, batch)
        if not rows:
            return
        yield encode_rows(
            [
                [str(row.row_number), csv_safe(row.phone_number), csv_safe(row.name), row.reason]
                for row in rows
            ]
        )
        if len(rows) < batch:
            return
        after = rows[-1].row_number
