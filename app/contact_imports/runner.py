"""Running an import: the stored CSV read in batches, each batch written with its progress.

Memory is bounded by the batch, whatever the file's size: the file is read line by line from
the object store's local copy, and each batch's contacts, refused rows and progress (the
counts and the byte offset where the next batch starts) commit in one transaction. A run that
dies resumes from the last committed offset: no row is written twice and none is lost. The
progress update is also the fence: it applies only while the offset is the one this run
started the batch from, so of two runs of one import only one can commit each batch.
"""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Awaitable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, cast

from sqlalchemy import Table, bindparam, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.contact_imports.models import ContactImport, ContactImportError, ImportStatus
from app.contact_imports.parsing import (
    Columns,
    FileRefused,
    ParsedRow,
    RowParser,
    RowRefused,
    parse_header,
)
from app.contacts.models import Contact
from app.contacts.schemas import OptOutSource
from app.core.clock import utcnow
from app.core.ids import new_id
from app.core.jsonutil import dumps_str
from app.db import lists

BATCH_ROWS = 5000
UTF8_BOM = b"\xef\xbb\xbf"
CONTACTS = cast(Table, Contact.__table__)
ERRORS = cast(Table, ContactImportError.__table__)


class LineSource:
    """Decoded lines of a binary file from an offset, counting the bytes handed out: after
    the csv reader returns a record it has taken exactly that record's lines, so `offset`
    is where the next record starts."""

    def __init__(self, handle: IO[bytes], offset: int) -> None:
        self.handle = handle
        self.offset = offset
        handle.seek(offset)

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = self.handle.readline(4 * 1024 * 1024)
        if not line:
            raise StopIteration
        start = self.offset
        self.offset += len(line)
        if start == 0 and line.startswith(UTF8_BOM):
            line = line[len(UTF8_BOM) :]
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileRefused(
                f"The file is not UTF-8 text (byte {start + exc.start}); save it as CSV UTF-8"
            ) from exc


@dataclass
class Batch:
    rows: list[ParsedRow | RowRefused] = field(default_factory=list)
    end_offset: int = 0
    finished: bool = False
    # The optional columns the file has: what an `update` row changes (see `_changes`).
    present: frozenset[str] = frozenset()


class FileReader:
    """The import's file: the header once, then batches of parsed rows."""

    def __init__(self, handle: IO[bytes], offset: int, region: str | None) -> None:
        self.region = region
        header_source = LineSource(handle, 0)
        header = self._next(csv.reader(header_source), 0)
        if header is None:
            raise FileRefused("The file is empty")
        self.columns: Columns = parse_header(header)
        self.parse = RowParser(self.columns, region)
        self.source = LineSource(handle, max(offset, header_source.offset))
        self.reader = csv.reader(self.source)

    @staticmethod
    def _next(reader: Any, row: int) -> list[str] | None:
        try:
            return cast(list[str], next(reader))
        except StopIteration:
            return None
        except csv.Error as exc:
            raise FileRefused(f"Row {row} cannot be read as CSV: {exc}") from exc

    def batch(self, first_row: int, size: int | None = None) -> Batch:
        batch = Batch(present=self.parse.present)
        rows, parse, reader = batch.rows, self.parse, self.reader
        row = first_row
        last = first_row + (size or BATCH_ROWS)
        while row < last:
            try:
                cells = next(reader)
            except StopIteration:
                batch.finished = True
                break
            except csv.Error as exc:
                raise FileRefused(f"Row {row} cannot be read as CSV: {exc}") from exc
            if cells:  # a blank line is no row
                rows.append(parse(row, cells))
                row += 1
        batch.end_offset = self.source.offset
        return batch


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    skipped: int = 0
    failed: int = 0


def _opted_out_at(row: ParsedRow, now: datetime) -> datetime | None:
    """When a new contact's opt-out happened (the file's time, else now), or None."""
    return (row.opted_out_at or now) if row.marketing_opt_out else None


def _changes(
    row: ParsedRow, current: Any, present: frozenset[str], now: datetime
) -> dict[str, Any]:
    """What an `update` row changes on an existing contact: its name, the columns the file
    has (an empty tags or notes cell clears them), and consent where the cell says."""
    changes: dict[str, Any] = {"name": row.name, "updated_at": now}
    for name in ("tags", "notes", "custom_fields"):
        if name in present:
            value = getattr(row, name)
            changes[name] = value if value is not None or name != "tags" else []
    if row.marketing_opt_out is True and current.marketing_opt_out_at is None:
        changes["marketing_opt_out_at"] = row.opted_out_at or now
        changes["marketing_opt_out_source"] = OptOutSource.IMPORT.value
        changes["consent_changed_at"] = row.opted_out_at or now
    elif row.marketing_opt_out is False and current.marketing_opt_out_at is not None:
        changes["marketing_opt_out_at"] = changes["marketing_opt_out_source"] = None
        changes["consent_changed_at"] = now
    if row.do_not_call is not None:
        changes["do_not_call"] = row.do_not_call
    return changes


async def _existing(
    session: AsyncSession, organization_id: str, phones: list[str]
) -> dict[str, Any]:
    """The oldest contact of the organization for each number (as inbound messages pick)."""
    found: dict[str, Any] = {}
    for chunk in lists.chunks(session, phones):
        result = await session.execute(
            select(Contact.id, Contact.phone_number, Contact.marketing_opt_out_at)
            .where(
                Contact.organization_id == organization_id,
                lists.one_of(session, Contact.phone_number, chunk),
            )
            .order_by(Contact.created_at.desc(), Contact.id.desc())
        )
        for row in result.all():
            found[row.phone_number] = row  # the oldest comes last and stays
    return found


# PostgreSQL: a batch's new contacts in one statement and one round trip. The rows travel as
# one array parameter per column (unnest), the numbers some contact of the organization
# already has are left out by one probe each of the (organization_id, phone_number) index (a
# lateral LIMIT 1: an anti-join could hash the whole organization's contacts per batch, a
# cost that grows with the organization), and the statement-level counter triggers run once
# per batch. Ids are UUID version 7 (RFC 9562: the batch's time in milliseconds, then
# gen_random_uuid()'s random bits), so the primary key and the (organization, created_at, id)
# index grow at their right edge: random ids would touch (and dirty) pages all over both
# indexes, which at a million rows no longer fit the buffer cache.
_NEW_CONTACTS = text(
    """
WITH fresh AS (
    SELECT batch.* FROM unnest(
        CAST(:phone_number AS varchar[]), CAST(:name AS varchar[]), CAST(:tags AS jsonb[]),
        CAST(:notes AS text[]), CAST(:custom_fields AS jsonb[]),
        CAST(:opted_out_at AS timestamptz[]), CAST(:do_not_call AS boolean[])
    ) AS batch(phone_number, name, tags, notes, custom_fields, opted_out_at, do_not_call)
    LEFT JOIN LATERAL (
        SELECT 1 AS taken FROM contacts
        WHERE contacts.organization_id = :organization_id
          AND contacts.phone_number = batch.phone_number
        LIMIT 1
    ) AS existing ON true
    WHERE existing.taken IS NULL
), written AS (
    INSERT INTO contacts (
        id, organization_id, phone_number, name, tags, notes, custom_fields,
        marketing_opt_out_at, marketing_opt_out_source, consent_changed_at, do_not_call,
        created_at, updated_at
    )
    SELECT
        substr(clock.hex, 1, 8) || '-' || substr(clock.hex, 9, 4) || '-7'
            || substr(CAST(gen_random_uuid() AS varchar), 16),
        :organization_id, phone_number, name, tags, notes, custom_fields, opted_out_at,
        CASE WHEN opted_out_at IS NOT NULL THEN :source END, opted_out_at, do_not_call,
        :now, :now
    FROM fresh, (
        SELECT lpad(
            to_hex(CAST(floor(extract(epoch FROM CAST(:now AS timestamptz)) * 1000) AS bigint)),
            12,
            '0'
        ) AS hex
    ) AS clock
    RETURNING 1
)
SELECT count(*) FROM written
"""
)


async def _insert_new(
    session: AsyncSession, organization_id: str, rows: list[ParsedRow], now: datetime
) -> int:
    """Contacts for the rows (one per number) whose number no contact of the organization
    has yet; answers how many were created."""
    if not rows:
        return 0
    if session.get_bind().dialect.name == "postgresql":
        params: dict[str, Any] = {
            "organization_id": organization_id,
            "now": now,
            "source": OptOutSource.IMPORT.value,
            "phone_number": [row.phone_number for row in rows],
            "name": [row.name for row in rows],
            "tags": [dumps_str(row.tags or []) for row in rows],
            "notes": [row.notes for row in rows],
            "custom_fields": [
                None if row.custom_fields is None else dumps_str(row.custom_fields) for row in rows
            ],
            "opted_out_at": [_opted_out_at(row, now) for row in rows],
            "do_not_call": [bool(row.do_not_call) for row in rows],
        }
        return int((await session.execute(_NEW_CONTACTS, params)).scalar_one())
    taken = await lists.present(
        session,
        Contact.phone_number,
        [row.phone_number for row in rows],
        Contact.organization_id == organization_id,
    )
    values = []
    for row in rows:
        if row.phone_number in taken:
            continue
        opted_out_at = _opted_out_at(row, now)
        values.append(
            {
                "id": new_id(),
                "organization_id": organization_id,
                "phone_number": row.phone_number,
                "name": row.name,
                "tags": row.tags or [],
                "notes": row.notes,
                "custom_fields": row.custom_fields,
                "marketing_opt_out_at": opted_out_at,
                "marketing_opt_out_source": None
                if opted_out_at is None
                else OptOutSource.IMPORT.value,
                "consent_changed_at": opted_out_at,
                "do_not_call": bool(row.do_not_call),
                "created_at": now,
                "updated_at": now,
            }
        )
    if values:
        await session.execute(insert(CONTACTS), values)
    return len(values)


async def _write_skipping(
    session: AsyncSession,
    job: ContactImport,
    parsed: list[ParsedRow],
    counts: Counts,
    earlier: Collection[str],
) -> None:
    """`skip`: the first row of each number the organization does not have yet (nor the
    batch before, `earlier`, whose write may not be committed yet)."""
    first: dict[str, ParsedRow] = {}
    for row in parsed:
        if row.phone_number in first or row.phone_number in earlier:
            counts.skipped += 1
        else:
            first[row.phone_number] = row
    counts.created = await _insert_new(session, job.organization_id, list(first.values()), utcnow())
    counts.skipped += len(first) - counts.created


async def _write_updating(
    session: AsyncSession,
    job: ContactImport,
    parsed: list[ParsedRow],
    present: frozenset[str],
    counts: Counts,
) -> None:
    """`update`: new numbers created (a later row of the batch replacing an earlier one's
    values), known numbers changed with what each row says, in file order."""
    now = utcnow()
    existing = await _existing(
        session, job.organization_id, list({row.phone_number for row in parsed})
    )
    inserts: dict[str, ParsedRow] = {}
    updates: dict[str, dict[str, Any]] = {}
    for row in parsed:
        current = existing.get(row.phone_number)
        if current is None:
            if row.phone_number in inserts:
                counts.updated += 1
            else:
                counts.created += 1
            inserts[row.phone_number] = row
        else:
            updates.setdefault(current.id, {}).update(_changes(row, current, present, now))
            counts.updated += 1
    await _insert_new(session, job.organization_id, list(inserts.values()), now)
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for contact_id, changes in updates.items():
        key = tuple(sorted(changes))
        by_columns.setdefault(key, []).append({"contact_id": contact_id, **changes})
    for columns, rows in by_columns.items():
        statement = (
            update(CONTACTS)
            .where(CONTACTS.c.id == bindparam("contact_id"))
            .values({name: bindparam(name) for name in columns})
        )
        await session.execute(statement, rows)


async def write_batch(
    session: AsyncSession,
    job: ContactImport,
    batch: Batch,
    start_offset: int,
    *,
    earlier: Collection[str] = (),
    turn: Awaitable[bool] | None = None,
) -> Counts | None:
    """The batch's contacts, refused rows and progress, in the session's transaction; None
    when another run committed this batch first (the caller rolls back).

    While the batch before is still being written on another connection: `earlier` holds its
    numbers (`skip` only: this batch skips them as a later row of the same number would be
    skipped) and `turn` answers whether that batch committed. This batch's progress update
    waits for it and applies only after that commit, so batches commit in file order and a
    batch whose predecessor failed is rolled back."""
    counts = Counts()
    parsed: list[ParsedRow] = []
    refused: list[RowRefused] = []
    for row in batch.rows:
        if isinstance(row, ParsedRow):
            parsed.append(row)
        else:
            refused.append(row)
    if job.on_duplicate == "update":
        assert not earlier, "an update batch waits for the batch before when they share numbers"
        await _write_updating(session, job, parsed, batch.present, counts)
    else:
        await _write_skipping(session, job, parsed, counts, earlier)
    if refused:
        counts.failed = len(refused)
        await session.execute(
            insert(ERRORS),
            [
                {
                    "import_id": job.id,
                    "row_number": row.line,
                    "phone_number": row.phone_number,
                    "name": row.name,
                    "reason": row.reason,
                }
                for row in refused
            ],
        )
    if turn is not None and not await turn:
        return None
    now = utcnow()
    advanced = await session.execute(
        update(ContactImport)
        .where(
            ContactImport.id == job.id,
            ContactImport.committed_offset == start_offset,
            ContactImport.status == ImportStatus.PROCESSING.value,
        )
        .values(
            committed_offset=batch.end_offset,
            rows_read=ContactImport.rows_read + len(batch.rows),
            created_count=ContactImport.created_count + counts.created,
            updated_count=ContactImport.updated_count + counts.updated,
            skipped_count=ContactImport.skipped_count + counts.skipped,
            failed_count=ContactImport.failed_count + counts.failed,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if advanced.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return counts


def numbers(batch: Batch) -> frozenset[str]:
    """The phone numbers of the batch's valid rows."""
    return frozenset(row.phone_number for row in batch.rows if isinstance(row, ParsedRow))


async def read_batch(reader: FileReader, first_row: int) -> Batch:
    """A batch read off the event loop (parsing is CPU work)."""
    return await asyncio.to_thread(reader.batch, first_row)
