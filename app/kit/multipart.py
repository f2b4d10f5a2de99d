"""One file out of a `multipart/form-data` body, streamed to a spool file under a size limit.

Starlette's form parser has no overall size limit and keeps going whatever arrives. Here the
body is fed to python-multipart's streaming parser as it arrives: the announced
`Content-Length` is judged before anything is read, and the bytes are counted as they come,
so an oversize upload is refused with 413 after at most `max_bytes` (plus the multipart
framing) have been read, never buffered whole. The caller's inspector sees the file name
before the first byte of content (a wrong extension is refused at once) and every chunk after.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import IO, Protocol
from urllib.parse import unquote

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from app.kit.errors import DomainError, InvalidInput, RequestValidationFailed

# Room for the multipart framing and small extra fields around the file's own bytes.
FRAMING_ALLOWANCE = 64 * 1024
# The longest header line of a part (python-multipart's default is 4 KiB): a file name of
# thousands of characters, percent-encoded in `filename*`, still arrives, to be shortened by
# the caller; a longer line is refused by name.
MAX_PART_HEADER_BYTES = FRAMING_ALLOWANCE
MAX_PARTS = 16
SPOOL_IN_MEMORY_BYTES = 1024 * 1024
_FILENAME_STAR = re.compile(rb"filename\*\s*=\s*(?:UTF-8|utf-8)''([^;\s]+)")


class UploadTooLarge(DomainError):
    code = "payload_too_large"
    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"The file is larger than the upload limit of {_readable(limit)}")
        self.limit = limit


def upload_body_limit(max_bytes: int) -> int:
    """The largest body that can carry a file of `max_bytes`: the file plus the framing."""
    return max_bytes + FRAMING_ALLOWANCE


def _readable(size: int) -> str:
    mebibytes = size / (1024 * 1024)
    return f"{mebibytes:g} MiB" if mebibytes >= 1 else f"{size} bytes"


class PartInspector(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self, size: int) -> None: ...


@dataclass
class ReceivedFile:
    """The file part: its name as sent, its size and SHA-256, its bytes (spool at position 0)."""

    filename: str
    content_type: str | None
    size: int
    sha256: str
    file: IO[bytes]

    def close(self) -> None:
        self.file.close()


def _missing_file(field_name: str) -> RequestValidationFailed:
    return RequestValidationFailed(
        [{"loc": ["body", field_name], "msg": "Field required", "type": "missing"}]
    )


def _boundary(content_type: str | None) -> bytes | None:
    if content_type is None:
        return None
    media_type, options = parse_options_header(content_type)
    if media_type != b"multipart/form-data":
        return None
    return options.get(b"boundary") or None


def _file_name(disposition: bytes, options: dict[bytes, bytes]) -> str | None:
    starred = _FILENAME_STAR.search(disposition)
    if starred is not None:
        return unquote(starred.group(1).decode("ascii", "replace"))
    raw = options.get(b"filename")
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


@dataclass
class _Reader:
    field_name: str
    max_bytes: int
    inspect: Callable[[str], PartInspector]
    events: list[tuple[str, bytes]] = field(default_factory=list)
    header_field: bytes = b""
    header_value: bytes = b""
    headers: dict[bytes, bytes] = field(default_factory=dict)
    parts: int = 0
    in_file: bool = False
    file_done: bool = False
    received: ReceivedFile | None = None
    inspector: PartInspector | None = None
    hasher: hashlib._Hash = field(default_factory=hashlib.sha256)

    def handle(self) -> None:
        for kind, data in self.events:
            if kind == "part_begin":
                self.headers = {}
                self.parts += 1
                if self.parts > MAX_PARTS:
                    raise InvalidInput(f"The form has more than {MAX_PARTS} parts")
            elif kind == "header_field":
                self.header_field += data
            elif kind == "header_value":
                self.header_value += data
            elif kind == "header_end":
                self.headers[self.header_field.lower()] = self.header_value
                self.header_field = self.header_value = b""
            elif kind == "headers_finished":
                self._start_part()
            elif kind == "part_data" and self.in_file:
                self._file_data(data)
            elif kind == "part_end" and self.in_file:
                self.in_file = False
                self.file_done = True
        self.events.clear()

    def _start_part(self) -> None:
        disposition = self.headers.get(b"content-disposition", b"")
        _kind, options = parse_options_header(disposition)
        if options.get(b"name", b"").decode("latin-1") != self.field_name:
            return  # another field: its bytes only count towards the body limit
        name = _file_name(disposition, options)
        if name is None:
            raise InvalidInput(f"The `{self.field_name}` field must be a file", field="file")
        if self.received is not None:
            raise InvalidInput("Upload one file per request", field="file")
        self.inspector = self.inspect(name)  # may refuse the name before any content
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES)  # noqa: SIM115
        content_type = self.headers.get(b"content-type")
        self.received = ReceivedFile(
            name, content_type.decode("latin-1") if content_type else None, 0, "", spool
        )
        self.in_file = True

    def _file_data(self, data: bytes) -> None:
        assert self.received is not None
        assert self.inspector is not None
        self.received.size += len(data)
        if self.received.size > self.max_bytes:
            raise UploadTooLarge(self.max_bytes)
        self.inspector.feed(data)
        self.hasher.update(data)
        self.received.file.write(data)


async def receive_file(
    chunks: AsyncIterator[bytes],
    content_type: str | None,
    content_length: str | None,
    *,
    field_name: str,
    max_bytes: int,
    inspect: Callable[[str], PartInspector],
) -> ReceivedFile:
    """The one file of `field_name`, inspected and spooled; the caller closes it.

    Raises UploadTooLarge (413), RequestValidationFailed (422) when there is no such file
    part, InvalidInput (400) for a malformed body, and whatever `inspect` raises.
    """
    boundary = _boundary(content_type)
    if boundary is None:
        raise _missing_file(field_name)
    body_limit = upload_body_limit(max_bytes)
    if content_length is not None and content_length.isdigit() and int(content_length) > body_limit:
        raise UploadTooLarge(max_bytes)
    reader = _Reader(field_name, max_bytes, inspect)
    callbacks = {
        "on_part_begin": lambda: reader.events.append(("part_begin", b"")),
        "on_part_data": lambda d, s, e: reader.events.append(("part_data", d[s:e])),
        "on_part_end": lambda: reader.events.append(("part_end", b"")),
        "on_header_field": lambda d, s, e: reader.events.append(("header_field", d[s:e])),
        "on_header_value": lambda d, s, e: reader.events.append(("header_value", d[s:e])),
        "on_header_end": lambda: reader.events.append(("header_end", b"")),
        "on_headers_finished": lambda: reader.events.append(("headers_finished", b"")),
    }
    parser = MultipartParser(
        boundary,
        callbacks,  # type: ignore[arg-type]
        max_header_size=MAX_PART_HEADER_BYTES,
    )
    received = 0
    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > body_limit:
                raise UploadTooLarge(max_bytes)
            parser.write(chunk)
            reader.handle()
        parser.finalize()
        reader.handle()
    except MultipartParseError as exc:
        _discard(reader)
        if "header size" in str(exc):
            raise InvalidInput(
                f"A part's header line is longer than {MAX_PART_HEADER_BYTES // 1024} KiB"
            ) from exc
        raise InvalidInput("The multipart body is malformed") from exc
    except BaseException:
        _discard(reader)
        raise
    if reader.received is None:
        raise _missing_file(field_name)
    if not reader.file_done:
        _discard(reader)
        raise InvalidInput("The upload ended before the file did", field="file")
    result = reader.received
    try:
        assert reader.inspector is not None
        reader.inspector.finish(result.size)
    except BaseException:
        result.close()
        raise
    result.sha256 = reader.hasher.hexdigest()
    result.file.seek(0)
    return result


def _discard(reader: _Reader) -> None:
    if reader.received is not None:
        reader.received.close()
