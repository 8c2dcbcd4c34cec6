"""Conversation compression: summarise the first half of a session and archive it.

The cut takes the first 50% of the stored messages (at least 4) and then extends to the end of
that turn, so an assistant segment is never separated from its turn (tool calls and their results
live inside one segment and are never split).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from clawlet.config import Settings
from clawlet.llm.demo_names import SUMMARY_REQUEST_MARKER
from clawlet.llm.providers import build_chat_model
from clawlet.sessions.store import StoredMessage, TranscriptStore, archive_and_summarise

log = logging.getLogger(__name__)

MIN_MESSAGES = 4
MAX_SUMMARY_CHARS = 500
SUMMARY_PROMPT = (
    f"{SUMMARY_REQUEST_MARKER} in at most {MAX_SUMMARY_CHARS} characters, in the language of the "
    "conversation (中文对话用中文摘要). Keep facts, decisions, names, numbers and open questions. "
    "Reply with the summary only."
)


class NotEnoughMessages(ValueError):
    pass


class SummaryFailed(RuntimeError):
    """The model gave no usable summary."""


@dataclass(frozen=True)
class Compressed:
    archived_count: int
    remaining_count: int
    summary: str


def compression_cut(messages: list[StoredMessage]) -> int:
    """How many leading messages to archive."""
    total = len(messages)
    if total < MIN_MESSAGES:
        raise NotEnoughMessages(f"compression needs at least {MIN_MESSAGES} messages, found {total}")
    cut = min(total, max(MIN_MESSAGES, total // 2))
    while cut < total and messages[cut]["role"] != "user":
        cut += 1
    return cut


def render_transcript(messages: list[StoredMessage]) -> str:
    lines = []
    for message in messages:
        lines.append(f"{message['role']}: {message['content']}")
        for call in message.get("tool_calls", []):
            lines.append(f"  [tool {call['tool']}] {call['input'][:300]} → {call['output'][:300]}")
    return "\n".join(lines)


async def summarise(settings: Settings, messages: list[StoredMessage]) -> str:
    """The model's summary (temperature 0.3), cut to 500 characters."""
    from langchain_core.messages import HumanMessage, SystemMessage  # not at server start (see clawlet.cli)

    model = build_chat_model(settings, temperature=0.3)
    reply = await model.ainvoke(
        [SystemMessage(SUMMARY_PROMPT), HumanMessage(render_transcript(messages)[:60_000])]
    )
    summary = reply.text.strip()
    if not summary:
        raise ValueError("the model returned an empty summary")
    return summary[:MAX_SUMMARY_CHARS]


class SessionHolder(Protocol):
    """What compression needs of the runtime's ``SessionManager``: keeping turns off a session."""

    def hold(self, session_id: str) -> AbstractContextManager[None]: ...


async def compress_session(
    settings: Settings, transcripts: TranscriptStore, sessions: SessionHolder, session_id: str
) -> Compressed:
    """Summarise and archive the first half of a session, held meanwhile (a turn gets
    ``SessionBusy``). Raises ``SessionNotFound``, :class:`NotEnoughMessages`, :class:`SummaryFailed`,
    ``CompressionConflict`` (the session changed meanwhile) or ``SessionBusy`` (a turn runs)."""
    with sessions.hold(session_id):
        messages = (await asyncio.to_thread(transcripts.load, session_id))["messages"]
        archived = messages[: compression_cut(messages)]
        try:
            summary = await summarise(settings, archived)
        except Exception as exc:
            log.warning("compression summary failed: %s", exc)
            raise SummaryFailed(f"the model could not summarise: {exc}") from exc
        archived_count, remaining = await asyncio.to_thread(
            archive_and_summarise, transcripts, session_id, archived, summary
        )
        return Compressed(archived_count, remaining, summary)
