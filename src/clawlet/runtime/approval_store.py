"""``ApprovalStore``: what a waiting session waits for, on disk so it survives a restart.

Layout under a workspace's ``sessions/`` directory::

    sessions/checkpoints/t_<session>/...   the paused graph state (LocalCheckpointer, thread = session id)
    sessions/approvals/<session>.json      the pending items, the paused turn's options, decided ids

The record (``approvals/<session>.json``)::

    {"version": 1,
     "pending": null | {"runtime_type", "context": {...}, "title_text": str | null,
                        "approvals": [<pending item>, ...], "paused_at": <unix time>},
     "decided": [{"approval_id", "decision", "decided_at"}, ...]}   # newest last, at most 200

A pending item is :func:`~clawlet.engine.tool_approvals.pending_to_json`'s shape. An id in ``decided``
is never pending again: a decision is recorded before its tool runs, so a crash in the middle can
leave a run that cannot continue, never a tool that runs twice. Writes are atomic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clawlet.engine.context import RunContext, context_from_json, context_to_json
from clawlet.engine.tool_approvals import PausePoint, pending_from_json, pending_to_json
from clawlet.events import Pending
from clawlet.paths import read_text_inside
from clawlet.storage import atomic_write_json, file_lock

CHECKPOINTS_DIR = "checkpoints"
APPROVALS_DIR = "approvals"
MAX_DECIDED = 200
RECORD_VERSION = 1
ASKING = RunContext(approval_mode="ask")
"""A paused turn's context when its record has none (only a turn that could ask pauses)."""


@dataclass
class PausedTurn:
    """A turn waiting for the user: what it waits for and what its continuation needs."""

    approvals: list[Pending]
    context: RunContext
    runtime_type: str = "engine"
    title_text: str | None = None  # the user message to title the session from, once it finishes
    paused_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "runtime_type": self.runtime_type,
            # the user message and its images are in the paused graph's checkpoint
            "context": context_to_json(replace(self.context, images=())),
            "title_text": self.title_text,
            "approvals": [pending_to_json(item) for item in self.approvals],
            "paused_at": self.paused_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PausedTurn:
        return cls(
            approvals=[
                pending_from_json(item) for item in data.get("approvals") or [] if isinstance(item, dict)
            ],
            context=context_from_json(data.get("context"), ASKING),
            runtime_type=str(data.get("runtime_type") or "engine"),
            title_text=data.get("title_text") if isinstance(data.get("title_text"), str) else None,
            paused_at=float(data.get("paused_at") or 0.0),
        )


@dataclass
class ApprovalRecord:
    pending: PausedTurn | None = None
    decided: list[dict[str, Any]] = field(default_factory=list)

    def decided_ids(self) -> set[str]:
        return {str(item.get("approval_id")) for item in self.decided}

    def decision_of(self, approval_id: str) -> str | None:
        """How ``approval_id`` was decided (the newest record), or ``None`` if it was not."""
        for done in reversed(self.decided):
            if done.get("approval_id") == approval_id:
                return str(done.get("decision", ""))
        return None

    def waiting_for(self) -> list[Pending]:
        """The pending items not decided yet."""
        if self.pending is None:
            return []
        done = self.decided_ids()
        return [item for item in self.pending.approvals if item.approval_id not in done]


class ApprovalStore:
    """Pending approvals and paused graph state of the sessions in one ``sessions/`` directory."""

    def __init__(self, sessions_dir: Path, home: Path | None = None) -> None:
        self.checkpoints = sessions_dir / CHECKPOINTS_DIR
        self.records = sessions_dir / APPROVALS_DIR
        self.home = home if home is not None else sessions_dir  # the path guard's root

    def pause_point(self, session_id: str) -> PausePoint:
        return PausePoint(self.checkpoints, session_id)

    def path_for(self, session_id: str) -> Path:
        return self.records / f"{session_id}.json"

    def load(self, session_id: str) -> ApprovalRecord:
        """The session's record; an unreadable one counts as empty (and is left as it is)."""
        try:
            raw = json.loads(read_text_inside(self.home, self.path_for(session_id)))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):  # UnsafePath is a ValueError
            return ApprovalRecord()
        if not isinstance(raw, dict):
            return ApprovalRecord()
        decided = [item for item in raw.get("decided") or [] if isinstance(item, dict)]
        pending_raw = raw.get("pending")
        try:
            pending = PausedTurn.from_json(pending_raw) if isinstance(pending_raw, dict) else None
        except ValueError:
            pending = None
        return ApprovalRecord(pending, decided)

    def _save(self, session_id: str, record: ApprovalRecord) -> None:
        atomic_write_json(
            self.path_for(session_id),
            {
                "version": RECORD_VERSION,
                "pending": record.pending.to_json() if record.pending is not None else None,
                "decided": record.decided[-MAX_DECIDED:],
            },
            root=self.home,
        )

    def waiting_for(self, session_id: str) -> list[Pending]:
        if not self.path_for(session_id).is_file():  # the common case: one stat
            return []
        return self.load(session_id).waiting_for()

    def save_paused(self, session_id: str, turn: PausedTurn) -> None:
        path = self.path_for(session_id)
        with file_lock(path):
            record = self.load(session_id)
            record.pending = turn
            self._save(session_id, record)

    def mark_decided(self, session_id: str, approval_id: str, decision: str) -> ApprovalRecord:
        """Record the decision (before the run continues); returns the updated record."""
        path = self.path_for(session_id)
        with file_lock(path):
            record = self.load(session_id)
            record.decided.append(
                {"approval_id": approval_id, "decision": decision, "decided_at": time.time()}
            )
            self._save(session_id, record)
            return record

    def clear(self, session_id: str, *, decision: str | None = None) -> list[Pending]:
        """Forget the paused turn and its graph state; returns what it was still waiting for (marked
        decided with ``decision`` when given, e.g. ``cancelled``)."""
        path = self.path_for(session_id)
        with file_lock(path):
            record = self.load(session_id)
            left = record.waiting_for()
            if record.pending is not None or path.exists():
                if decision is not None:
                    now = time.time()
                    record.decided += [
                        {"approval_id": item.approval_id, "decision": decision, "decided_at": now}
                        for item in left
                    ]
                record.pending = None
                self._save(session_id, record)
        self._delete_checkpoints(session_id)
        return left

    def holds_state(self, session_id: str) -> bool:
        """Whether the session has a record or a paused graph state (two ``stat`` calls): a turn
        that never paused leaves neither, and then :meth:`clear` has nothing to do."""
        from clawlet.engine.checkpointer import thread_directory  # LangGraph: not at server start

        return self.path_for(session_id).exists() or thread_directory(self.checkpoints, session_id).exists()

    def _delete_checkpoints(self, session_id: str) -> None:
        from clawlet.engine.checkpointer import LocalCheckpointer  # LangGraph: not at server start

        LocalCheckpointer(self.checkpoints).delete_thread(session_id)

    def delete(self, session_id: str) -> None:
        """Remove everything of a deleted session."""
        self._delete_checkpoints(session_id)
        path = self.path_for(session_id)
        with file_lock(path):
            path.unlink(missing_ok=True)
