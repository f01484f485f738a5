"""Small PDFs made in the tests: with text, scanned-like (no text layer), encrypted, corrupt."""

from __future__ import annotations

from pathlib import Path

from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas


def text_pdf(path: Path, pages: list[str]) -> Path:
    pdf = canvas.Canvas(str(path), pagesize=A4)
    for text in pages:
        for row, line in enumerate(text.splitlines()):
            pdf.drawString(72, 770 - 14 * row, line)
        pdf.showPage()
    pdf.save()
    return path


def image_only_pdf(path: Path) -> Path:
    """Pages that hold only drawn shapes: what a scan without OCR looks like to a text extractor."""
    pdf = canvas.Canvas(str(path), pagesize=A4)
    for _ in range(2):
        pdf.rect(72, 72, 300, 500, fill=1)
        pdf.showPage()
    pdf.save()
    return path


def encrypted_pdf(path: Path, source: Path) -> Path:
    writer = PdfWriter(clone_from=PdfReader(str(source)))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as f:
        writer.write(f)
    return path


def raw_pdf(path: Path, objects: list[bytes]) -> Path:
    """A PDF written byte by byte: `objects[i]` is object i + 1, object 1 the catalog; xref and trailer are exact."""
    out, offsets = bytearray(b"%PDF-1.7\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def one_page_objects(text: str, page_extra: bytes = b"") -> list[bytes]:
    """Catalog, page tree, one page (with `page_extra` in its dictionary), its content stream and font."""
    stream = b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET"
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> " + page_extra + b">>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
