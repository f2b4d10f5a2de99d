"""Reading an import's CSV: the header checked once, each row validated on its own.

Pure functions over text: app/contact_imports/runner.py feeds them lines of the stored file.
A row is a `ParsedRow` or a `RowRefused` naming why; a header that cannot be used refuses the
whole file (`FileRefused`). Cells are read back from the form the exports write them in
(app/kit/csvcells.py: a `'` before a formula character is dropped) and stored verbatim: every
CSV the service writes escapes them again.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import phonenumbers

from app.contacts.schemas import MAX_CUSTOM_FIELDS_BYTES, MAX_TAG_LENGTH, MAX_TAGS
from app.contacts.service import TAG_SEPARATOR
from app.core.jsonutil import dumps
from app.kit.csvcells import FORMULA_PREFIXES
from app.kit.errors import InvalidInput
from app.kit.phone import to_e164
from app.kit.validation import MAX_NAME_LENGTH, display_name

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
    tags = [tag.strip() for tag in text.split(TAG_SEPARATOR)]
    if "" in tags:
        tags = [tag for tag in tags if tag]
    if len(set(tags)) != len(tags):
        tags = list(dict.fromkeys(tags))
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


_FORMULA_FIRST = frozenset(FORMULA_PREFIXES)
# JSON takes at most this many bytes per character of a string (a control character's
# \uXXXX), so custom fields whose text is this short cannot be over the limit.
_JSON_BYTES_PER_CHARACTER = 6


class RowParser:
    """Validates the rows of one file: the column positions and the optional columns are
    looked up once, and a row costs a few string operations and one object (the import's
    hot loop: app/contact_imports/runner.py)."""

    def __init__(self, columns: Columns, region: str | None) -> None:
        self.columns = columns
        self.count = columns.count
        self.region = region
        self.phone_at = columns.index["phone_number"]
        self.name_at = columns.index["name"]
        self.tags_at = columns.index.get("tags")
        self.notes_at = columns.index.get("notes")
        self.opt_out_at = columns.index.get("marketing_opt_out")
        self.do_not_call_at = columns.index.get("do_not_call")
        self.has_custom = "custom_fields" in columns.index or bool(columns.custom)
        self.custom_json_at = columns.index.get("custom_fields")
        self.custom = tuple(columns.custom.items())
        # Characters of the JSON object the `cf.` columns make, less their values': braces,
        # and each key with its quotes, colon and comma (at most).
        self.custom_size = 2 + sum(len(key) + 6 for key in columns.custom)
        # What an `update` row changes besides the name and consent (runner.py).
        self.present = frozenset(
            name
            for name, there in (
                ("tags", self.tags_at is not None),
                ("notes", self.notes_at is not None),
                ("custom_fields", self.has_custom),
            )
            if there
        )

    def __call__(self, line: int, raw: list[str]) -> ParsedRow | RowRefused:
        # csv_unescape, inlined: a `'` before a formula character goes.
        cells = [
            cell[1:] if cell[:1] == "'" and cell[1:2] in _FORMULA_FIRST else cell for cell in raw
        ]
        count = len(cells)
        phone_cell = cells[self.phone_at] if self.phone_at < count else ""
        name_cell = cells[self.name_at] if self.name_at < count else ""
        if count != self.count:
            return _refused(
                line, f"expected {self.count} fields, found {count}", phone_cell, name_cell
            )
        if "\x00" in "".join(cells):
            return _refused(line, "contains a NUL character", phone_cell, name_cell)
        try:
            phone = to_e164(phone_cell, region=self.region)
        except InvalidInput:
            return _refused(line, "invalid phone number", phone_cell, name_cell)
        try:
            name = contact_name(name_cell)
        except ValueError as exc:
            return _refused(line, f"name {exc}", phone_cell, name_cell)
        row = ParsedRow(line, phone, name)
        try:
            if self.tags_at is not None:
                tags = cells[self.tags_at]
                row.tags = _tags(tags) if tags else []
            if self.notes_at is not None:
                notes = cells[self.notes_at]
                if len(notes) > MAX_NOTES_LENGTH:
                    raise ValueError(f"notes have at most {MAX_NOTES_LENGTH} characters")
                row.notes = notes or None
            if self.has_custom:
                row.custom_fields = self._custom_fields(cells)
            if self.opt_out_at is not None:
                row.marketing_opt_out, row.opted_out_at = _opt_out(cells[self.opt_out_at])
            if self.do_not_call_at is not None:
                row.do_not_call = _flag(cells[self.do_not_call_at], "do_not_call")
        except ValueError as exc:
            return _refused(line, str(exc), phone_cell, name_cell)
        return row

    def _custom_fields(self, cells: list[str]) -> dict[str, Any] | None:
        if self.custom_json_at is not None:
            return _custom_fields(cells, self.columns)
        found = {}
        size = self.custom_size
        for key, position in self.custom:
            value = cells[position]
            if value:
                found[key] = value
                size += len(value)
        if not found:
            return None
        if size * _JSON_BYTES_PER_CHARACTER > MAX_CUSTOM_FIELDS_BYTES and (
            len(dumps(found)) > MAX_CUSTOM_FIELDS_BYTES
        ):
            raise ValueError(f"custom fields take at most {MAX_CUSTOM_FIELDS_BYTES} bytes as JSON")
        return found


def contact_name(cell: str) -> str:
    """`display_name` of the stripped cell (ValueError otherwise), without its regular
    expressions for the usual name: after `strip`, only a byte-order mark at an edge or an
    empty or overlong name can need them."""
    name = cell.strip()
    if 0 < len(name) <= MAX_NAME_LENGTH and name[0] != "\ufeff" != name[-1]:
        return name
    return display_name(name)


def _refused(line: int, reason: str, phone_cell: str, name_cell: str) -> RowRefused:
    return RowRefused(line, reason, phone_cell[:100] or None, name_cell[:255] or None)


def parse_row(
    line: int, raw: list[str], columns: Columns, region: str | None
) -> ParsedRow | RowRefused:
    """One row on its own (a file's rows go through one `RowParser`)."""
    return RowParser(columns, region)(line, raw)
