"""``POST /api/agent`` (and ``/api/claude``, the UniAiAgent seed's name): the native agent endpoint.

The body uses the seed's fields (``prompt``, ``session-id``, ``workspace``, ``system-prompt``,
``dangerously-skip-permissions``, ``allowed-tools``, ``disallowed-tools``, ``files``). The answer
streams clawlet's own events as SSE JSON lines: a ``system``/``init`` line, one line per event
(``text_delta``, ``tool_start``, ``tool_end``, ``new_segment``, ``usage``, ...; text that piled up
while the stream was busy comes as one ``text_delta``, as on ``/v1``) and a final ``result`` line
(plus an ``error`` line when the run fails).

It cannot ask the user anything: tools whose approval policy is ``ask`` are denied unless
``dangerously-skip-permissions`` is true (then they run without asking); the ``init`` line says so
in ``permission_mode`` (``deny`` or ``skip``) and ``permissions`` (a sentence, or "").
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from clawlet.api.deps import WorkspacesDep
from clawlet.api.event_stream import HOLE, KEEPALIVE_SECONDS, FrameTemplate, SseEventStream, sse_data
from clawlet.api.options import AgentOptions, OptionError, check_tool_names
from clawlet.api.sse_response import SseResponse
from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import permission_note
from clawlet.errors import ApiError
from clawlet.events import (
    ApprovalRequested,
    Event,
    NewSegment,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.paths import UnsafePath, resolve_inside
from clawlet.runtime.session_errors import SESSION_ERRORS, session_error
from clawlet.services import InvalidWorkspace, Services
from clawlet.sessions.store import validate_session_id

router = APIRouter()


class AgentRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=100_000)
    session_id: str | None = Field(default=None, alias="session-id")
    workspace: str | None = None
    system_prompt: str | None = Field(default=None, alias="system-prompt", max_length=50_000)
    skip_permissions: bool = Field(default=False, alias="dangerously-skip-permissions")
    allowed_tools: list[str] | None = Field(default=None, alias="allowed-tools")
    disallowed_tools: list[str] | None = Field(default=None, alias="disallowed-tools")
    files: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("prompt must not be blank")
        return value


def event_type(event: Event) -> str:
    """``TextDelta`` → ``text_delta``."""
    name = type(event).__name__
    known = _TYPE_NAMES.get(name)
    if known is None:
        known = _TYPE_NAMES[name] = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return known


_TYPE_NAMES: dict[str, str] = {}


_TEXT = FrameTemplate(sse_data({"type": "text_delta", "text": HOLE}))


def attach_files(services: Services, prompt: str, files: list[str]) -> str:
    """Name the referenced files in the prompt after checking they exist inside the workspace."""
    if not files:
        return prompt
    root = services.settings.paths.root
    listed = []
    for name in files:
        try:
            target = resolve_inside(root, name, single_link=True)
        except UnsafePath as exc:
            raise ApiError(400, "invalid_file", str(exc)) from exc
        if not target.is_file():
            raise ApiError(400, "invalid_file", f"file {name!r} does not exist in the workspace")
        listed.append(f"- {target.relative_to(root.resolve()).as_posix()}")
    return prompt + "\n\nReferenced files (read them with read_file when needed):\n" + "\n".join(listed)


class NativeStream(SseEventStream):
    """A run's events as the native endpoint's JSON lines: each event as it is (``type`` its
    snake-case kind), the run's end as a ``result`` line (after an ``error`` line if it failed)."""

    def __init__(self, session_id: str, init: dict[str, Any]) -> None:
        super().__init__()
        self.session_id = session_id
        self.init = init

    def _event(self, event: Event) -> tuple[str]:
        return (sse_data({"type": event_type(event), **dataclasses.asdict(event)}),)

    def _result(self, subtype: str, content: str) -> str:
        return sse_data(
            {"type": "result", "subtype": subtype, "result": content, "session_id": self.session_id}
        )

    def before_stream(self) -> Iterable[str]:
        return (sse_data(self.init),)

    def on_run_started(self, event: RunStarted) -> Iterable[str]:
        return ()

    def on_failed(self, event: RunFailed) -> Iterable[str]:
        error = {"message": event.error, "type": "system_error", "code": "agent_run_failed"}
        return (sse_data({"type": "error", "error": error}), self._result("error", ""))

    def on_finished(self, event: RunFinished) -> Iterable[str]:
        return (self._result("success", event.content),)

    def on_cancelled(self, event: RunCancelled) -> Iterable[str]:
        return (self._result("cancelled", event.content),)

    def on_waiting(self, event: RunWaiting) -> Iterable[str]:
        return (self._result("waiting", event.content),)

    def on_retrieval(self, event: Retrieval) -> Iterable[str]:
        return self._event(event)

    def on_text(self, event: TextDelta) -> Iterable[str]:
        return (_TEXT.fill(event.text),)

    def on_thinking(self, event: Thinking) -> Iterable[str]:
        return self._event(event)

    def on_tool_start(self, event: ToolStart) -> Iterable[str]:
        return self._event(event)

    def on_tool_end(self, event: ToolEnd) -> Iterable[str]:
        return self._event(event)

    def on_new_segment(self, event: NewSegment) -> Iterable[str]:
        return self._event(event)

    def on_usage(self, event: Usage) -> Iterable[str]:
        return self._event(event)

    def on_approval(self, event: ApprovalRequested) -> Iterable[str]:
        return self._event(event)

    def on_question(self, event: QuestionAsked) -> Iterable[str]:
        return self._event(event)

    def on_title(self, event: Title) -> Iterable[str]:
        return self._event(event)


@router.post("/agent")
@router.post("/claude")
async def run_agent(body: AgentRequest, workspaces: WorkspacesDep) -> SseResponse:
    try:
        services = workspaces.get(body.workspace)
    except InvalidWorkspace as exc:
        raise ApiError(400, "invalid_workspace", str(exc)) from exc
    options = AgentOptions(
        workspace=body.workspace,
        allowed_tools=body.allowed_tools,
        disallowed_tools=body.disallowed_tools,
        skip_permissions=body.skip_permissions,
    )
    try:
        check_tool_names(options, await services.engine.available_tool_names())
    except OptionError as exc:
        raise ApiError(400, "unknown_tool", str(exc), {"param": exc.param}) from exc
    prompt = attach_files(services, body.prompt, body.files)
    session_id = body.session_id or uuid.uuid4().hex
    context = RunContext.for_edge(
        skip_permissions=body.skip_permissions,
        allowed_tools=body.allowed_tools,
        disallowed_tools=body.disallowed_tools,
        extra_system_prompt=body.system_prompt or "",
    )
    resolved = await services.engine.resolve_context(context)
    try:
        validate_session_id(session_id)
        run = await services.sessions.start_turn(session_id, prompt, title=False, context=context)
    except SESSION_ERRORS as exc:
        raise session_error(exc, session_id) from exc
    allowed = [name for name in await services.engine.available_tool_names() if resolved.tool_allowed(name)]
    init = {
        "type": "system",
        "subtype": "init",
        "cwd": str(services.settings.paths.root),
        "session_id": session_id,
        "workspace": body.workspace or "shared",
        "tools": allowed,
        "permission_mode": "skip" if body.skip_permissions else "deny",
        "permissions": permission_note(resolved),
    }
    events = run.events(keepalive=KEEPALIVE_SECONDS, merge_text=True)
    return NativeStream(session_id, init).response(events, {"X-Session-ID": session_id})
