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
