"""``Sampling``: the sampling options a client sent, applied to every model call of its turn.

OpenAI's names (``temperature``, ``top_p``, ``max_tokens`` — the cap of each model call —,
``stop``, ``seed``, ``presence_penalty``, ``frequency_penalty``); unset options keep the
configured defaults. Each provider gets the ones it has: Anthropic has no seed or penalties, the
offline demo model ignores them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

#: The options each provider's LangChain model accepts as call arguments.
PROVIDER_OPTIONS: dict[str, frozenset[str]] = {
    "openai": frozenset(
        {"temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty", "frequency_penalty"}
    ),
    "deepseek": frozenset(
        {"temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty", "frequency_penalty"}
    ),
    "anthropic": frozenset({"temperature", "top_p", "max_tokens", "stop"}),
    "demo": frozenset(),
}


@dataclass(frozen=True)
class Sampling:
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The options that are set (``stop`` as a list)."""
        return {key: list(value) if key == "stop" else value for key, value in self._set().items()}

    @classmethod
    def from_json(cls, data: Any) -> Sampling:
        """What :meth:`to_json` wrote; anything unreadable is left unset."""
        if not isinstance(data, Mapping):
            return cls()
        values: dict[str, Any] = {}
        for item in fields(cls):
            value = data.get(item.name)
            if item.name == "stop":
                if isinstance(value, list) and all(isinstance(part, str) for part in value):
                    values["stop"] = tuple(value)
            elif item.name in ("max_tokens", "seed"):
                if isinstance(value, int) and not isinstance(value, bool):
                    values[item.name] = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[item.name] = float(value)
        return cls(**values)

    def for_provider(self, provider: str) -> dict[str, Any]:
        """The call arguments for ``provider``'s model (``stop`` as a list)."""
        accepted = PROVIDER_OPTIONS.get(provider, PROVIDER_OPTIONS["openai"])
        return {key: value for key, value in self.to_json().items() if key in accepted}

    def _set(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None and value != ()}


NO_SAMPLING = Sampling()
