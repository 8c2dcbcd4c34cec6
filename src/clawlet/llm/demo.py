"""The built-in offline ``demo`` model: deterministic, labelled, and able to call tools.

It lets the whole product run with no API key and no network. It reads the last message and:

- ``run: <command>`` → calls ``terminal``        - ``python: <code>`` → calls ``python_repl``
- ``read <path>``   → calls ``read_file``        - ``fetch <url>``    → calls ``fetch_url``
- ``search <query>`` → calls ``search_knowledge_base``, ``remember: <fact>`` → calls ``save_memory``
- ``ask: <question>`` → calls ``ask_user`` (the run waits for the user's answer)
- ``call: <tool> <JSON object>`` → calls any offered tool with those arguments (e.g. cluster mode's
  ``long_term_memory`` or ``remote_mcp``, or a tool the client offered on ``/v1/chat/completions``)
- ``### Task:`` (Open WebUI's background tasks) → the JSON the task asks for (a title from the
  first user line, ``["General"]`` tags, no follow-ups, no search queries)
- with RAG mode on and memory retrieved → answers with what it recalled
- a weather question (``weather`` / ``天气``) → reads ``skills/get_weather/SKILL.md``
- after a tool result → answers from that result; anything else → a labelled echo with hints.
- asked for a ``response_format`` (a call argument, as OpenAI takes it) → its answer as JSON: an
  object built from the schema with the text in its strings (``{"answer": ...}`` for ``json_object``).

It streams token by token and emits tool calls as streaming tool-call chunks, like real providers
(:class:`~clawlet.llm.replying.ReplyingChatModel`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from clawlet.llm.demo_names import (
    DEMO_MODEL_NAME,
    SUMMARY_REQUEST_MARKER,
    TASK_PREFIX,
    TITLE_REQUEST_MARKER,
)
from clawlet.llm.replying import ReplyingChatModel
from clawlet.llm.response_format import example_for_schema

RETRIEVAL_HEADER = "[记忆检索结果] Memory retrieved for this message (from memory/MEMORY.md):"
HINTS = (
    "Try `run: ls`, `python: 1 + 1`, `read workspace/SOUL.md`, `fetch <url>`, `search <query>`, "
    "or ask about the weather (天气)."
)


@dataclass(frozen=True)
class DemoReply:
    text: str
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None


_COMMANDS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (
        re.compile(r"^\s*(?:run|运行)\s*[:：]\s*(.+)$", re.I | re.S),
        "terminal",
        "command",
        "Running `{arg}` in the terminal.",
    ),
    (
        re.compile(r"^\s*(?:python|py)\s*[:：]\s*(.+)$", re.I | re.S),
        "python_repl",
        "code",
        "Running that Python code.",
    ),
    (re.compile(r"^\s*(?:read|读取)\s*[:：]?\s*(\S+)\s*$", re.I), "read_file", "path", "Reading `{arg}`."),
    (re.compile(r"^\s*(?:fetch|抓取)\s*[:：]?\s*(\S+)\s*$", re.I), "fetch_url", "url", "Fetching {arg}."),
    (
        re.compile(r"^\s*(?:remember|记住)\s*[:：]\s*(.+)$", re.I | re.S),
        "save_memory",
        "fact",
        "I'll remember that.",
    ),
    (
        re.compile(r"^\s*(?:ask|问)\s*[:：]\s*(.+)$", re.I | re.S),
        "ask_user",
        "question",
        "I need to ask you first.",
    ),
    (
        re.compile(r"^\s*(?:search|搜索)\s*[:：]?\s*(.+)$", re.I | re.S),
        "search_knowledge_base",
        "query",
        "Searching the knowledge base for “{arg}”.",
    ),
)
_WEATHER = re.compile(r"weather|天气|气温", re.I)
_GENERIC_CALL = re.compile(r"^\s*call\s*[:：]\s*([A-Za-z_][\w-]*)\s*(\{.*\})?\s*$", re.I | re.S)


def _text_of(message: BaseMessage) -> str:
    return message.text if hasattr(message, "text") else str(message.content)


def _title_for(messages: Sequence[BaseMessage]) -> str:
    conversation = _text_of(messages[-1])
    match = re.search(r"^user:\s*(.+)$", conversation, re.M)
    first = match.group(1) if match else conversation
    for pattern, _tool, _arg, _text in _COMMANDS:
        found = pattern.match(first)
        if found:
            first = found.group(1)
            break
    return first.strip().splitlines()[0][:10] if first.strip() else "New chat"


def plan_reply(messages: Sequence[BaseMessage], tool_names: set[str]) -> DemoReply:
    """Decide the demo model's next message from the conversation so far."""
    system = next((m for m in messages if isinstance(m, SystemMessage)), None)
    if system is not None and TITLE_REQUEST_MARKER in _text_of(system):
        return DemoReply(_title_for(messages))
    if system is not None and SUMMARY_REQUEST_MARKER in _text_of(system):
        return DemoReply("[demo summary] " + _text_of(messages[-1])[:480])
    last = messages[-1] if messages else HumanMessage("")
    if isinstance(last, ToolMessage):
        return _answer_from_tool(last)
    text = _text_of(last).strip()
    if text.startswith(TASK_PREFIX):
        return DemoReply(_task_answer(text))
    generic = _GENERIC_CALL.match(text)
    if generic:
        return _generic_call(generic.group(1), generic.group(2) or "{}", tool_names)
    for pattern, tool, arg_name, intro in _COMMANDS:
        match = pattern.match(text)
        if match:
            return _call(tool, {arg_name: match.group(1).strip()}, intro, tool_names)
    recalled = next((_text_of(m) for m in messages[-2:-1] if RETRIEVAL_HEADER in _text_of(m)), None)
    if recalled:
        passages = recalled.split("\n", 1)[1] if "\n" in recalled else ""
        return DemoReply(f"[demo] Here is what I remember that may help:\n\n{passages}")
    if _WEATHER.search(text):
        path = "skills/get_weather/SKILL.md"
        return _call("read_file", {"path": path}, "Let me read the get_weather skill first.", tool_names)
    return DemoReply(f"[demo] I am clawlet's offline demo model, not a real LLM. You said: “{text}”. {HINTS}")


def _task_answer(prompt: str) -> str:
    """The JSON a client's background task asks for (Open WebUI's title, tags, follow-ups,
    search queries), from the first user line of its ``<chat_history>``."""
    task = prompt.split("\n", 2)[1].lower() if prompt.count("\n") >= 2 else prompt.lower()
    history = prompt.split("<chat_history>", 1)[-1]
    first = re.search(r"^USER:\s*(.+)$", history, re.M)
    words = (first.group(1) if first else "New chat").split()
    if "title" in task:
        answer: dict[str, Any] = {"title": " ".join(words[:5])}
    elif "tags" in task:
        answer = {"tags": ["General"]}
    elif "follow-up" in task:
        answer = {"follow_ups": []}
    elif "search queries" in task:
        answer = {"queries": []}
    else:
        answer = {"text": ""}
    return json.dumps(answer, ensure_ascii=False)


def _call(tool: str, args: dict[str, str], intro: str, tool_names: set[str]) -> DemoReply:
    if tool not in tool_names:
        return DemoReply(f"[demo] The `{tool}` tool is not available in this run.")
    return DemoReply(intro.format(arg=next(iter(args.values()))), tool, args)


def _generic_call(tool: str, raw_args: str, tool_names: set[str]) -> DemoReply:
    if tool not in tool_names:
        return DemoReply(f"[demo] The `{tool}` tool is not available in this run.")
    try:
        args = json.loads(raw_args)
    except ValueError as exc:
        return DemoReply(f"[demo] Those arguments are not JSON: {exc}")
    if not isinstance(args, dict):
        return DemoReply("[demo] The arguments must be a JSON object.")
    return DemoReply(f"Calling `{tool}`.", tool, args)


def _answer_from_tool(result: ToolMessage) -> DemoReply:
    name = result.name or "tool"
    output = _text_of(result).strip()
    if result.status == "error":
        return DemoReply(f"[demo] The `{name}` tool reported an error:\n\n```\n{output}\n```")
    if name == "ask_user":
        return DemoReply(f"[demo] You answered: {output}")
    if "get_weather" in output or "wttr.in" in output:
        return DemoReply(
            "[demo] The get_weather skill says to fetch wttr.in for the city and report the "
            "weather. As the offline demo model I cannot look up live weather, but these are "
            f"the skill's steps:\n\n{output}"
        )
    return DemoReply(f"[demo] `{name}` returned:\n\n```\n{output}\n```")


def _bound_name(tool: Any) -> str:
    """The name of a tool given to ``bind_tools``: a ``BaseTool`` or an OpenAI function tool (a
    client's tool, :mod:`clawlet.engine.client_tools`)."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        function = tool.get("function")
        return str(function.get("name", "")) if isinstance(function, dict) else str(tool.get("name", ""))
    return ""


class DemoChatModel(ReplyingChatModel):
    """A deterministic chat model that needs no network (see the module docstring)."""

    bound_tool_names: frozenset[str] = frozenset()
    bound_response_format: dict[str, Any] | None = None

    @property
    def _llm_type(self) -> str:
        return "clawlet-demo"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": DEMO_MODEL_NAME}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = frozenset(name for name in map(_bound_name, tools) if name)
        fmt = kwargs.get("response_format")
        return self.model_copy(update={"bound_tool_names": names, "bound_response_format": fmt})

    def _reply(self, messages: list[BaseMessage], response_format: Any = None) -> DemoReply:
        reply = plan_reply(messages, set(self.bound_tool_names))
        response_format = response_format or self.bound_response_format
        if not isinstance(response_format, dict) or reply.tool_name:
            return reply
        spec = response_format.get("json_schema")
        if response_format.get("type") == "json_schema" and isinstance(spec, dict):
            answer = example_for_schema(spec.get("schema") or {}, reply.text)
        else:
            answer = {"answer": reply.text}
        return DemoReply(json.dumps(answer, ensure_ascii=False))

    def reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        planned = self._reply(messages, kwargs.get("response_format"))
        tool_calls = []
        if planned.tool_name:
            tool_calls.append(tool_call(name=planned.tool_name, args=planned.tool_args or {}, id=_call_id()))
        return AIMessage(content=planned.text, tool_calls=tool_calls)


def _call_id() -> str:
    return f"call_demo_{uuid.uuid4().hex[:12]}"
