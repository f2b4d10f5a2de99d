"""Reading an import's CSV: the header checked once, each row validated on its own.

Pure functions over text: app/contact_imports/runner.py feeds them lines of the stored file.
A row is a `ParsedRow` or a `RowRefused` naming why; a header that cannot be used refuses the
whole file (`FileRefused`). Cells are read back from the form the exports write them in
(app/kit/csvcells.py: a `'` before a formula character is dropped) and stored verbatim: every
CSV the service writes escapes them again.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import phonenumbers

from app.contacts.schemas import MAX_CUSTOM_FIELDS_BYTES, MAX_TAG_LENGTH, MAX_TAGS
from app.contacts.service import TAG_SEPARATOR
from app.kit.csvcells import csv_unescape
from app.kit.errors import InvalidInput
from app.kit.jsonutil import dumps
from app.kit.phone import to_e164
from app.kit.validation import display_name

MAX_NOTES_LENGTH = 10_000
MAX_CUSTOM_FIELD_KEY = 100
# A cell longer than this refuses the file: the reader cannot find the next row reliably.
MAX_CELL_CHARACTERS = 64 * 1024
CUSTOM_FIELD_PREFIX = "cf."
REQUIRED = ("name", "phone_number")
OPTIONAL = ("tags", "notes", "custom_fields", "marketing_opt_out", "do_not_call")
# Columns of the contacts export that an import reads past (the round trip).
IGNORED = ("id", "marketing_opt_out_source", "created_at", "updated_at")
TRUE = frozenset({"true", "yes", "y", "1"})
FALSE = frozenset({"false", "no", "n", "0"})

csv.field_size_limit(MAX_CELL_CHARACTERS)


class FileRefused(Exception):
    """The file cannot be imported at all; the message says why."""


@dataclass(frozen=True, slots=True)
class Columns:
    """Where each known column is in a row."""

    count: int
    index: dict[str, int]
    custom: dict[str, int]


@dataclass(slots=True)
class ParsedRow:
    line: int
    phone_number: str
    name: str
    tags: list[str] | None = None
    notes: str | None = None
    custom_fields: dict[str, Any] | None = None
    # None: the column is absent or empty (nothing changes); True/False: set or cleared.
    marketing_opt_out: bool | None = None
    opted_out_at: datetime | None = None
    do_not_call: bool | None = None
    present: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class RowRefused:
    line: int
    reason: str
    phone_number: str | None
    name: str | None


def check_region(region: str | None) -> str | None:
    """An ISO 3166 alpha-2 region libphonenumber knows (upper-cased), or InvalidInput."""
    if region is None or region == "":
        return None
    code = region.strip().upper()
    if code not in phonenumbers.SUPPORTED_REGIONS:
        raise InvalidInput(
            "default_region must be an ISO 3166 alpha-2 country code", field="default_region"
        )
    return code


def parse_header(cells: list[str]) -> Columns:
    names = [cell.strip().lstrip("\ufeff").casefold() for cell in cells]
    if not any(names):
        raise FileRefused("The header row is empty")
    seen: set[str] = set()
    repeated = sorted({name for name in names if name in seen or seen.add(name)})  # type: ignore[func-returns-value]
    if repeated:
        raise FileRefused(f"Duplicate columns: {', '.join(repeated)}")
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise FileRefused(f"Missing required columns: {', '.join(missing)}")
    index: dict[str, int] = {}
    custom: dict[str, int] = {}
    unknown = []
    for position, name in enumerate(names):
        if name in REQUIRED or name in OPTIONAL:
            index[name] = position
        elif name.startswith(CUSTOM_FIELD_PREFIX) and 0 < len(name) - 3 <= MAX_CUSTOM_FIELD_KEY:
            # The key as written (custom field keys are case-sensitive).
            custom[cells[position].strip()[len(CUSTOM_FIELD_PREFIX) :]] = position
        elif name not in IGNORED:
            unknown.append(cells[position][:50])
    if unknown:
        raise FileRefused(
            f"Unknown columns: {', '.join(unknown)} (known: name, phone_number, tags, notes, "
            "custom_fields, marketing_opt_out, do_not_call, cf.KEY)"
        )
    return Columns(len(names), index, custom)


def _flag(text: str, column: str) -> bool | None:
    value = text.strip().casefold()
    if value == "":
        return None
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"{column} must be true or false")


def _opt_out(text: str) -> tuple[bool | None, datetime | None]:
    """`marketing_opt_out`: true/false, or the ISO 8601 time of the opt-out (the export's)."""
    try:
        return _flag(text, "marketing_opt_out"), None
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError("marketing_opt_out must be true, false or an ISO 8601 time") from exc
    return True, (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)


def _tags(text: str) -> list[str]:
    tags = list(dict.fromkeys(tag.strip() for tag in text.split(TAG_SEPARATOR) if tag.strip()))
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    if any(len(tag) > MAX_TAG_LENGTH for tag in tags):
        raise ValueError(f"a tag has at most {MAX_TAG_LENGTH} characters")
    return tags


def _custom_fields(cells: list[str], columns: Columns) -> dict[str, Any] | None:
    found: dict[str, Any] = {}
    position = columns.index.get("custom_fields")
    if position is not None and cells[position].strip():
        try:
            value = orjson.loads(cells[position])
        except orjson.JSONDecodeError as exc:
            raise ValueError("custom_fields must be a JSON object") from exc
        if not isinstance(value, dict):
            raise ValueError("custom_fields must be a JSON object")
        found.update(value)
    for key, position in columns.custom.items():
        if cells[position] != "":
            found[key] = cells[position]
    if not found:
        return None
    if len(dumps(found)) > MAX_CUSTOM_FIELDS_BYTES:
        raise ValueError(f"custom fields take at most {MAX_CUSTOM_FIELDS_BYTES} bytes as JSON")
    return found


def parse_row(
    line: int, raw: list[str], columns: Columns, region: str | None
) -> ParsedRow | RowRefused:
    cells = [csv_unescape(cell) for cell in raw]
    phone_at, name_at = columns.index["phone_number"], columns.index["name"]
    phone_cell = cells[phone_at] if phone_at < len(cells) else ""
    name_cell = cells[name_at] if name_at < len(cells) else ""

    def refused(reason: str) -> RowRefused:
        return RowRefused(line, reason, phone_cell[:100] or None, name_cell[:255] or None)

    if len(cells) != columns.count:
        return refused(f"expected {columns.count} fields, found {len(cells)}")
    if any("\x00" in cell for cell in cells):
        return refused("contains a NUL character")
    try:
        phone = to_e164(phone_cell, region=region)
    except InvalidInput:
        return refused("invalid phone number")
    try:
        name = display_name(name_cell.strip())
    except ValueError as exc:
        return refused(f"name {exc}")
    row = ParsedRow(line, phone, name)
    try:
        position = columns.index.get("tags")
        if position is not None:
            row.tags = _tags(cells[position])
            row.present.add("tags")
        position = columns.index.get("notes")
        if position is not None:
            if len(cells[position]) > MAX_NOTES_LENGTH:
                raise ValueError(f"notes have at most {MAX_NOTES_LENGTH} characters")
            row.notes = cells[position] or None
            row.present.add("notes")
        if "custom_fields" in columns.index or columns.custom:
            row.custom_fields = _custom_fields(cells, columns)
            row.present.add("custom_fields")
        position = columns.index.get("marketing_opt_out")
        if position is not None:
            row.marketing_opt_out, row.opted_out_at = _opt_out(cells[position])
        position = columns.index.get("do_not_call")
        if position is not None:
            row.do_not_call = _flag(cells[position], "do_not_call")
    except ValueError as exc:
        return refused(str(exc))
    return row
