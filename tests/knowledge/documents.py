"""Real documents built in the tests: PDFs (fpdf2), DOCX (python-docx), and hostile ones."""

from __future__ import annotations

import functools
import io
import zipfile
import zlib
from collections.abc import Sequence

import docx
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter


def make_pdf(pages: Sequence[str]) -> bytes:
    """One page per text, in a core font (Latin-1 text only)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def make_docx(paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> bytes:
    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, values in zip(grid.rows, table, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def encrypted_pdf(text: str = "secret plans", password: str = "hunter2") -> bytes:
    reader = PdfReader(io.BytesIO(make_pdf([text])))
    writer = PdfWriter()
    for page in reader.pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password="owner-" + password, algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def raw_pdf(objects: Sequence[bytes]) -> bytes:
    """A PDF from object bodies (object n is objects[n-1]; 1 is the catalog), xref included."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@functools.lru_cache(maxsize=4)
def flate_bomb_pdf(expanded_bytes: int = 200_000_000) -> bytes:
    """One page whose content stream inflates to `expanded_bytes` (it is ~0.1% of that)."""
    compressor = zlib.compressobj(9)
    block = b" " * 1_000_000
    compressed = b"".join(compressor.compress(block) for _ in range(expanded_bytes // len(block)))
    compressed += compressor.flush()
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed)
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            stream + compressed + b"\nendstream",
        ]
    )


def zip_bomb_docx(declared_bytes: int = 64 * 1024**2, entries: int = 1) -> bytes:
    """A DOCX-shaped zip whose document.xml claims to expand to `declared_bytes`.

    The payload really inflates that far (a stream of spaces deflates ~1000:1), so a reader
    that trusted the archive would exhaust memory.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        for index in range(entries - 1):
            archive.writestr(f"word/media/filler{index}.txt", "x")
        with archive.open("word/document.xml", "w", force_zip64=True) as handle:
            block = b" " * (16 * 1024 * 1024)
            remaining = declared_bytes
            while remaining > 0:
                handle.write(block[: min(len(block), remaining)])
                remaining -= len(block)
    return buffer.getvalue()


def many_entries_docx(entries: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
        for index in range(entries):
            archive.writestr(f"customXml/item{index}.xml", "<a/>")
    return buffer.getvalue()
