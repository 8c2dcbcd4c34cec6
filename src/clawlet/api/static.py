"""Serve the built web UIs (``web/`` → ``src/clawlet/web``): the workbench at ``/`` and the
mobile task inbox at ``/inbox``.

``/`` and any unknown path outside ``/api``, ``/v1`` and ``/inbox`` answer ``index.html`` (a
single-page app); ``/inbox`` and its sub-paths answer ``inbox.html``, except files that exist in
``inbox/`` (the inbox's service worker, web app manifest and icons, served uncached so updates
reach installed apps). ``/assets/*`` are Vite's content-hashed files and are cached for a year.
When a UI has not been built, it answers a short plain page that says how to build it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, Response

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
ASSET_CACHE = "public, max-age=31536000, immutable"
RESERVED_PREFIXES = ("api", "v1", "inbox")

NOT_BUILT = """<!doctype html>
<html><head><meta charset="utf-8"><title>clawlet</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; line-height: 1.5">
<h1>clawlet</h1>
<p>The API is running under <code>/api</code>, but the web workbench has not been built.</p>
<p>Build it with <code>./scripts/setup</code>
(or <code>cd web &amp;&amp; npm ci &amp;&amp; npm run build</code>), then reload this page.</p>
</body></html>
"""


def _index(web_dir: Path, page: str = "index.html") -> Response:
    index = web_dir / page
    if not index.is_file():
        return HTMLResponse(NOT_BUILT)
    return FileResponse(index, media_type="text/html", headers={"Cache-Control": "no-cache"})


def _asset(web_dir: Path, relative: str, folder: str = "assets") -> Path | None:
    """The file under ``web_dir/folder`` for ``relative``, or None (never outside the directory)."""
    root = (web_dir / folder).resolve()
    candidate = (root / relative).resolve()
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def install_static(app: FastAPI, web_dir: Path = WEB_DIR) -> None:
    """Add the UI routes; call it after the API routers so they keep precedence."""
    router = APIRouter(include_in_schema=False)

    @router.get("/assets/{relative:path}")
    def asset(relative: str) -> Response:
        path = _asset(web_dir, relative)
        if path is None:
            raise HTTPException(status_code=404, detail="asset not found")
        return FileResponse(path, headers={"Cache-Control": ASSET_CACHE})

    @router.get("/")
    def index() -> Response:
        return _index(web_dir)

    @router.get("/inbox")
    def inbox() -> Response:
        return _index(web_dir, "inbox.html")

    @router.get("/inbox/{rest:path}")
    def inbox_page(rest: str) -> Response:
        path = _asset(web_dir, rest, "inbox") if rest else None
        if path is not None:
            return FileResponse(path, headers={"Cache-Control": "no-cache"})
        return _index(web_dir, "inbox.html")

    @router.get("/{rest:path}")
    def spa(rest: str) -> Response:
        if rest.split("/", 1)[0] in RESERVED_PREFIXES:
            raise HTTPException(status_code=404, detail="not found")
        return _index(web_dir)

    app.include_router(router)
