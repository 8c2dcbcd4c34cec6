"""Stored Responses API responses: ``responses/{id}.json`` in the clawlet home.

A record holds the response object ``GET /v1/responses/{id}`` returns (``DELETE`` forgets it) and
the clawlet session (and workspace) it belongs to, which a later request's ``previous_response_id``
continues. It is written when the response starts (status ``in_progress``, so a client can continue
the session at once) and again when the run ends, also when the client left before
(:func:`clawlet.api.openai.responses.record_response`). Writes are atomic and go through the path
guard with the home as root; an id that is not one clawlet makes (``resp_`` and 32 hex digits) is
never turned into a path. Requests with ``store: false`` write nothing. An output item is found by
its id (an ``item_reference`` in a later request's input), which names its response.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypedDict

from clawlet.paths import read_text_inside
from clawlet.storage import atomic_write_json, file_lock

RESPONSE_ID = re.compile(r"^resp_[0-9a-f]{32}$")
ITEM_ID = re.compile(r"^(?:msg|rs|fc)_(?P<response>[0-9a-f]{32})_\d{1,6}$")
"""An output item's id names its response (:func:`clawlet.api.openai.responses_stream.item_id`)."""


class StoredResponse(TypedDict):
    response: dict[str, Any]
    session_id: str
    workspace: str | None


class ResponseStore:
    """The stored responses of one clawlet home (``root``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / "responses"

    def save(self, record: StoredResponse) -> None:
        response_id = record["response"]["id"]
        if not RESPONSE_ID.match(response_id):
            raise ValueError(f"not a response id: {response_id!r}")
        path = self.directory / f"{response_id}.json"
        with file_lock(path):
            atomic_write_json(path, record, root=self.root)

    def load(self, response_id: str) -> StoredResponse | None:
        """The record of ``response_id``, or None when there is none (or it is unreadable)."""
        if not RESPONSE_ID.match(response_id):
            return None
        try:
            data = json.loads(read_text_inside(self.root, self.directory / f"{response_id}.json"))
        except (OSError, ValueError):  # missing, refused by the path guard (UnsafePath), not JSON
            return None
        if not isinstance(data, dict) or not isinstance(data.get("response"), dict):
            return None
        session_id = data.get("session_id")
        workspace = data.get("workspace")
        if not isinstance(session_id, str) or not (workspace is None or isinstance(workspace, str)):
            return None
        return StoredResponse(response=data["response"], session_id=session_id, workspace=workspace)

    def delete(self, response_id: str) -> bool:
        """Forget ``response_id``; False when there was nothing to forget."""
        if not RESPONSE_ID.match(response_id):
            return False
        path = self.directory / f"{response_id}.json"
        with file_lock(path):
            try:
                path.unlink()  # a symlink planted there is removed, never followed
            except FileNotFoundError:
                return False
        return True

    def item(self, item_id: str) -> dict[str, Any] | None:
        """The stored output item ``item_id`` (a message, reasoning or function call item), or None."""
        match = ITEM_ID.match(item_id)
        record = self.load(f"resp_{match['response']}") if match else None
        if record is None:
            return None
        output = record["response"].get("output")
        items = output if isinstance(output, list) else []
        return next((item for item in items if isinstance(item, dict) and item.get("id") == item_id), None)
