"""Finding the reply to an inbox message in an OpenClaw session's ``chat.history``.

The gateway's ``chat`` events do not always carry the reply to the message the inbox sent: a
message sent while the session is busy gets an empty ``final`` at once and is answered by a run of
its own (another ``runId``); a turn cut short by a gateway restart is replayed after it under a new
run, behind an internal ``[System] Your previous turn was interrupted…`` user message. The
transcript has the reply either way, so :func:`reply_after` reads it from there.

The message is found by the idempotency key the inbox sent it with (OpenClaw stores the user
message with ``idempotencyKey: "<key>:user"``), or, for a gateway that keeps no keys, as the last
user message with the same text (content and position). Its reply is the last finished assistant
message with text before the next user message; internal user messages (``provenance.kind``
``internal_system``, OpenClaw's restart recovery) do not end it.
"""

from __future__ import annotations

from dataclasses import dataclass

from clawlet.gateway.answers import ChatHistory, HistoryMessage
from clawlet.gateway.protocol import message_text

#: ``stopReason`` of assistant messages that are not a finished reply (a tool call in between, a
#: turn cut short).
UNFINISHED_STOP_REASONS = frozenset({"toolUse", "tool_use", "tool_calls", "aborted", "error"})


@dataclass(frozen=True)
class HistoryReply:
    """An assistant reply found in the transcript: its OpenClaw message id (when it has one) and text."""

    message_id: str | None
    text: str


@dataclass(frozen=True)
class Reconciled:
    """What the transcript says about one message: whether it is there, and its reply if any."""

    seen: bool
    reply: HistoryReply | None


def _is_user(message: HistoryMessage) -> bool:
    return message.get("role") == "user"


def _is_internal(message: HistoryMessage) -> bool:
    return message.get("provenance", {}).get("kind", "").startswith("internal")


def _find_message(messages: list[HistoryMessage], idempotency_key: str, content: str) -> int | None:
    key = f"{idempotency_key}:user"
    for index, message in enumerate(messages):
        keys = (message.get("idempotencyKey"), message.get("__openclaw", {}).get("idempotencyKey"))
        if _is_user(message) and key in keys:
            return index
    wanted = content.strip()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if _is_user(message) and not _is_internal(message) and message_text(message).strip() == wanted:
            return index
    return None


def reply_after(history: ChatHistory, idempotency_key: str, content: str) -> Reconciled:
    """Look up the message sent with ``idempotency_key`` (text ``content``) in a ``chat.history``
    answer and the reply that follows it."""
    messages = history["messages"]
    start = _find_message(messages, idempotency_key, content)
    if start is None:
        return Reconciled(False, None)
    reply: HistoryReply | None = None
    for message in messages[start + 1 :]:
        if _is_user(message) and not _is_internal(message):
            break
        if message.get("role") != "assistant" or message.get("stopReason") in UNFINISHED_STOP_REASONS:
            continue
        text = message_text(message)
        if text.strip():
            reply = HistoryReply(message.get("__openclaw", {}).get("id"), text)
    return Reconciled(True, reply)
