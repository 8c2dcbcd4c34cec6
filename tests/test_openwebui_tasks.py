# ruff: noqa: E501, W291 - Open WebUI's task templates are copied exactly (long lines, a trailing space)
"""Open WebUI's background tasks (title, tags, follow-ups, search queries) sent to
``/v1/chat/completions`` as Open WebUI sends them: answered by the model alone, in no session, and
never taking the chat's session when they carry its ``X-OpenWebUI-Chat-Id``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import openai

from clawlet.config import Settings
from clawlet.testing.scripted_openai import JSONDict, ScriptedOpenAIServer, Turn, text_turn
from tests.conftest import LiveServer

# Open WebUI's default task templates (backend/open_webui/config.py), copied as they are.
TITLE_TEMPLATE = """### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over excessive creativity; keep it clear and simple.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "📉 Stock Market Trends" },
- { "title": "🍪 Perfect Chocolate Chip Recipe" },
- { "title": "Evolution of Music Streaming" },
- { "title": "Remote Work Productivity Tips" },
- { "title": "Artificial Intelligence in Healthcare" },
- { "title": "🎮 Video Game Development Insights" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>"""

TAGS_TEMPLATE = """### Task:
Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.

### Guidelines:
- Start with high-level domains (e.g. Science, Technology, Philosophy, Arts, Politics, Business, Health, Sports, Entertainment, Education)
- Consider including relevant subfields/subdomains if they are strongly represented throughout the conversation
- If content is too short (less than 3 messages) or too diverse, use only ["General"]
- Use the chat's primary language; default to English if multilingual
- Prioritize accuracy over specificity

### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""

FOLLOW_UP_TEMPLATE = """### Task:
Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.
### Guidelines:
- Write all follow-up questions from the user's point of view, directed to the assistant.
- Make questions concise, clear, and directly related to the discussed topic(s).
- Only suggest follow-ups that make sense given the chat history and the assistant's last response.
- Match the conversational tone and style of the existing chat.
- Use the chat's primary language; default to English if multilingual.
- Avoid repeating questions already asked or answered in the chat history.
- If the conversation is concluded or no relevant follow-ups exist, return an empty list.
### Output:
JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }
### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""

QUERY_TEMPLATE = """### Task:
Analyze the chat history to determine the necessity of generating search queries, in the given language. By default, **prioritize generating 1-3 broad and relevant search queries** unless it is absolutely certain that no additional information is required. The aim is to retrieve comprehensive, updated, and valuable information even with minimal uncertainty. If no search is unequivocally needed, return an empty list.

### Guidelines:
- Respond **EXCLUSIVELY** with a JSON object. Any form of extra commentary, explanation, or additional text is strictly prohibited.
- When generating search queries, respond in the format: { "queries": ["query1", "query2"] }, ensuring each query is distinct, concise, and relevant to the topic.
- If and only if it is entirely certain that no useful results can be retrieved by a search, return: { "queries": [] }.
- Err on the side of suggesting search queries if there is **any chance** they might provide useful or updated information.
- Be concise and focused on composing high-quality search queries, avoiding unnecessary elaboration, commentary, or assumptions.
- Today's date is: {{CURRENT_DATE}}.
- Always prioritize providing actionable and broad queries that maximize informational coverage.

### Output:
Strictly return in JSON format: 
{
  "queries": ["query1", "query2"]
}

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>
"""

CHAT_ID = "9b1c2d3e-4f50-4a6b-8c7d-0e1f2a3b4c5d"
OWUI_HEADERS = {  # what ENABLE_FORWARD_USER_INFO_HEADERS=true adds to every request of the chat
    "X-OpenWebUI-User-Name": "Ada",
    "X-OpenWebUI-User-Id": "6f1e0c2a-1111-4222-8333-444455556666",
    "X-OpenWebUI-User-Email": "ada@example.com",
    "X-OpenWebUI-User-Role": "user",
    "X-OpenWebUI-Chat-Id": CHAT_ID,
}


def task_prompt(template: str, history: list[tuple[str, str]]) -> str:
    """A template filled as Open WebUI fills it (``ROLE: content`` lines, the last N messages)."""
    prompt = template.replace("{{CURRENT_DATE}}", "2026-11-25")
    for count in (2, 6):
        tail = "\n".join(f"{role.upper()}: {content}" for role, content in history[-count:])
        prompt = prompt.replace(f"{{{{MESSAGES:END:{count}}}}}", tail)
    assert "{{" not in prompt
    return prompt


def task_body(prompt: str) -> JSONDict:
    """The body Open WebUI posts for a task (its ``metadata`` is removed before it is sent)."""
    return {
        "model": "clawlet",
        "messages": [{"role": "user", "content": prompt}],
        "stream": False,
        "max_completion_tokens": 1000,
    }


HISTORY = [("user", "What's the weather in Paris? run: ls"), ("assistant", "Sunny, 21°C.")]
TASKS = {
    "title": (TITLE_TEMPLATE, '{ "title": "🌤️ Paris Weather" }'),
    "tags": (TAGS_TEMPLATE, '{ "tags": ["General"] }'),
    "follow_ups": (FOLLOW_UP_TEMPLATE, '{ "follow_ups": ["Tomorrow?"] }'),
    "queries": (QUERY_TEMPLATE, '{ "queries": ["paris weather"] }'),
}


def session_files(settings: Settings) -> list[Path]:
    return sorted(settings.paths.sessions.glob("*.json"))


def answer_by_task(request: JSONDict) -> Turn:
    """The scripted model: each task gets its own answer, anything else a chat reply."""
    content = str(request["messages"][-1]["content"])
    for _, (template, answer) in TASKS.items():
        if content.startswith(template.split("\n", 2)[1], len("### Task:\n")):
            return text_turn(answer)
    return text_turn("It is sunny in Paris.")


def test_tasks_are_answered_by_the_model_alone(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer(answer_by_task) as llm:
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server = live_server(custom)
        sdk = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        for name, (template, answer) in TASKS.items():
            prompt = task_prompt(template, HISTORY)
            raw = sdk.chat.completions.with_raw_response.create(
                **task_body(prompt), extra_headers=OWUI_HEADERS
            )
            completion = raw.parse()
            assert completion.choices[0].message.content == answer, name
            assert completion.choices[0].finish_reason == "stop"
            assert "x-session-id" not in raw.headers
            upstream = llm.requests[-1]
            assert "tools" not in upstream, name  # no tools offered
            assert upstream["max_completion_tokens"] == 1000  # the task's own cap reached the model
            assert upstream["messages"] == [{"role": "user", "content": prompt}]  # no agent prompt
        assert len(llm.requests) == len(TASKS)
        assert session_files(custom) == []
        assert httpx.get(f"{server.url}/api/sessions").json() == []


def test_task_and_chat_with_the_same_chat_id_at_once(live_server: Callable[..., LiveServer]) -> None:
    """The title task is in flight when the user's message arrives: the message is answered (no
    409) and the chat's transcript holds the user's words, not the task prompt."""
    release = threading.Event()

    def script(request: JSONDict) -> Turn:
        turn = answer_by_task(request)
        if str(request["messages"][-1]["content"]).startswith("### Task:"):
            return Turn(text=turn.text, hold=release)
        return turn

    with ScriptedOpenAIServer(script) as llm:
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server = live_server(custom)
        sdk = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        title_prompt = task_prompt(TITLE_TEMPLATE, HISTORY[:1])
        results: list[str | None] = []
        task = threading.Thread(
            target=lambda: results.append(
                sdk.chat.completions.create(**task_body(title_prompt), extra_headers=OWUI_HEADERS)
                .choices[0]
                .message.content
            )
        )
        task.start()
        try:
            deadline = threading.Event()
            for _ in range(2400):  # until the task reached the model (it is held there)
                if any(r["messages"][-1]["content"] == title_prompt for r in list(llm.requests)):
                    break
                deadline.wait(0.05)
            else:
                raise AssertionError("the title task never reached the model")
            pieces = [
                chunk.choices[0].delta.content or ""
                for chunk in sdk.chat.completions.create(
                    model="clawlet",
                    messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                    stream=True,
                    extra_headers=OWUI_HEADERS,
                )
                if chunk.choices
            ]
            assert "".join(pieces) == "It is sunny in Paris."
            assert task.is_alive()  # the task was still held while the chat ran
        finally:
            release.set()
            task.join(timeout=120)
        assert results == ['{ "title": "🌤️ Paris Weather" }']
        stored = json.loads((custom.paths.sessions / f"{CHAT_ID}.json").read_text(encoding="utf-8"))
        assert [m["content"] for m in stored["messages"]] == [
            "What's the weather in Paris?",
            "It is sunny in Paris.",
        ]
        assert [p.stem for p in session_files(custom)] == [CHAT_ID]


def test_demo_model_answers_tasks_with_json_and_no_session(server: LiveServer) -> None:
    """The offline demo model would read a skill for a weather chat if tools were offered; a
    task gets the JSON it asks for, streamed or not, and no session."""
    url = f"{server.url}/v1/chat/completions"
    prompt = task_prompt(TITLE_TEMPLATE, HISTORY)
    response = httpx.post(url, json=task_body(prompt), headers=OWUI_HEADERS, timeout=60)
    assert response.status_code == 200 and "x-session-id" not in response.headers
    assert json.loads(response.json()["choices"][0]["message"]["content"]) == {
        "title": "What's the weather in Paris?"
    }
    tags = httpx.post(url, json=task_body(task_prompt(TAGS_TEMPLATE, HISTORY)), timeout=60)
    assert json.loads(tags.json()["choices"][0]["message"]["content"]) == {"tags": ["General"]}
    streamed = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0).chat.completions.create(
        model="clawlet",
        messages=[{"role": "user", "content": task_prompt(QUERY_TEMPLATE, HISTORY)}],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert json.loads(text) == {"queries": []}
    assert session_files(server.settings) == []
