"""CSV that spreadsheets open safely: cells escaped against formula injection, rows encoded
as RFC 4180 (comma separated, `"` quoted where needed, CRLF line ends). Every CSV the
service writes (campaign ledgers, contacts, import error reports) goes through here."""

from __future__ import annotations

import csv
import io
from datetime import datetime

# A cell starting with one of these is read as a formula by spreadsheet programs.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(text: str | None) -> str:
    """`text` as a cell no spreadsheet evaluates: a leading formula character is escaped
    with `'`, except for a plain E.164 phone number (`+` and digits cannot form a formula)."""
    if not text:
        return ""
    if text.startswith(FORMULA_PREFIXES) and not is_e164(text):
        return "'" + text
    return text


def csv_unescape(text: str) -> str:
    """The inverse of `csv_safe` for a cell read back: `'` before a formula character goes."""
    if len(text) > 1 and text[0] == "'" and text[1:].startswith(FORMULA_PREFIXES):
        return text[1:]
    return text


def is_e164(text: str) -> bool:
    return len(text) > 1 and text[0] == "+" and text[1:].isascii() and text[1:].isdigit()


def csv_timestamp(value: datetime | None) -> str:
    return "" if value is None else value.isoformat().replace("+00:00", "Z")


def encode_rows(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode("utf-8")
