"""The shapes of the gateway's ``agent`` and ``agent.wait`` methods (what ``openclaw agent`` uses).

``agent`` is answered twice under one request id, as OpenClaw answers it: ``{status:"accepted"}``
as soon as the run started, then the result once it ended::

    {runId, status:"ok", summary:"completed", result:{payloads:[{text}], meta:{durationMs}}}
    {runId, status:"timeout", summary:"aborted", stopReason:"rpc", result:{...}}   (aborted)
    ok:false, UNAVAILABLE, the run's error message                                  (failed)

``agent.wait {runId, timeoutMs?}`` answers ``{runId, status: ok|error|timeout, startedAt,
endedAt?, error?}`` (``timeout``: still running when the wait ended).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clawlet.gateway.protocol import (
    DEFAULT_AGENT_ID,
    INVALID_REQUEST,
    MAIN_SESSION_SUFFIX,
    UNAVAILABLE,
    GatewayError,
    message_text,
    session_key,
)

if TYPE_CHECKING:
    from clawlet.gateway.payloads import ChatState
    from clawlet.gateway.server import GatewayRun

WAIT_DEFAULT_MS = 30_000
"""How long ``agent.wait`` waits when the client names no ``timeoutMs``."""
MAX_KEY_CHARS = 512


def _optional(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise GatewayError(INVALID_REQUEST, f"invalid agent params: {name} must be a non-empty string")
    if len(value) > MAX_KEY_CHARS:
        raise GatewayError(
            INVALID_REQUEST, f"invalid agent params: {name} must be at most {MAX_KEY_CHARS} characters"
        )
    return value.strip()


def session_key_of(params: dict[str, Any]) -> str:
    """The session an ``agent`` request runs in: its ``sessionKey``, else
    ``agent:<agentId or main>:<sessionId or main>``."""
    key = _optional(params, "sessionKey")
    if key is not None:
        return key
    agent_id = _optional(params, "agentId") or DEFAULT_AGENT_ID
    return session_key(agent_id, _optional(params, "sessionId") or MAIN_SESSION_SUFFIX)


def accepted(gateway_run: GatewayRun) -> dict[str, Any]:
    """The first answer: the run is under way."""
    return {
        **gateway_run.base(),
        "status": "accepted",
        "acceptedAt": gateway_run.started_ms,
    }


def _result(gateway_run: GatewayRun, terminal: ChatState) -> dict[str, Any]:
    text = message_text(terminal.get("message"))
    ended = gateway_run.ended_ms or gateway_run.started_ms
    meta: dict[str, Any] = {"durationMs": max(0, ended - gateway_run.started_ms)}
    if gateway_run.usage:
        meta["usage"] = dict(gateway_run.usage)
    return {"payloads": [{"text": text}] if text else [], "meta": meta}


def outcome(gateway_run: GatewayRun) -> dict[str, Any]:
    """The second answer, once the run ended; raises the run's failure as ``UNAVAILABLE``."""
    terminal = gateway_run.terminal
    if terminal is None:
        raise GatewayError(UNAVAILABLE, "the gateway stopped before the run ended", retryable=True)
    state = terminal.get("state")
    if state == "error":
        raise GatewayError(UNAVAILABLE, str(terminal.get("errorMessage") or "the run failed"))
    payload: dict[str, Any] = {"runId": gateway_run.run_id, "sessionKey": gateway_run.target.key}
    if state == "aborted":
        payload.update(status="timeout", summary="aborted", stopReason="rpc")
    else:
        payload.update(status="ok", summary="completed")
    payload["result"] = _result(gateway_run, terminal)
    return payload


def wait_result(gateway_run: GatewayRun) -> dict[str, Any]:
    """``agent.wait``'s answer for a run, ended or not."""
    result: dict[str, Any] = {"runId": gateway_run.run_id, "startedAt": gateway_run.started_ms}
    terminal = gateway_run.terminal
    if terminal is None:
        result["status"] = "error" if gateway_run.ended.is_set() else "timeout"
        if gateway_run.ended.is_set():
            result["error"] = "the gateway stopped before the run ended"
        return result
    if gateway_run.ended_ms is not None:
        result["endedAt"] = gateway_run.ended_ms
    state = terminal.get("state")
    if state == "error":
        result.update(status="error", error=str(terminal.get("errorMessage") or "the run failed"))
    elif state == "aborted":
        result.update(status="timeout", stopReason="rpc")
    else:
        result["status"] = "ok"
    return result
