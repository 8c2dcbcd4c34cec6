"""Image content parts on ``/v1/chat/completions``, sent by the real ``openai`` SDK to a real
server: they reach an OpenAI-compatible upstream as image parts beside the text (the scripted
upstream records them), the session keeps a note of each image instead of its bytes, and a model
that takes no images (the demo model) or a part clawlet cannot pass on gets a clear 400."""

from __future__ import annotations

import base64
from collections.abc import Callable

import httpx
import openai
import pytest

from clawlet.config import Settings
from clawlet.engine.context import RunContext, context_from_json, context_to_json
from clawlet.llm.images import Image
from clawlet.llm.response_format import parse_response_format
from clawlet.runtime.approval_store import PausedTurn
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import LiveServer

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 3000).decode()
DATA_URL = f"data:image/png;base64,{PIXEL}"
WEB_URL = "https://example.com/cat.jpg"


def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def image_message(text: str, *urls: str) -> dict[str, object]:
    parts: list[dict[str, object]] = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "image_url", "image_url": {"url": url, "detail": "low"}} for url in urls]
    return {"role": "user", "content": parts}


def test_images_reach_an_openai_compatible_upstream(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [text_turn("A cat."), text_turn("Still a cat."), text_turn("An image."), text_turn("Noted.")]
        )
        server = live_server(
            Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        )
        client = sdk(server)
        first = client.chat.completions.with_raw_response.create(
            model="clawlet",
            messages=[image_message("What is in these?", DATA_URL, WEB_URL)],  # type: ignore[list-item]
        )
        assert first.parse().choices[0].message.content == "A cat."
        sent = llm.requests[0]["messages"][-1]
        assert sent["role"] == "user"
        text, *images = sent["content"]
        assert text == {
            "type": "text",
            "text": "What is in these?\n\n[image: image/png, 3 KB]\n[image: " + WEB_URL + "]",
        }
        assert images == [
            {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": WEB_URL, "detail": "low"}},
        ]

        # the next turn of the session: the history keeps the notes, not the image bytes
        session = first.headers["x-session-id"]
        client.chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "And now?"}],
            extra_headers={"X-Session-ID": session},
        )
        history = llm.requests[1]["messages"]
        earlier = next(m for m in history if m["role"] == "user" and "What is in these?" in str(m["content"]))
        assert earlier["content"] == text["text"] and PIXEL not in str(history)

        client.chat.completions.create(model="clawlet", messages=[image_message("", WEB_URL)])  # type: ignore[list-item]
        alone = llm.requests[2]["messages"][-1]["content"]
        assert (
            alone[0] == {"type": "text", "text": f"[image: {WEB_URL}]"}
            and alone[1]["image_url"]["url"] == WEB_URL
        )

        # images of earlier messages (seeding a new session) become notes
        earlier_turns = [image_message("Look", DATA_URL), {"role": "assistant", "content": "Ok."}]
        client.chat.completions.create(
            model="clawlet", messages=[*earlier_turns, {"role": "user", "content": "And?"}]
        )  # type: ignore[list-item]
        seeded = llm.requests[3]["messages"]
        assert {"role": "user", "content": "Look\n\n[image: image/png, 3 KB]"} in seeded
        assert seeded[-1] == {"role": "user", "content": "And?"} and PIXEL not in str(seeded)


def test_a_model_without_images_refuses_them(server: LiveServer) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(server).chat.completions.create(
            model="clawlet",
            messages=[image_message("What is this?", DATA_URL)],  # type: ignore[list-item]
        )
    assert refused.value.code == "unsupported_content" and refused.value.param == "messages"
    assert "does not accept images" in refused.value.message


@pytest.mark.parametrize(
    ("part", "says"),
    [
        ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "data:image/"),
        ({"type": "image_url", "image_url": {}}, "image_url.url"),
        ({"type": "image_url", "image_url": {"url": WEB_URL, "detail": "max"}}, "image_url.detail"),
        (
            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
            "'input_audio' are not supported",
        ),
    ],
)
def test_parts_clawlet_cannot_pass_on_are_400s(
    server: LiveServer, part: dict[str, object], says: str
) -> None:
    body = {
        "model": "clawlet",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}],
    }
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages" and error["code"] == "unsupported_content"
    assert error["message"].startswith("messages[0]: ") and says in error["message"]


def test_the_new_context_fields_survive_the_process_pipe_and_a_pause() -> None:
    fmt = parse_response_format(
        {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}}
    )
    context = RunContext(response_format=fmt, images=(Image(WEB_URL, "low"), Image(DATA_URL)))
    assert context_from_json(context_to_json(context)) == context
    paused = PausedTurn.from_json(PausedTurn([], context).to_json()).context
    assert paused.response_format == fmt and paused.images == ()
