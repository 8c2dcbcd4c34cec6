"""``AgentEngine``: one agent turn on LangChain ``create_agent``, translated into clawlet events.

The system prompt is reassembled before every model call so edits to the workspace files apply at
once. Middleware refuses tools a turn may not use, pauses before tools whose approval policy is
``ask`` (see :mod:`clawlet.engine.tool_approvals`), turns tool exceptions into error ``ToolMessage``s
(a failing tool never crashes a run), masks known secrets in every tool result
(:mod:`clawlet.engine.masking`) and caps model and tool calls per run.

A turn that may pause (for an approval, or for a client tool's result:
:mod:`clawlet.engine.client_tools`) runs on a checkpointer
(:class:`~clawlet.engine.tool_approvals.PausePoint`); when it pauses, :meth:`AgentEngine.stream` ends
with ``ApprovalRequested`` / ``QuestionAsked`` events and a ``RunWaiting``, and a later call with
``resume=`` continues it from the checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelRequest,
    ToolCallRequest,
    ToolErrorMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Durability

from clawlet.config import ApprovalPolicy, RuntimeConfig, Settings
from clawlet.engine import tracing
from clawlet.engine.client_tool_middleware import ClientToolMiddleware
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.held_checkpoints import HeldCheckpointer
from clawlet.engine.masking import SecretMaskMiddleware
from clawlet.engine.model_steps import ModelRequestSteps
from clawlet.engine.permissions import ToolPermissionMiddleware, context_of
from clawlet.engine.prompt import build_system_prompt
from clawlet.engine.run_caps import RunCaps, is_notice
from clawlet.engine.sampling import SamplingStep
from clawlet.engine.structured import ResponseFormatMiddleware
from clawlet.engine.token_release import TokenRelease
from clawlet.engine.tool_approvals import (
    Decision,
    PausePoint,
    Resume,
    apply_policies,
    approval_middleware,
    check_decision,
    effective_policies,
    hitl_decision,
    pending_from_interrupt,
)
from clawlet.events import (
    Event,
    NewSegment,
    Pending,
    Retrieval,
    RunWaiting,
    TextDelta,
    Thinking,
    ToolEnd,
    ToolStart,
    Usage,
    render_tool_input,
)
from clawlet.llm import request_sent
from clawlet.llm.demo import RETRIEVAL_HEADER
from clawlet.llm.images import user_message
from clawlet.llm.providers import build_chat_model, describe_model
from clawlet.llm.sampling import NO_SAMPLING, Sampling
from clawlet.memory.index import SearchResult
from clawlet.memory.stores import KnowledgeBase, MemoryIndex
from clawlet.skills.scanner import refresh_snapshot
from clawlet.tools.base import ToolError
from clawlet.tools.mcp import McpTools, config_fingerprint, load_mcp_tools
from clawlet.tools.registry import build_tools, tool_sandbox

log = logging.getLogger(__name__)

MODEL_NODE = "model"
TOOLS_NODE = "tools"
INTERRUPT_KEY = "__interrupt__"

Agent = CompiledStateGraph[Any, RunContext, Any, Any]
"""The compiled agent graph ``create_agent`` builds (its state types are LangChain's own)."""


class PausedRunGone(RuntimeError):
    """A resume found no paused run waiting for that approval (its checkpoint is gone or moved on)."""


def tool_error_text(exc: Exception, request: ToolCallRequest) -> str:
    """What the model hears when a tool raises: the tool, the error type and its message."""
    name = request.tool_call["name"]
    if isinstance(exc, ToolError):
        return f"Error from {name}: {exc}"
    return f"Error from {name}: {type(exc).__name__}: {exc}"


def format_retrieval(results: Sequence[SearchResult]) -> str:
    """The per-request memory context (never stored in the session)."""
    lines = [RETRIEVAL_HEADER]
    for rank, item in enumerate(results, start=1):
        lines.append(f"{rank}. ({item['source']}) {item['text']}")
    return "\n".join(lines)


def cut_by_cap(message: BaseMessage) -> bool:
    """Whether the model stopped ``message`` at its token cap (``finish_reason``/``stop_reason``)."""
    metadata = message.response_metadata
    return metadata.get("finish_reason") == "length" or metadata.get("stop_reason") == "max_tokens"


def to_langchain_messages(history: Sequence[dict[str, str]]) -> list[BaseMessage]:
    """The transcript's user and assistant messages, each with an id of its place in the history
    (LangGraph's ``add_messages`` would otherwise draw a random UUID for every one, every turn)."""
    messages: list[BaseMessage] = []
    for index, item in enumerate(history):
        if item["role"] == "user":
            messages.append(HumanMessage(item["content"], id=f"history-{index}"))
        elif item["role"] == "assistant":
            messages.append(AIMessage(item["content"], id=f"history-{index}"))
    return messages


class WorkspacePrompt:
    """The system prompt of every model call, reassembled from the workspace's files (a step of
    :class:`~clawlet.engine.model_steps.ModelRequestSteps`); a request's own system prompt
    (``extra_system_prompt``) follows it."""

    def __init__(self, engine: AgentEngine) -> None:
        self.engine = engine

    def prepare_model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        extra = context_of(request.runtime).extra_system_prompt
        prompt = self.engine.system_prompt()
        prompt = f"{prompt}\n\n<!-- Request System Prompt -->\n{extra}" if extra else prompt
        return request.override(system_message=SystemMessage(content=prompt))


class AgentEngine:
    """Builds and streams the agent for one clawlet home."""

    def __init__(
        self,
        settings: Settings,
        runtime_config: RuntimeConfig,
        memory: MemoryIndex,
        knowledge: KnowledgeBase,
        *,
        demo_token_delay: float = 0.0,
        model: BaseChatModel | None = None,
    ) -> None:
        """``model``: the chat model to use instead of the configured provider's (an in-process
        model a test gives, e.g. :class:`clawlet.testing.function_model.FunctionModel`)."""
        self.settings = settings
        self.home = settings.paths.root
        """The home, resolved once (``settings.paths`` resolves it again on every use)."""
        self.runtime_config = runtime_config
        self.memory = memory
        self.knowledge = knowledge
        self._model: BaseChatModel | None = model
        self._agents: dict[bool, Agent] = {}
        """The compiled agents, with the approvals middleware (True) and without (False)."""
        self._tools: list[BaseTool] | None = None
        self.mcp = McpTools()
        self._mcp_fingerprint = ""
        self._mcp_lock = asyncio.Lock()
        self.demo_token_delay = demo_token_delay
        tracing.install()
        # the agent with a checkpointer, per checkpoint directory: (the agent it copies, the copy)
        self._pausable: dict[Path, tuple[Agent, Agent]] = {}

    @property
    def provider(self) -> str:
        return describe_model(self.settings).provider

    def build_model(self) -> BaseChatModel:
        """The chat model, built once: models are stateless between calls and building one
        (with its HTTP client) costs about 15 ms, paid otherwise on every turn."""
        if self._model is None:
            self._model = build_chat_model(self.settings, demo_token_delay=self.demo_token_delay)
        return self._model

    @property
    def traces_model_requests(self) -> bool:
        """Whether the model (once built) runs a turn's pending work once its request is out
        (:mod:`clawlet.llm.request_sent`): False for the demo model or an injected one."""
        return self._model is not None and request_sent.traces_requests(self._model)

    def build_tools(self) -> list[BaseTool]:
        return [*build_tools(self.settings, self.knowledge, self.runtime_config), *self.mcp.tools]

    def tools(self) -> list[BaseTool]:
        """The tools, built once (again when the MCP tools are reloaded): they hold no per-turn
        state and read what may change (the sandbox's network setting) when they run, and a
        request asks for them several times (names, policies, the agent)."""
        if self._tools is None:
            self._tools = self.build_tools()
        return self._tools

    async def prepare(self) -> None:
        """Load (or reload, when ``mcp.json`` or the sandbox's network setting changed) the MCP
        tools; the agent is rebuilt then."""
        async with self._mcp_lock:
            fingerprint = config_fingerprint(self.home)
            if fingerprint:  # the sandbox's network setting (what tool_sandbox reads)
                fingerprint += f"|network={self.runtime_config.get_sandbox_network()}"
            if fingerprint == self._mcp_fingerprint:
                return
            self.mcp = await load_mcp_tools(self.home, tool_sandbox(self.settings, self.runtime_config))
            self._mcp_fingerprint = fingerprint
            self._agents.clear()
            self._tools = None

    async def available_tool_names(self) -> list[str]:
        await self.prepare()
        return self.tool_names()

    def system_prompt(self) -> str:
        """Rescan skills (rewriting the snapshot if they changed) and assemble the prompt."""
        home = self.home
        refresh_snapshot(home)
        return build_system_prompt(home, rag_mode=self.runtime_config.get_rag_mode())

    def build_agent(self) -> Agent:
        """The compiled agent of turns that never pause, built once. It has no approvals
        middleware (one traced hop around every tool call): such a turn never asks (its context
        has no ``ask`` tool: they are denied or run,
        :func:`~clawlet.engine.tool_approvals.apply_policies`)."""
        return self._compiled(approvals=False)

    def _compiled(self, *, approvals: bool) -> Agent:
        """The compiled agent, with or without the approvals middleware, built once. The system
        prompt is not baked in: :class:`WorkspacePrompt` reassembles it from the files before
        every model call, so edits apply at once without paying for a graph compile (about
        14 ms) on every turn."""
        agent = self._agents.get(approvals)
        if agent is None:
            tools = self.tools()
            permissions = ToolPermissionMiddleware()
            client_tools = ClientToolMiddleware(self.provider)
            # Order matters: the permission filter refuses denied calls before anyone is asked,
            # and the approval middleware wraps the error handler (its interrupt must not become
            # an error tool message). Nothing before the interrupt has side effects: on resume
            # the paused call re-enters this chain up to the interrupt, then the tool runs once.
            middleware: list[AgentMiddleware[Any, Any, Any]] = [
                # outermost: at the model-call cap nothing is built, and the tool-call cap sees
                # the answer every other middleware made
                RunCaps(model_calls=self.settings.max_model_calls, tool_calls=self.settings.max_tool_calls),
                # what only prepares the model request, in one layer (clawlet.engine.model_steps):
                # the client's tools are added before the response format looks at what a call offers
                ModelRequestSteps(
                    WorkspacePrompt(self), permissions, SamplingStep(self.provider), client_tools
                ),
                permissions,  # its tool-call hook: refuses a call to a tool the turn may not use
                client_tools,  # its tool-call hook: pauses the run on a call to a client tool
                ResponseFormatMiddleware(self.provider),
                *([approval_middleware([tool.name for tool in tools])] if approvals else []),
                SecretMaskMiddleware(self.settings.secret_values),  # also masks the error messages
                ToolErrorMiddleware(on_error=tool_error_text),
            ]
            agent = create_agent(self.build_model(), tools, middleware=middleware, context_schema=RunContext)
            self._agents[approvals] = agent
        return agent

    def pausable_agent(self, pause: PausePoint) -> Agent:
        """The agent with the approvals middleware saving its state in ``pause.directory`` (a copy
        of the compiled one, made again only when that one is rebuilt)."""
        base = self._compiled(approvals=True)
        cached = self._pausable.get(pause.directory)
        if cached is None or cached[0] is not base:
            cached = (base, base.copy({"checkpointer": HeldCheckpointer(pause.directory)}))
            self._pausable[pause.directory] = cached
        return cached[1]

    def tool_policies(self) -> dict[str, ApprovalPolicy]:
        """The approval policy of every tool (defaults overridden by ``config.json``)."""
        return effective_policies(self.settings, self.runtime_config, self.tool_names())

    async def resolve_context(self, context: RunContext) -> RunContext:
        """``context`` with this workspace's approval policy applied (see :class:`RunContext`)."""
        await self.prepare()
        return apply_policies(context, self.tool_policies())

    def find_tool(self, name: str) -> BaseTool | None:
        return next((tool for tool in self.tools() if tool.name == name), None)

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        """Raise :class:`~clawlet.engine.tool_approvals.InvalidDecision` if ``decision`` does not fit."""
        tool = self.find_tool(pending.tool) if hasattr(pending, "tool") else None
        return check_decision(pending, decision, tool)

    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools()]

    async def answer_alone(self, prompt: str, sampling: Sampling = NO_SAMPLING) -> AsyncIterator[Event]:
        """The model alone answering one user message: no tools, no system prompt, no memory,
        nothing stored; yields ``TextDelta`` (and ``Thinking``) events, then ``Usage`` when the
        provider reports it or cut the answer. For requests that are not agent turns (a client's
        background tasks)."""
        input_tokens = output_tokens = 0
        truncated = False
        model = self.build_model().bind(**sampling.for_provider(self.provider))
        async for chunk in model.astream([HumanMessage(prompt)]):
            if chunk.usage_metadata:
                input_tokens += chunk.usage_metadata.get("input_tokens", 0)
                output_tokens += chunk.usage_metadata.get("output_tokens", 0)
            truncated = truncated or cut_by_cap(chunk)
            reasoning = chunk.additional_kwargs.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                yield Thinking(reasoning)
            if chunk.text:
                yield TextDelta(chunk.text)
        if input_tokens or output_tokens or truncated:
            yield Usage(input_tokens=input_tokens, output_tokens=output_tokens, truncated=truncated)

    async def stream(
        self,
        message: str,
        history: Sequence[dict[str, str]],
        context: RunContext = DEFAULT_CONTEXT,
        *,
        pause: PausePoint | None = None,
        resume: Resume | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run one turn and yield TextDelta / ToolStart / ToolEnd / NewSegment / Usage events.

        With ``pause`` (needed when ``context.may_pause``) the graph state is kept in
        that checkpoint thread, and a turn that pauses ends with an ``ApprovalRequested`` or
        ``QuestionAsked`` per new pending item and a ``RunWaiting`` listing all of them. With
        ``resume`` (and the same ``pause``) ``message`` and ``history`` are ignored: the paused
        turn continues with the decision."""
        context = await self.resolve_context(context)
        if pause is None and (context.may_pause or context.ask_tools or context.resume_call_ids):
            raise ValueError("a turn that may pause needs a pause point (a checkpointer)")
        agent = self.build_agent() if pause is None else self.pausable_agent(pause)
        # Every model call walks each graph node once (the model, the tools and every middleware
        # hook node), so the recursion limit must exceed nodes * max_model_calls or LangGraph would
        # abort with GraphRecursionError before the model-call cap ends the run cleanly.
        steps_per_model_call = max(2, len(agent.builder.nodes))
        release = TokenRelease()
        config: RunnableConfig = {
            "recursion_limit": steps_per_model_call * (self.settings.max_model_calls + 1) + 10,
            # the first text goes out at once, even in a burst (a structured answer's text does not)
            "callbacks": [release] if context.response_format is None else [],
        }
        # one checkpoint when the run ends or pauses, not one per step: a turn is continued only
        # from its pause point, and a checkpointed session process keeps just its last turn
        # (LangGraph warns about the option on a graph without a checkpointer)
        durability: Durability | None = "exit" if agent.checkpointer else None
        inputs: Any
        already_reported: set[str] = set()  # tool calls whose results were streamed before a pause
        waiting_before: set[str] = set()
        if pause is not None:
            config["configurable"] = {"thread_id": pause.thread_id}
        if resume is not None and pause is not None:
            state = await agent.aget_state(config)
            pending = {item.id: item for item in state.interrupts}
            answered = pending.get(resume.approval_id)
            item = pending_from_interrupt(answered) if answered is not None else None
            if item is None:
                raise PausedRunGone(f"no paused run waits for approval {resume.approval_id!r}")
            waiting_before = set(pending) - {resume.approval_id}
            for task in state.tasks:
                result = task.result if isinstance(task.result, dict) else {}
                for done in result.get("messages", []):
                    if isinstance(done, ToolMessage):
                        already_reported.add(done.tool_call_id)
            context = replace(
                context,
                resume_call_ids=frozenset(
                    str(value.value.get("tool_call_id"))
                    for value in state.interrupts
                    if isinstance(value.value, dict) and value.value.get("tool_call_id")
                ),
            )
            inputs = Command(resume={resume.approval_id: hitl_decision(item, resume.decision)})
        else:
            recalled: list[BaseMessage] = []
            if self.runtime_config.get_rag_mode():
                results = await asyncio.to_thread(self.memory.retrieve, message)
                yield Retrieval(query=message, results=[dict(item) for item in results])
                if results:
                    recalled.append(HumanMessage(format_retrieval(results)))
            inputs = {
                "messages": [
                    *to_langchain_messages(history),
                    *recalled,
                    user_message(message, context.images),
                ]
            }
            if pause is not None:  # a fresh turn: nothing of an earlier one may be resumed into it
                saver = agent.checkpointer
                if not isinstance(saver, BaseCheckpointSaver):
                    raise RuntimeError("a pausable agent has no checkpointer")
                await saver.adelete_thread(pause.thread_id)
        # The run's state is written only if it pauses (nothing else is continued from): the saver
        # holds LangGraph's exit checkpoint until the run says which (HeldCheckpointer).
        holder: HeldCheckpointer | None = None
        if pause is not None and isinstance(agent.checkpointer, HeldCheckpointer):
            holder = agent.checkpointer
            holder.hold(pause.thread_id)
        try:
            tools_ran = interrupted = truncated = False
            # a structured answer is shown once validated (from the model step's result), never its drafts
            structured = context.response_format is not None
            input_tokens = output_tokens = 0
            # with a list of stream modes, LangGraph yields (mode, payload) pairs
            parts = cast(
                AsyncIterator[tuple[str, Any]],
                agent.astream(
                    inputs,
                    config=config,
                    context=context,
                    stream_mode=["messages", "updates"],
                    durability=durability,
                ),
            )
            async for mode, payload in parts:
                if mode == "messages":
                    chunk, metadata = payload
                    if not isinstance(chunk, AIMessageChunk) or metadata.get("langgraph_node") != MODEL_NODE:
                        continue
                    if chunk.usage_metadata:
                        input_tokens += chunk.usage_metadata.get("input_tokens", 0)
                        output_tokens += chunk.usage_metadata.get("output_tokens", 0)
                    reasoning = chunk.additional_kwargs.get("reasoning_content")
                    if isinstance(reasoning, str) and reasoning:
                        yield Thinking(reasoning)
                    text = "" if structured else chunk.text
                    if text:
                        if tools_ran:
                            tools_ran = False
                            yield NewSegment()
                        yield TextDelta(text)
                        release.passed_on()
                    continue
                for node, update in payload.items():
                    if node == INTERRUPT_KEY:
                        interrupted = True  # the pending items are read from the saved state below
                        continue
                    for item in (update or {}).get("messages", []) if isinstance(update, dict) else []:
                        if node == TOOLS_NODE and isinstance(item, ToolMessage):
                            if item.tool_call_id in already_reported:
                                # a resumed step replays the results of its calls that ran before
                                # the pause: they were reported (and saved) then
                                continue
                            yield ToolEnd(
                                tool=item.name or "tool",
                                output=item.text,
                                call_id=item.tool_call_id,
                                is_error=item.status == "error",
                            )
                            tools_ran = True
                        elif isinstance(item, AIMessage):
                            if node == MODEL_NODE:
                                truncated = cut_by_cap(item)  # the last model call's end counts
                                if structured and item.text and not item.tool_calls:
                                    yield TextDelta(item.text)
                            if (node != MODEL_NODE or (is_notice(item) and not structured)) and item.text:
                                # A middleware ended the run with a notice (e.g. the model-call cap).
                                if tools_ran:
                                    tools_ran = False
                                    yield NewSegment()
                                yield TextDelta(item.text)
                            if item.tool_calls and tools_ran:
                                tools_ran = False
                                yield NewSegment()
                            for call in item.tool_calls:
                                yield ToolStart(
                                    tool=call["name"],
                                    input=render_tool_input(call["args"]),
                                    call_id=call.get("id") or "",
                                )
            if input_tokens or output_tokens or truncated:
                yield Usage(input_tokens=input_tokens, output_tokens=output_tokens, truncated=truncated)
            if pause is not None and interrupted:
                if holder is not None:
                    await holder.commit(pause.thread_id)
                state = await agent.aget_state(config)
                waiting = [
                    found for found in map(pending_from_interrupt, state.interrupts) if found is not None
                ]
                if len(waiting) != len(state.interrupts):
                    raise RuntimeError("the run stopped at an interrupt clawlet does not know")
                if waiting:
                    for found in waiting:
                        if found.approval_id not in waiting_before:
                            yield found
                    yield RunWaiting(session_id="", content="", pending=waiting)
        finally:
            if holder is not None and pause is not None:
                holder.discard(pause.thread_id)
