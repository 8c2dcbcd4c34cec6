"""schemathesis over every operation of the app's ``/openapi.json``, against a real server on
loopback, with and without ``CLAWLET_API_TOKEN``: odd input gets a documented 4xx, never a 5xx.

Each answer must also conform to the schema: a documented status, content type, body and ``Allow``
header. Bounded: a few valid and a few invalid examples per operation, derandomized (every run sends
the same requests), no shrinking; the inbox's endless event streams are read for a moment only.
The odd inputs found by hand (lone surrogates, over-long path names, ``~user`` paths) are sent to
every operation they reach, as explicit cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from clawlet.config import Settings
from clawlet.home import init_home
from tests.conftest import LiveServer

# schemathesis' own strategies draw from `random` (it warns about itself, not about this suite)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]

TOKEN = "schemathesis-token-0123456789"
EXAMPLES_PER_MODE = 15
#: Streams that only end when the client leaves: read this long, then cut.
ENDLESS_STREAMS = {"GET /api/v1/events", "GET /api/v1/tasks/{task_id}/events"}
STREAM_SECONDS = 5.0  # also how long the answer's head may take
REQUEST_SECONDS = 60.0
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    allow_header_conformance,
]

LONE_SURROGATE = "x\ud800y"
LONG_NAME = "workspace/" + "A" * 300 + ".md"  # one path component over 255 bytes: ENAMETOOLONG
UNKNOWN_USER = "~nosuchuser/x.md"  # expanduser raised RuntimeError

#: (operation, the case's fields): each answered 500 once.
ODD_CASES: list[tuple[str, dict[str, Any]]] = [
    ("POST /api/files", {"body": {"path": "workspace/odd.md", "content": LONE_SURROGATE}}),
    ("POST /api/files", {"body": {"path": f"workspace/{LONE_SURROGATE}.md", "content": "x"}}),
    ("POST /api/chat", {"body": {"message": LONE_SURROGATE, "stream": False}}),
    ("POST /api/sessions", {"body": {"title": LONE_SURROGATE}}),
    ("POST /api/agent", {"body": {"prompt": LONE_SURROGATE}}),
    ("POST /api/chat", {"body": {"message": "hi", "stream": False, LONE_SURROGATE: 1}}),
    ("POST /api/v1/tasks", {"body": {"content": LONE_SURROGATE}}),
    (
        "POST /v1/chat/completions",
        {"body": {"model": "clawlet", "messages": [{"role": "user", "content": LONE_SURROGATE}]}},
    ),
    (
        "POST /v1/chat/completions",
        {
            "body": {
                "model": "clawlet",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"$ref": "x:y"}},
                },
            }
        },
    ),
    (
        "POST /v1/chat/completions",
        {"body": {"model": "clawlet", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}},
    ),
    ("GET /api/files", {"query": {"path": LONG_NAME}}),
    ("POST /api/files", {"body": {"path": LONG_NAME, "content": "x"}}),
    ("POST /api/tokens/files", {"body": {"paths": [LONG_NAME]}}),
    ("POST /api/agent", {"body": {"prompt": "hi", "files": [LONG_NAME]}}),
    ("GET /api/files", {"query": {"path": UNKNOWN_USER}}),
    ("POST /api/files", {"body": {"path": UNKNOWN_USER, "content": "x"}}),
    ("POST /api/tokens/files", {"body": {"paths": [UNKNOWN_USER]}}),
    ("POST /api/agent", {"body": {"prompt": "hi", "files": [UNKNOWN_USER]}}),
]


def fuzz(operation: Any, mode: GenerationMode, session: requests.Session, headers: dict[str, str]) -> None:
    """Send ``EXAMPLES_PER_MODE`` generated requests to one operation; raise on the first failed check."""
    timeout = STREAM_SECONDS if operation.label in ENDLESS_STREAMS else REQUEST_SECONDS

    @settings(
        max_examples=EXAMPLES_PER_MODE,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(session=session, headers=headers, timeout=timeout)
        case.validate_response(response, checks=CHECKS, headers=headers)

    run()


def modes_for(operation: Any) -> list[GenerationMode]:
    """Valid requests, and invalid ones where something can be invalid: a JSON body or a query
    parameter (any string is a valid path parameter, any bytes a document for ``/process``: trying
    to break those only burns time)."""
    raw = operation.definition.raw
    json_body = "application/json" in raw.get("requestBody", {}).get("content", {})
    if json_body or any(param.get("in") != "path" for param in raw.get("parameters", [])):
        return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    return [GenerationMode.POSITIVE]


def send_odd_case(
    schema: Any, label: str, fields: dict[str, Any], session: requests.Session, headers: dict[str, str]
) -> None:
    operation = schema.find_operation_by_label(label)
    assert operation is not None, f"{label} is not in /openapi.json"
    case = operation.Case(media_type="application/json" if "body" in fields else None, **fields)
    response = case.call(session=session, headers=headers, timeout=REQUEST_SECONDS)
    case.validate_response(response, checks=CHECKS, headers=headers)
    assert 400 <= response.status_code < 500, (label, fields, response.status_code, response.text)


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token", "token"])
def test_every_operation_answers_odd_input_with_a_documented_4xx(
    token: str | None, monkeypatch: pytest.MonkeyPatch, live_server: Callable[..., LiveServer]
) -> None:
    if token:
        monkeypatch.setenv("CLAWLET_API_TOKEN", token)
    configured = Settings()
    init_home(configured.paths)
    server = live_server(configured)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=headers, timeout=60)
    failures: list[str] = []
    labels: list[str] = []
    with requests.Session() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            labels.append(operation.label)
            for mode in modes_for(operation):
                try:
                    fuzz(operation, mode, session, headers)
                except (Exception, BaseExceptionGroup) as exc:  # fuzz every operation, report all
                    failures.append(f"{operation.label} ({mode.value}): {exc}")
        for label, fields in ODD_CASES:
            try:
                send_odd_case(schema, label, fields, session, headers)
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{label} {fields!r}: {exc}")
    assert len(labels) >= 45, f"only {len(labels)} operations in /openapi.json: {labels}"
    assert not failures, "\n\n".join(failures)
