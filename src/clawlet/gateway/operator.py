"""The gateway's operator read methods: what ``openclaw status``, ``logs``, ``gateway usage-cost``,
``gateway stability``, ``gateway probe`` and the TUI ask besides chat.

Each answers from what clawlet really has, in the shapes OpenClaw's own CLI reads:

- ``status``: the health checks of ``/health`` (model provider, workspace, MCP, sandbox) with the
  sessions and this gateway's connections and runs;
- ``system-presence``: one entry per connected client (who, since when, with which scopes);
- ``logs.tail``: the server's log lines kept in memory (:data:`clawlet.logs.LOG_RING`);
- ``usage.cost``: tokens of the runs this gateway streamed since it started, per UTC day (clawlet
  keeps no prices: every entry counts as ``missingCostEntries``, ``totalCost`` stays 0);
- ``diagnostics.stability``: the gateway's own notable events (slow consumers dropped, oversized
  frames) and the process's memory;
- ``config.get``: clawlet's settings with every secret replaced by ``"***"``.
"""

from __future__ import annotations

import re
import resource
import sys
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from clawlet.config import Settings
from clawlet.gateway.protocol import INVALID_REQUEST, GatewayError, now_ms

USAGE_DAYS_MAX = 366
STABILITY_CAPACITY = 1000
LOGS_DEFAULT_LIMIT = 500
LOGS_MAX_LIMIT = 5000
LOGS_DEFAULT_BYTES = 250_000
LOGS_MAX_BYTES = 1_000_000
REDACTED = "***"
_SECRET_NAME = re.compile(r"(key|token|secret|password|credential)", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def _int(params: dict[str, Any], name: str, minimum: int, maximum: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise GatewayError(
            INVALID_REQUEST, f"invalid params: {name} must be an integer in {minimum}..{maximum}"
        )
    return value


# -- usage ---------------------------------------------------------------------------------------


@dataclass
class DayUsage:
    input: int = 0
    output: int = 0
    entries: int = 0
    by_model: dict[str, int] = field(default_factory=dict)


class UsageLedger:
    """Tokens per UTC day and model, added as each run streamed by the gateway ends."""

    def __init__(self) -> None:
        self.days: OrderedDict[str, DayUsage] = OrderedDict()

    def add(self, model: str, input_tokens: int, output_tokens: int, when: datetime | None = None) -> None:
        day = (when or datetime.now(UTC)).strftime("%Y-%m-%d")
        entry = self.days.setdefault(day, DayUsage())
        entry.input += input_tokens
        entry.output += output_tokens
        entry.entries += 1
        entry.by_model[model] = entry.by_model.get(model, 0) + 1
        while len(self.days) > USAGE_DAYS_MAX:
            self.days.popitem(last=False)

    def cost(self, params: dict[str, Any]) -> dict[str, Any]:
        """``usage.cost {days?}`` → ``{updatedAt, days, daily:[…], totals}``."""
        days = _int(params, "days", 1, USAGE_DAYS_MAX) or 30
        first = (datetime.now(UTC) - timedelta(days=days - 1)).strftime("%Y-%m-%d")
        daily = [_usage_row(day, usage) | {"date": day} for day, usage in self.days.items() if day >= first]
        totals = DayUsage()
        for day, usage in self.days.items():
            if day >= first:
                totals.input += usage.input
                totals.output += usage.output
                totals.entries += usage.entries
                for model, count in usage.by_model.items():
                    totals.by_model[model] = totals.by_model.get(model, 0) + count
        return {"updatedAt": now_ms(), "days": days, "daily": daily, "totals": _usage_row("", totals)}


def _usage_row(day: str, usage: DayUsage) -> dict[str, Any]:
    return {
        "input": usage.input,
        "output": usage.output,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": usage.input + usage.output,
        "totalCost": 0,
        "missingCostEntries": usage.entries,
        "missingCostByModel": dict(usage.by_model),
    }


# -- stability -----------------------------------------------------------------------------------


class StabilityLog:
    """The gateway's notable events, newest last, at most ``STABILITY_CAPACITY``."""

    def __init__(self) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=STABILITY_CAPACITY)
        self.seq = 0
        self.dropped = 0

    def record(self, kind: str, **details: Any) -> None:
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.seq += 1
        self.events.append({"seq": self.seq, "ts": now_ms(), "type": kind, **details})

    def snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        """``diagnostics.stability {limit?, type?, sinceSeq?}`` → the recorder's snapshot."""
        limit = _int(params, "limit", 1, STABILITY_CAPACITY) or 25
        since = _int(params, "sinceSeq", 0, sys.maxsize)
        kind = params.get("type")
        events = [
            event
            for event in self.events
            if (since is None or event["seq"] > since)
            and (not isinstance(kind, str) or event["type"] == kind)
        ]
        by_type: dict[str, int] = {}
        for event in self.events:
            by_type[event["type"]] = by_type.get(event["type"], 0) + 1
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        memory = {"latest": {"rssBytes": _rss_bytes() or max_rss}, "maxRssBytes": max_rss, "pressureCount": 0}
        snapshot: dict[str, Any] = {
            "generatedAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "capacity": STABILITY_CAPACITY,
            "count": len(self.events),
            "dropped": self.dropped,
            "events": events[-limit:],
            "summary": {"byType": by_type, "memory": memory},
        }
        if self.events:
            snapshot["firstSeq"] = self.events[0]["seq"]
            snapshot["lastSeq"] = self.events[-1]["seq"]
        return snapshot


def _rss_bytes() -> int | None:
    """This process's resident memory now (Linux), else None."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * resource.getpagesize()


# -- presence, config, status --------------------------------------------------------------------


def presence_entry(
    client: dict[str, Any], scopes: frozenset[str], remote: str, since_ms: int, instance: str
) -> dict[str, Any]:
    """One ``PresenceEntry`` for a connected client."""
    entry: dict[str, Any] = {
        "ts": now_ms(),
        "onlineSince": since_ms,
        "roles": ["operator"],
        "reason": "connect",
    }
    for name, key in (("version", "version"), ("platform", "platform"), ("mode", "mode"), ("id", "text")):
        value = client.get(name)
        if isinstance(value, str) and value:
            entry[key] = value
    host = remote.rsplit(":", 1)[0].strip("[]")
    if host and host != "?":
        entry["ip"] = host
    if scopes:
        entry["scopes"] = sorted(scopes)
    entry["instanceId"] = instance
    return entry


def redacted(value: Any, name: str = "") -> Any:
    """Settings as JSON: secret-named fields that are set become ``"***"``, passwords in URLs too."""
    if isinstance(value, dict):
        return {key: redacted(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item, name) for item in value]
    if value is not None and _SECRET_NAME.search(name) and not name.endswith(("_url", "_path", "_file")):
        return REDACTED
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return _URL_USERINFO.sub(f"{REDACTED}@", value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return str(value)


def config_view(settings: Settings) -> dict[str, Any]:
    """``config.get`` → the settings (redacted) where OpenClaw's snapshot has its config."""
    config = redacted(settings.model_dump())
    return {
        "path": str(settings.home),
        "exists": True,
        "valid": True,
        "config": config,
        "runtimeConfig": config,
        "issues": [],
        "warnings": [],
    }


def uptime_ms(started_monotonic: float) -> int:
    return int((time.monotonic() - started_monotonic) * 1000)
