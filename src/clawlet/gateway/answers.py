"""The answers clawlet's gateway client gets to ``chat.send``, ``chat.abort`` and ``chat.history``,
parsed into typed values.

What a gateway sends is read leniently (real OpenClaw adds fields, older versions leave some out),
so each parser keeps the fields the client reads when they have the right type, fills in what
the protocol implies when one is missing, and drops the rest: callers read typed fields and never
a shape they did not check. ``chat.send`` and ``chat.abort`` answer with :mod:`clawlet.gateway.payloads`'
result types (what clawlet's own server sends); a ``chat.history`` message keeps the OpenClaw
fields the inbox's reconciliation needs (:mod:`clawlet.inbox.reconcile`).
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict, get_args

from clawlet.gateway.payloads import ChatAbortResult, ChatSendResult, ChatSendStatus

log = logging.getLogger(__name__)

SEND_STATUSES: frozenset[str] = frozenset(get_args(ChatSendStatus))


class MessageMeta(TypedDict, total=False):
    """OpenClaw's ``__openclaw`` block of a transcript message."""

    id: str
    idempotencyKey: str


class Provenance(TypedDict, total=False):
    """Where a user message came from (``internal_system``: OpenClaw's restart recovery)."""

    kind: str


HistoryMessage = TypedDict(
    "HistoryMessage",
    {
        "role": str,
        "content": str | list[Any],
        "text": str,
        "stopReason": str,
        "idempotencyKey": str,
        "provenance": Provenance,
        "__openclaw": MessageMeta,
    },
    total=False,
)
"""One ``chat.history`` message as received: what the client reads of it (``content`` as sent, for
:func:`~clawlet.gateway.protocol.message_text`)."""


class ChatHistory(TypedDict):
    """A ``chat.history`` answer: the session's messages, oldest first."""

    messages: list[HistoryMessage]


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def chat_send_result(payload: Any, idempotency_key: str) -> ChatSendResult:
    """A ``chat.send`` ack. The run id is the ack's ``runId``, else the idempotency key (what
    OpenClaw uses); an ack without a status (or one this client does not know, logged) is read as
    ``started``."""
    ack = payload if isinstance(payload, dict) else {}
    run_id = _str(ack.get("runId")) or idempotency_key
    status = ack.get("status")
    if status is not None and status not in SEND_STATUSES:
        log.info("chat.send for %s answered an unknown status %r", idempotency_key, status)
    for known in get_args(ChatSendStatus):
        if status == known:
            return {"runId": run_id, "status": known}
    return {"runId": run_id, "status": "started"}


def chat_abort_result(payload: Any) -> ChatAbortResult:
    """A ``chat.abort`` answer: whether a run was aborted, and which."""
    answer = payload if isinstance(payload, dict) else {}
    run_ids = answer.get("runIds")
    ids = [run_id for run_id in run_ids if isinstance(run_id, str)] if isinstance(run_ids, list) else []
    return {"ok": True, "aborted": answer.get("aborted") is True, "runIds": ids}


def _meta(value: Any) -> MessageMeta:
    meta: MessageMeta = {}
    if not isinstance(value, dict):
        return meta
    if (message_id := _str(value.get("id"))) is not None:
        meta["id"] = message_id
    if (key := _str(value.get("idempotencyKey"))) is not None:
        meta["idempotencyKey"] = key
    return meta


def history_message(raw: dict[str, Any]) -> HistoryMessage:
    """The fields of one transcript message the client reads, those of the right type."""
    message: HistoryMessage = {}
    if (role := _str(raw.get("role"))) is not None:
        message["role"] = role
    content = raw.get("content")
    if isinstance(content, str | list):
        message["content"] = content
    if (text := _str(raw.get("text"))) is not None:
        message["text"] = text
    if (stop_reason := _str(raw.get("stopReason"))) is not None:
        message["stopReason"] = stop_reason
    if (key := _str(raw.get("idempotencyKey"))) is not None:
        message["idempotencyKey"] = key
    provenance = raw.get("provenance")
    if isinstance(provenance, dict):
        message["provenance"] = {"kind": kind} if (kind := _str(provenance.get("kind"))) else {}
    if "__openclaw" in raw:
        message["__openclaw"] = _meta(raw["__openclaw"])
    return message


def chat_history(payload: Any) -> ChatHistory:
    """A ``chat.history`` answer; entries of ``messages`` that are not objects are skipped."""
    answer = payload if isinstance(payload, dict) else {}
    raw = answer.get("messages")
    messages = [history_message(m) for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    return {"messages": messages}
