"""Conversation compression: summarise the first half of a session and archive it.

The cut takes the first 50% of the stored messages (at least 4) and then extends to the end of
that turn, so an assistant segment is never separated from its turn (tool calls and their results
live inside one segment and are never split).
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

from clawlet.config import Settings
from clawlet.llm.demo import SUMMARY_REQUEST_MARKER
from clawlet.llm.providers import build_chat_model
from clawlet.sessions.store import StoredMessage

MIN_MESSAGES = 4
MAX_SUMMARY_CHARS = 500
SUMMARY_PROMPT = (
    f"{SUMMARY_REQUEST_MARKER} in at most {MAX_SUMMARY_CHARS} characters, in the language of the "
    "conversation (中文对话用中文摘要). Keep facts, decisions, names, numbers and open questions. "
    "Reply with the summary only."
)


class NotEnoughMessages(ValueError):
    pass


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
    model = build_chat_model(settings, temperature=0.3)
    reply = await model.ainvoke(
        [SystemMessage(SUMMARY_PROMPT), HumanMessage(render_transcript(messages)[:60_000])]
    )
    summary = reply.text.strip()
    if not summary:
        raise ValueError("the model returned an empty summary")
    return summary[:MAX_SUMMARY_CHARS]
