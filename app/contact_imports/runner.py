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
from collections.abc import Iterator
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
    RowRefused,
    parse_header,
    parse_row,
)
from app.contacts.models import Contact
from app.contacts.schemas import OptOutSource
from app.db import lists
from app.kit.clock import utcnow
from app.kit.ids import new_id
from app.kit.jsonutil import dumps

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


class FileReader:
    """The import's file: the header once, then batches of parsed rows."""

    def __init__(self, handle: IO[bytes], offset: int, region: str | None) -> None:
        self.region = region
        header_source = LineSource(handle, 0)
        header = self._next(csv.reader(header_source), 0)
        if header is None:
            raise FileRefused("The file is empty")
        self.columns: Columns = parse_header(header)
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
        batch = Batch()
        row = first_row
        while len(batch.rows) < (size or BATCH_ROWS):
            cells = self._next(self.reader, row)
            if cells is None:
                batch.finished = True
                break
            if cells:  # a blank line is no row
                batch.rows.append(parse_row(row, cells, self.columns, self.region))
                row += 1
        batch.end_offset = self.source.offset
        return batch


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    skipped: int = 0
    failed: int = 0


def _contact_values(row: ParsedRow, organization_id: str, now: datetime) -> dict[str, Any]:
    opted_out = bool(row.marketing_opt_out)
    return {
        "id": new_id(),
        "organization_id": organization_id,
        "phone_number": row.phone_number,
        "name": row.name,
        "tags": row.tags or [],
        "notes": row.notes,
        "custom_fields": row.custom_fields,
        "marketing_opt_out_at": (row.opted_out_at or now) if opted_out else None,
        "marketing_opt_out_source": OptOutSource.IMPORT.value if opted_out else None,
        "consent_changed_at": (row.opted_out_at or now) if opted_out else None,
        "do_not_call": bool(row.do_not_call),
        "created_at": now,
        "updated_at": now,
    }


def _changes(row: ParsedRow, current: Any, now: datetime) -> dict[str, Any]:
    """What an `update` row changes on an existing contact: its name, the columns the file
    has (an empty tags or notes cell clears them), and consent where the cell says."""
    changes: dict[str, Any] = {"name": row.name, "updated_at": now}
    for name in ("tags", "notes", "custom_fields"):
        if name in row.present:
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


# PostgreSQL: the whole batch in one INSERT … SELECT FROM unnest(arrays), one parameter per
# column: one statement (so the statement-level counter triggers run once per batch, not
# once per row as an executemany would make them) and no per-row round trip.
_UNNEST_COLUMNS = (
    ("id", "varchar"),
    ("organization_id", "varchar"),
    ("phone_number", "varchar"),
    ("name", "varchar"),
    ("tags", "jsonb"),
    ("notes", "text"),
    ("custom_fields", "jsonb"),
    ("marketing_opt_out_at", "timestamptz"),
    ("marketing_opt_out_source", "varchar"),
    ("consent_changed_at", "timestamptz"),
    ("do_not_call", "boolean"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
)
_UNNEST_INSERT = text(
    "INSERT INTO contacts ("  # noqa: S608 (constant column names and types only)
    + ", ".join(name for name, _ in _UNNEST_COLUMNS)
    + ") SELECT * FROM unnest("
    + ", ".join(f"CAST(:{name} AS {kind}[])" for name, kind in _UNNEST_COLUMNS)
    + ")"
)
_JSON_COLUMNS = ("tags", "custom_fields")


async def _insert_contacts(session: AsyncSession, rows: list[dict[str, Any]]) -> None:
    if session.get_bind().dialect.name != "postgresql":
        await session.execute(insert(CONTACTS), rows)
        return
    params: dict[str, list[Any]] = {}
    for name, _ in _UNNEST_COLUMNS:
        if name in _JSON_COLUMNS:
            params[name] = [
                None if row[name] is None else dumps(row[name]).decode() for row in rows
            ]
        else:
            params[name] = [row[name] for row in rows]
    await session.execute(_UNNEST_INSERT, params)


async def write_batch(
    session: AsyncSession, job: ContactImport, batch: Batch, start_offset: int
) -> Counts | None:
    """The batch's contacts, refused rows and progress, in the session's transaction; None
    when another run committed this batch first (the caller rolls back)."""
    now = utcnow()
    counts = Counts()
    parsed = [row for row in batch.rows if isinstance(row, ParsedRow)]
    refused = [row for row in batch.rows if isinstance(row, RowRefused)]
    existing = await _existing(
        session, job.organization_id, list({row.phone_number for row in parsed})
    )
    inserts: dict[str, dict[str, Any]] = {}
    updates: dict[str, dict[str, Any]] = {}
    update_on_duplicate = job.on_duplicate == "update"
    for row in parsed:
        pending = inserts.get(row.phone_number)
        current = existing.get(row.phone_number)
        if pending is None and current is None:
            inserts[row.phone_number] = _contact_values(row, job.organization_id, now)
            counts.created += 1
        elif not update_on_duplicate:
            counts.skipped += 1
        elif pending is not None:
            # The same number earlier in this batch: this row's values replace its.
            values = _contact_values(row, job.organization_id, now)
            values["id"] = pending["id"]
            inserts[row.phone_number] = values
            counts.updated += 1
        else:
            assert current is not None
            changes = updates.setdefault(current.id, {})
            changes.update(_changes(row, current, now))
            counts.updated += 1
    if inserts:
        await _insert_contacts(session, list(inserts.values()))
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


async def read_batch(reader: FileReader, first_row: int) -> Batch:
    """A batch read off the event loop (parsing is CPU work)."""
    return await asyncio.to_thread(reader.batch, first_row)
