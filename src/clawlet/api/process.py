"""``PUT /process``: Open WebUI's external document loader contract.

Open WebUI (``EXTERNAL_DOCUMENT_LOADER_URL``) sends every uploaded document here:

* the raw file bytes as the body,
* ``Authorization: Bearer <key>`` (checked by the app's auth middleware when a token is set),
* ``X-Filename: <url-quoted name>``, usually ``<uuid>_<original name>``; older versions send it
  unquoted or not at all,
* ``Content-Type`` only when it knows the type.

The file is saved under ``<home>/uploads/`` (name sanitised: no directories, no traversal, Chinese
kept; an existing file is never overwritten, a ``_2``, ``_3``... suffix is added) with an atomic
write through the path guard (an ``uploads/`` that links out of the home gets 403 ``forbidden_path``),
and the extracted **text** is returned — Open WebUI chunks and embeds ``page_content``::

    {"page_content": "...", "metadata": {"source": "报告.pdf", "path": "uploads/报告.pdf",
                                         "content_type": "application/pdf", "size": 12345}}

Text comes from plain-text and code files (UTF-8, UTF-16 with a BOM, else GB18030 for Chinese
text in GBK), HTML (converted to Markdown), PDF (pypdf) and DOCX (python-docx: paragraphs and
tables). A file with no extractable text (an image, a scanned PDF, unknown binary) gets
``422 {"detail": "No extractable text ..."}`` and is not saved: on that answer Open WebUI falls back
to its own loader. Bodies over ``max_upload_bytes`` get 413 (from ``Content-Length`` before reading
when it is sent, else while reading), an empty body 400. Extraction runs in a worker thread and is
abandoned after :data:`EXTRACT_TIMEOUT_SECONDS`, well within Open WebUI's 30 s timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import mimetypes
import re
import time
import unicodedata
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from clawlet.api.deps import ServicesDep
from clawlet.api.openai.errors import openai_error
from clawlet.paths import UnsafePath, resolve_inside
from clawlet.pdf import read_pdf
from clawlet.storage import atomic_write_bytes, file_lock

log = logging.getLogger(__name__)

router = APIRouter()

UPLOADS_DIR = "uploads"
EXTRACT_TIMEOUT_SECONDS = 20.0
NO_TEXT = "No extractable text"
MAX_NAME_BYTES = 180  # well under the 255-byte limit of common file systems, suffixes included

#: A leading ``<uuid>_`` (Open WebUI's file id) is not part of the original name.
UUID_PREFIX = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}_")
UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]')

HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
NO_TEXT_SUFFIXES = {
    # images, audio, video, archives and office formats we do not read: Open WebUI's own loaders
    # (OCR, transcription, ...) do better with them
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ico", ".heic", ".svgz",
    ".mp3", ".wav", ".m4a", ".ogg", ".flac", ".mp4", ".mov", ".avi", ".mkv", ".webm",
    ".zip", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar", ".tar",
    ".doc", ".xls", ".xlsx", ".ppt", ".pptx", ".odt", ".ods", ".odp", ".epub",
    ".exe", ".dll", ".so", ".bin", ".dylib", ".class", ".jar", ".whl", ".pyc",
}  # fmt: skip
TYPE_SUFFIXES = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "text/html": ".html",
    "text/markdown": ".md",
    "text/plain": ".txt",
    "text/csv": ".csv",
    "application/json": ".json",
}


class NoExtractableText(Exception):
    """The document holds no text we can read (the reason is the message)."""


@dataclass(frozen=True)
class Extracted:
    text: str
    kind: str  # "pdf", "docx", "html" or "text"
    details: dict[str, Any]


# -- file names ----------------------------------------------------------------------------------


def decode_filename_header(raw: str | None) -> str:
    """The name in ``X-Filename``: URL-unquoted; an unquoted UTF-8 name (which arrives as Latin-1
    characters) is repaired."""
    if not raw or not raw.strip():
        return ""
    value = raw.strip()
    if any(ord(char) > 127 for char in value):
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            value = value.encode("latin-1").decode("utf-8")
    return unquote(value, errors="replace")


def original_name(received: str) -> str:
    """The user's file name: the received name without Open WebUI's ``<uuid>_`` prefix and without
    any directories."""
    base = PurePosixPath(received.replace("\\", "/")).name
    return UUID_PREFIX.sub("", base, count=1) or base


def safe_filename(name: str, fallback_suffix: str = "") -> str:
    """A file name that stays inside its directory: no separators, no control or reserved
    characters, no leading dots, at most :data:`MAX_NAME_BYTES` bytes (extension kept)."""
    name = unicodedata.normalize("NFC", original_name(name))
    name = UNSAFE_CHARS.sub("_", name).strip().lstrip(".").strip()
    if not name or set(name) <= {"_", " "}:
        name = f"upload-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}{fallback_suffix}"
    stem, suffix = _split_suffix(name)
    while len((stem + suffix).encode("utf-8")) > MAX_NAME_BYTES and stem:
        stem = stem[:-1]
    return (stem or "upload") + suffix


def _split_suffix(name: str) -> tuple[str, str]:
    path = PurePosixPath(name)
    suffix = path.suffix if 1 < len(path.suffix) <= 16 and path.stem else ""
    return name[: len(name) - len(suffix)], suffix


def save_upload(root: Path, name: str, data: bytes) -> Path:
    """Write ``data`` atomically to ``<root>/uploads/name``, or ``name_2``, ``name_3``... if taken.
    Raises :class:`clawlet.paths.UnsafePath` if ``uploads/`` (or the file) leads out of ``root``."""
    directory = resolve_inside(root, UPLOADS_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    stem, suffix = _split_suffix(name)
    with file_lock(directory):
        candidate = directory / name
        counter = 1
        while candidate.exists() or candidate.is_symlink():
            counter += 1
            candidate = directory / f"{stem}_{counter}{suffix}"
        atomic_write_bytes(candidate, data, root=root)
    return candidate


# -- text extraction -----------------------------------------------------------------------------


def sniff_kind(data: bytes, suffix: str, content_type: str) -> str:
    """``pdf``, ``docx``, ``html``, ``text`` or ``binary``: by extension, then declared type, then
    the content's magic bytes."""
    if suffix == ".pdf" or content_type == "application/pdf":
        return "pdf"
    if suffix == ".docx" or content_type.endswith("wordprocessingml.document"):
        return "docx"
    if suffix in NO_TEXT_SUFFIXES or content_type.startswith(("image/", "audio/", "video/")):
        return "binary"
    if suffix in HTML_SUFFIXES or content_type in {"text/html", "application/xhtml+xml"}:
        return "html"
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if "word/document.xml" in archive.namelist():
                    return "docx"
        except zipfile.BadZipFile:
            pass
        return "binary"
    head = data[:2048].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    return "text"


def decode_text(data: bytes) -> str:
    """Bytes of a text file as text: UTF-8 (BOM or not), UTF-16 with a BOM, else GB18030 (a
    superset of GBK and GB2312). Raises :class:`NoExtractableText` for binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:8192]:
        raise NoExtractableText("the file looks binary")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if _mostly_printable(text):
            return text
    raise NoExtractableText("the file is neither UTF-8 nor GB18030 text")


def _mostly_printable(text: str) -> bool:
    sample = text[:20_000]
    if not sample:
        return True
    control = sum(1 for char in sample if unicodedata.category(char) == "Cc" and char not in "\t\n\r\f")
    return control / len(sample) < 0.01


def extract_pdf(data: bytes) -> Extracted:
    try:
        found = read_pdf(data)
    except Exception as exc:  # untrusted input: pypdf raises many kinds of error
        raise NoExtractableText(f"the PDF could not be read ({exc})") from exc
    return Extracted(found.text, "pdf", {"pages": found.pages})


def extract_docx(data: bytes) -> Extracted:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = [paragraph.text for paragraph in document.paragraphs if paragraph.text.strip()]
        for table in document.tables:
            for row in table.rows:
                cells = [cell.text.strip() for cell in row.cells]
                if any(cells):
                    blocks.append(" | ".join(cells))
    except Exception as exc:  # untrusted input: not a zip, no document part, bad XML...
        raise NoExtractableText(f"the DOCX could not be read ({exc})") from exc
    return Extracted("\n\n".join(blocks), "docx", {"paragraphs": len(blocks)})


def extract_text(data: bytes, suffix: str, content_type: str) -> Extracted:
    """The text of a document; raises :class:`NoExtractableText` when there is none."""
    kind = sniff_kind(data, suffix, content_type)
    if kind == "binary":
        raise NoExtractableText("the file is an image, media or binary file")
    if kind == "pdf":
        extracted = extract_pdf(data)
    elif kind == "docx":
        extracted = extract_docx(data)
    elif kind == "html":
        from clawlet.tools.fetch_url import html_to_markdown

        extracted = Extracted(html_to_markdown(decode_text(data)).strip(), "html", {})
    else:
        extracted = Extracted(decode_text(data), "text", {})
    if not extracted.text.strip():
        raise NoExtractableText(f"the {extracted.kind} holds no text")
    return extracted


# -- the endpoint --------------------------------------------------------------------------------


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading (``Content-Length``)
    or as soon as the stream passes it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge
    return bytes(body)


def declared_type(request: Request) -> str:
    value = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return "" if value in {"", "application/octet-stream", "application/x-www-form-urlencoded"} else value


def no_text(reason: str) -> JSONResponse:
    """The answer on which Open WebUI falls back to its own loader."""
    return JSONResponse({"detail": f"{NO_TEXT}: {reason}"}, status_code=422)


@router.put("/process")
async def process_document(request: Request, services: ServicesDep) -> JSONResponse:
    """Save an uploaded document under ``uploads/`` and return its text for Open WebUI."""
    limit = services.settings.max_upload_bytes
    try:
        data = await read_body(request, limit)
    except BodyTooLarge:
        return openai_error(
            f"the file is larger than the upload limit of {limit} bytes (CLAWLET_MAX_UPLOAD_BYTES)",
            413,
            code="file_too_large",
        )
    if not data:
        return openai_error("no file data: send the file's bytes as the request body", 400, code="empty_body")

    content_type = declared_type(request)
    received = decode_filename_header(request.headers.get("x-filename"))
    source = original_name(received) if received else ""
    suffix = _split_suffix(source)[1].lower() if source else ""
    started = time.perf_counter()
    try:
        extracted = await asyncio.wait_for(
            asyncio.to_thread(extract_text, data, suffix, content_type), EXTRACT_TIMEOUT_SECONDS
        )
    except NoExtractableText as exc:
        log.info("process: no text in %r (%d bytes): %s", source or "(unnamed)", len(data), exc)
        return no_text(str(exc))
    except TimeoutError:
        log.warning("process: extraction of %r timed out", source or "(unnamed)")
        return no_text(f"extraction took longer than {EXTRACT_TIMEOUT_SECONDS:g} s")

    kind_suffix = {"pdf": ".pdf", "docx": ".docx", "html": ".html"}.get(extracted.kind, "")
    fallback_suffix = kind_suffix or TYPE_SUFFIXES.get(content_type, ".txt")
    name = safe_filename(source, fallback_suffix)
    root = services.settings.paths.root
    try:
        saved = await asyncio.to_thread(save_upload, root, name, data)
    except UnsafePath as exc:
        log.warning("process: refused to save %r: %s", name, exc)
        return openai_error(f"the upload could not be saved: {exc}", 403, code="forbidden_path")
    relative = saved.relative_to(root.resolve()).as_posix()
    if not content_type:
        content_type = mimetypes.guess_type(saved.name)[0] or "application/octet-stream"
    log.info(
        "process: saved %s (%d bytes, %d characters of text in %.0f ms)",
        relative,
        len(data),
        len(extracted.text),
        (time.perf_counter() - started) * 1000,
    )
    metadata: dict[str, Any] = {
        "source": source or saved.name,
        "path": relative,
        "content_type": content_type,
        "size": len(data),
        **extracted.details,
    }
    return JSONResponse({"page_content": extracted.text, "metadata": metadata})
