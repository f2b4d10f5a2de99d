"""What an upload is: its claimed type (the extension), whether its bytes agree, and its name
made safe for storage keys and `Content-Disposition`."""

from __future__ import annotations

import codecs
import re
import struct
import unicodedata
import zipfile
from dataclasses import dataclass
from enum import StrEnum
from typing import IO
from urllib.parse import quote

from app.kit.errors import InvalidInput

UNSUPPORTED_TYPE_MESSAGE = "Unsupported file type. Please upload a PDF, DOCX or TXT file."
MAX_FILE_NAME_LENGTH = 255
# A PDF header may follow some junk; readers look for it in the first kilobyte.
PDF_HEADER_WINDOW = 1024
DOCX_MAIN_PART = "word/document.xml"
_UNSAFE_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


class DocumentType(StrEnum):
    PDF = "pdf"
    DOCX = "docx"
    TXT = "txt"

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self]


CONTENT_TYPES = {
    DocumentType.PDF: "application/pdf",
    DocumentType.DOCX: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    DocumentType.TXT: "text/plain",
}


class UnsupportedFile(InvalidInput):
    """The extension is not one we take, or the bytes are not what the extension claims."""

    def __init__(self, reason: str | None = None) -> None:
        message = UNSUPPORTED_TYPE_MESSAGE if reason is None else f"{reason}. "
        if reason is not None:
            message += "Please upload a PDF, DOCX or TXT file."
        super().__init__(message, field="file")


def _visible(name: str) -> str:
    """Without control characters, nor the invisible ones that change how a name reads: bidi
    overrides and isolates (`invoice\u202efdp.txt` shows as "invoicetxt.pdf"), zero-width
    spaces and joiners, line and paragraph separators (Unicode categories Cc, Cf, Zl, Zp)."""
    name = _CONTROL_CHARACTERS.sub("", name)
    if name.isascii():
        return name
    return "".join(ch for ch in name if unicodedata.category(ch) not in _INVISIBLE_CATEGORIES)


def display_name(raw: str) -> str:
    """The caller's file name as we keep and show it: no folders, no control or invisible
    formatting characters, NFC-normalised, at most 255 characters (the extension kept)."""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = _visible(unicodedata.normalize("NFC", name)).strip().strip(".")
    if len(name) > MAX_FILE_NAME_LENGTH:
        stem, dot, extension = name.rpartition(".")
        keep = MAX_FILE_NAME_LENGTH - len(extension) - 1
        name = f"{stem[:keep]}.{extension}" if dot and keep > 0 else name[:MAX_FILE_NAME_LENGTH]
    return name


def claimed_type(file_name: str) -> DocumentType:
    """The type the extension claims, or UnsupportedFile."""
    _stem, dot, extension = file_name.rpartition(".")
    if not dot:
        raise UnsupportedFile()
    try:
        return DocumentType(extension.lower())
    except ValueError:
        raise UnsupportedFile() from None


def storage_name(file_name: str, document_type: DocumentType) -> str:
    """An ASCII, key-safe form of the name (accents folded, anything else replaced)."""
    folded = unicodedata.normalize("NFKD", file_name).encode("ascii", "ignore").decode()
    stem = folded.rpartition(".")[0] or folded
    safe = _UNSAFE_KEY_CHARACTERS.sub("_", stem).strip("._-")[:100] or "document"
    return f"{safe}.{document_type.value}"


def content_disposition(file_name: str, document_type: DocumentType) -> str:
    """`attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266, 5987)."""
    fallback = storage_name(file_name, document_type)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(file_name, safe='')}"


@dataclass(frozen=True, slots=True)
class ZipLimits:
    max_entries: int
    max_uncompressed_bytes: int


# End of central directory: its signature and fixed size (APPNOTE 4.3.16), the comment after
# it (at most 65,535 bytes), and the ZIP64 locator that may precede it (4.3.15, 20 bytes).
_EOCD = struct.Struct("<4sHHHHIIH")
_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")
_ZIP64_EOCD_SIGNATURE = b"PK\x06\x06"
_MAX_COMMENT = 0xFFFF


def declared_zip_entries(source: IO[bytes]) -> int | None:
    """How many entries the archive's end-of-central-directory record declares (ZIP64's when
    there is one), read from the last 64 KiB alone; None when there is no such record.

    Parsing the central directory costs time and memory per entry (a 23 MiB file can list
    half a million): this number is judged first, the directory only parsed when it passes.
    """
    size = source.seek(0, 2)
    window = min(size, _EOCD.size + _MAX_COMMENT + _ZIP64_LOCATOR.size)
    source.seek(size - window)
    tail = source.read(window)
    # The last signature wins, as `zipfile` reads it (a comment may hold the bytes too).
    at = tail.rfind(_EOCD_SIGNATURE, 0, len(tail) - _EOCD.size + 4)
    if at < 0:
        return None
    record = _EOCD.unpack_from(tail, at)
    entries: int = max(record[3], record[4])
    locator_at = at - _ZIP64_LOCATOR.size
    if locator_at >= 0 and tail[locator_at : locator_at + 4] == _ZIP64_LOCATOR_SIGNATURE:
        zip64_offset = _ZIP64_LOCATOR.unpack_from(tail, locator_at)[2]
        if zip64_offset + _ZIP64_EOCD.size <= size:
            source.seek(zip64_offset)
            raw = source.read(_ZIP64_EOCD.size)
            if raw[:4] == _ZIP64_EOCD_SIGNATURE:  # it holds the counts the classic one cannot
                zip64 = _ZIP64_EOCD.unpack(raw)
                entries = max(zip64[6], zip64[7])
    return entries


def check_docx_container(source: IO[bytes], limits: ZipLimits) -> None:
    """A zip holding `word/document.xml`, within the entry and expanded-size limits.

    The entry count the archive declares is judged before its directory is parsed; the sizes
    are the ones it declares, and `zipfile` never inflates an entry past its declared size, so
    the extraction is bounded by the same numbers. CPU-bound on a large directory: callers on
    an event loop run it in a thread.
    """
    declared = declared_zip_entries(source)
    if declared is not None and declared > limits.max_entries:
        raise InvalidInput(
            f"The DOCX archive holds more than {limits.max_entries} entries", field="file"
        )
    source.seek(0)
    try:
        with zipfile.ZipFile(source) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise UnsupportedFile("The file is not a valid DOCX document") from exc
    if len(entries) > limits.max_entries:
        raise InvalidInput(
            f"The DOCX archive holds more than {limits.max_entries} entries", field="file"
        )
    expanded = sum(entry.file_size for entry in entries)
    if expanded > limits.max_uncompressed_bytes:
        raise InvalidInput(
            "The DOCX archive expands to more than "
            f"{limits.max_uncompressed_bytes // (1024 * 1024)} MiB",
            field="file",
        )
    if DOCX_MAIN_PART not in {entry.filename for entry in entries}:
        raise UnsupportedFile("The file is not a valid DOCX document")


class ContentSniffer:
    """Judges the bytes of an upload as they stream in, against the claimed type.

    PDF: the `%PDF-` header within the first kilobyte. TXT: valid UTF-8 without NUL bytes,
    decoded incrementally so nothing is held. DOCX: judged once whole (the zip directory is at
    the end), by `check_docx_container`.
    """

    def __init__(self, document_type: DocumentType) -> None:
        self.document_type = document_type
        self._head = b""
        self._decoder = (
            codecs.getincrementaldecoder("utf-8-sig")(errors="strict")
            if document_type is DocumentType.TXT
            else None
        )

    def feed(self, chunk: bytes) -> None:
        if len(self._head) < PDF_HEADER_WINDOW:
            self._head += chunk[: PDF_HEADER_WINDOW - len(self._head)]
        if self._decoder is not None:
            self._check_text(chunk, final=False)

    def _check_text(self, chunk: bytes, *, final: bool) -> None:
        if self._decoder is None:
            return
        try:
            text = self._decoder.decode(chunk, final)
        except UnicodeDecodeError:
            raise UnsupportedFile("The file content does not match its .txt extension") from None
        if "\x00" in text:
            raise UnsupportedFile("The file content does not match its .txt extension")

    def finish(self, size: int) -> None:
        if size == 0:
            raise InvalidInput("The file is empty", field="file")
        if self._decoder is not None:
            self._check_text(b"", final=True)
        if self.document_type is DocumentType.PDF and b"%PDF-" not in self._head:
            raise UnsupportedFile("The file content does not match its .pdf extension")
        if self.document_type is DocumentType.DOCX and not self._head.startswith(b"PK\x03\x04"):
            raise UnsupportedFile("The file content does not match its .docx extension")
