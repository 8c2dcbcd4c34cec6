"""Open WebUI's background tasks, answered by the model alone.

For every chat message Open WebUI also asks the model for a title, tags, follow-up questions and
search queries: non-streamed requests with one user message built from its task templates, each
starting ``### Task:`` and ending with the chat so far in a ``<chat_history>…</chat_history>``
block (``USER: …`` / ``ASSISTANT: …`` lines). With ``ENABLE_FORWARD_USER_INFO_HEADERS`` they
carry the chat's ``X-OpenWebUI-Chat-Id`` too. They are not turns of the conversation: they are
answered by the model alone (no tools, no workspace prompt, nothing stored), never in the chat's
session and never holding its lock, so the user's own message is never refused as busy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from clawlet.events import Event, RunFailed, RunFinished, TextDelta
from clawlet.llm.demo_names import TASK_PREFIX
from clawlet.llm.sampling import NO_SAMPLING, Sampling

if TYPE_CHECKING:
    from clawlet.engine.agent import AgentEngine

HISTORY_OPEN = "<chat_history>"
HISTORY_CLOSE = "</chat_history>"


def is_task_prompt(text: str) -> bool:
    """Whether a request's only (user) message is one of Open WebUI's task prompts."""
    body = text.lstrip()
    if not body.startswith(TASK_PREFIX):
        return False
    opened = body.find(HISTORY_OPEN)
    return opened >= 0 and body.find(HISTORY_CLOSE, opened) > opened


async def task_events(
    engine: AgentEngine, prompt: str, sampling: Sampling = NO_SAMPLING
) -> AsyncIterator[Event | None]:
    """The model's answer to ``prompt`` as run events, ending with ``RunFinished`` (or
    ``RunFailed``), with no session: the same events a chat turn's run yields."""
    content = ""
    try:
        async for event in engine.answer_alone(prompt, sampling):
            if isinstance(event, TextDelta):
                content += event.text
            yield event
    except Exception as exc:  # the model's failure is the request's error, as for a turn
        yield RunFailed(f"{type(exc).__name__}: {exc}", "")
        return
    yield RunFinished(content, "")
