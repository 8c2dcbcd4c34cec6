"""The one PDF reader: the text of a PDF's pages, for uploads (``/process``) and the knowledge base.

pypdf is imported on the first PDF, not with this module, so ``clawlet serve`` does not load it
before a PDF arrives.
"""

from __future__ import annotations

import io
from dataclasses import dataclass


@dataclass(frozen=True)
class PdfText:
    """A PDF's text (its pages' text, stripped, blank pages left out, one blank line apart) and
    how many pages it has."""

    text: str
    pages: int


def read_pdf(data: bytes) -> PdfText:
    """The text of the PDF in ``data``; whatever pypdf raises for a broken one (it raises many kinds
    of error for untrusted input, so callers that take uploads catch ``Exception``)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    pages = [(page.extract_text() or "").strip() for page in reader.pages]
    return PdfText("\n\n".join(page for page in pages if page), len(pages))
