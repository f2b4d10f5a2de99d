"""JSON via orjson: measured at ~40% more throughput than stdlib json on list responses.

Both directions stay exact and total on any data the service may hold:

- `loads`: orjson reads integers beyond 64 bits as floats; a text with a run of 19 or more
  digits (the only way to write such an integer) is read again with the stdlib, which keeps
  every integer exact.
- `dumps`: orjson refuses values nested deeper than 254 levels and integers beyond 64 bits;
  such values (stored before the input limits existed) are written by the stdlib instead,
  in the same format, so a list or an event holding one never fails.
"""

from __future__ import annotations

import enum
import json
import uuid
from datetime import date, datetime, time
from typing import Any

import orjson

# Each byte mapped to b"0", the ASCII digits to b"1": a run of 19 digits is then a plain
# substring search in C. (The regex `\d{19}` took 15 times as long as orjson's parse of the
# same 1 KB text.) JSON writes numbers with ASCII digits only.
_DIGITS_AS_ONES = bytes(49 if 48 <= byte <= 57 else 48 for byte in range(256))
_NINETEEN_DIGITS = b"1" * 19


def _has_long_digit_run(raw: bytes) -> bool:
    return _NINETEEN_DIGITS in raw.translate(_DIGITS_AS_ONES)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    # Hot: every JSON column of every row read goes through here. A text shorter than 19
    # characters cannot hold a 19-digit run, so most tags and small objects skip the search.
    if isinstance(data, str):
        return loads_text(data)
    raw = data if isinstance(data, bytes) else bytes(data)
    if len(raw) < 19 or not _has_long_digit_run(raw):
        return orjson.loads(raw)
    return _exact_loads(raw)


def loads_text(text: str) -> Any:
    """`loads` of a str: the PostgreSQL driver's codec, called for every JSON value read."""
    if len(text) < 19 or not _has_long_digit_run(text.encode("utf-8", "surrogatepass")):
        return orjson.loads(text)
    return _exact_loads(text)


def _exact_loads(data: bytes | str) -> Any:
    value = orjson.loads(data)  # refuses what is not JSON, as every caller expects
    try:
        return json.loads(data)
    except RecursionError:  # nested past the stdlib's stack: keep orjson's reading
        return value


def _datetime_text(value: datetime | time) -> str:
    # orjson with OPT_UTC_Z: ISO 8601, microseconds only when set, "Z" for UTC.
    return value.isoformat().replace("+00:00", "Z")


def _fallback_default(value: Any) -> Any:
    if isinstance(value, datetime | time):
        return _datetime_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _stdlib_dumps(value: Any) -> str:
    return json.dumps(value, default=_fallback_default, ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        return _stdlib_dumps(value).encode()


def dumps_str(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_UTC_Z).decode()
    except orjson.JSONEncodeError:
        return _stdlib_dumps(value)
