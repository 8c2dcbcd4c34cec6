"""What the gateway's session methods (``sessions.create``, ``sessions.patch``, ``sessions.reset``,
``sessions.delete``, ``sessions.resolve``) accept, and the shapes they answer with.

clawlet's sessions have a transcript, a title and the server's one model. OpenClaw's have many
more settings (thinking level, permission mode, tool overrides, worktrees, forks, ...): a request
setting one clawlet has no equivalent for is refused with ``INVALID_REQUEST`` naming the fields,
never silently dropped. Fields that only steer OpenClaw's own bookkeeping and change nothing a
clawlet session would do differently (``emitCommandHooks``, ``succeedsParent``, the parent key
of a plain new session, ``idempotencyKey``) are accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clawlet.config import Settings
from clawlet.gateway.protocol import INVALID_REQUEST, GatewayError, now_ms

if TYPE_CHECKING:
    from clawlet.llm.providers import ModelInfo

EVENT_SESSIONS_CHANGED = "sessions.changed"

CREATE_FIELDS = frozenset(
    {
        "key",
        "agentId",
        "label",
        "displayName",
        "model",
        "message",
        "idempotencyKey",
        "parentSessionKey",
        "succeedsParent",
        "emitCommandHooks",
    }
)
PATCH_FIELDS = frozenset({"key", "agentId", "label", "model", "expectedSessionId"})
DELETE_FIELDS = frozenset({"key", "agentId", "deleteTranscript", "expectedSessionId", "emitLifecycleHooks"})
RESOLVE_FIELDS = frozenset(
    {"key", "sessionId", "label", "agentId", "allowMissing", "includeGlobal", "includeUnknown"}
)


def refuse_unsupported(method: str, params: dict[str, Any], supported: frozenset[str]) -> None:
    """``INVALID_REQUEST`` naming every set field outside ``supported``."""
    extra = sorted(name for name, value in params.items() if name not in supported and value is not None)
    if extra:
        raise GatewayError(
            INVALID_REQUEST,
            f"{method}: clawlet has no equivalent for {', '.join(extra)}",
            {"unsupported": extra},
        )


def configured_model(settings: Settings) -> ModelInfo | None:
    """The server's one model, or None when the provider is not configured."""
    from clawlet.llm.providers import ProviderConfigError, describe_model

    try:
        return describe_model(settings)
    except ProviderConfigError:
        return None


def model_ids(settings: Settings) -> set[str]:
    """The ids a client may name the server's one model by (``name`` and ``provider/name``)."""
    info = configured_model(settings)
    return set() if info is None else {info.name, f"{info.provider}/{info.name}"}


def check_model(method: str, settings: Settings, model: Any) -> None:
    """A session's model can only be the server's own: anything else is refused."""
    if model is None:
        return
    if not isinstance(model, str) or model not in model_ids(settings):
        raise GatewayError(
            INVALID_REQUEST,
            f"{method}: clawlet serves one model per server ({', '.join(sorted(model_ids(settings)))}); "
            f"{model!r} is not it",
        )


def resolved(settings: Settings) -> dict[str, Any]:
    """The ``resolved`` block of a mutation result: the model the session runs on."""
    info = configured_model(settings)
    return {} if info is None else {"modelProvider": info.provider, "model": info.name}


def title_param(method: str, params: dict[str, Any], name: str) -> str | None:
    """A label/display name: None when absent, else the stripped text (``""`` for ``null`` on
    patch, which clears it)."""
    if name not in params:
        return None
    value = params[name]
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip() or len(value) > 512:
        raise GatewayError(INVALID_REQUEST, f"invalid {method} params: {name} must be 1..512 characters")
    return value.strip()


def changed_event(key: str, agent_id: str, reason: str, session_id: str | None = None) -> dict[str, Any]:
    """A ``sessions.changed`` event's payload."""
    payload: dict[str, Any] = {"sessionKey": key, "agentId": agent_id, "reason": reason, "ts": now_ms()}
    if session_id is not None:
        payload["sessionId"] = session_id
    return payload
