"""The task state machine: the seed's six statuses, its transition table, and list order.

::

    pending ──→ running ──→ completed ──→ running   (a follow-up message resumes the task)
      │            ├──→ failed ──→ running           (retry)
      │            ├──→ waiting ──→ running / cancelled
      │            └──→ cancelled
      └──→ cancelled                                 (cancelled is final)
"""

from __future__ import annotations

from typing import Literal, get_args

TaskStatus = Literal["pending", "running", "completed", "failed", "waiting", "cancelled"]
STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)

VALID_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    "pending": frozenset({"running", "cancelled"}),
    "running": frozenset({"completed", "failed", "waiting", "cancelled"}),
    "completed": frozenset({"running"}),  # a follow-up message
    "failed": frozenset({"running"}),  # a retry
    "waiting": frozenset({"running", "cancelled"}),
    "cancelled": frozenset(),  # final
}

#: List order: running first, then waiting, pending, completed, failed, cancelled.
STATUS_PRIORITY: dict[TaskStatus, int] = {
    "running": 0,
    "waiting": 1,
    "pending": 2,
    "completed": 3,
    "failed": 4,
    "cancelled": 5,
}

#: Statuses that set ``completedAt`` (a task leaving them for ``running`` clears it).
FINISHED: frozenset[TaskStatus] = frozenset({"completed", "failed", "cancelled"})


class InvalidTransition(Exception):
    """A status change the transition table does not allow; nothing was changed."""

    def __init__(self, task_id: str, current: str, target: str) -> None:
        allowed = sorted(VALID_TRANSITIONS.get(current, frozenset()))  # type: ignore[call-overload]
        hint = f"allowed from {current!r}: {', '.join(allowed)}" if allowed else f"{current!r} is final"
        super().__init__(f"task {task_id} cannot go from {current!r} to {target!r} ({hint})")
        self.task_id = task_id
        self.current = current
        self.target = target


def sources_of(target: TaskStatus) -> frozenset[TaskStatus]:
    """Every status from which ``target`` may be entered."""
    return frozenset(status for status, targets in VALID_TRANSITIONS.items() if target in targets)


def parse_status(value: str) -> TaskStatus:
    if value not in STATUSES:
        raise ValueError(f"unknown status {value!r} (one of: {', '.join(STATUSES)})")
    return value
