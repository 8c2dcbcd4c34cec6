"""The workbench's approval and question cards in a real browser against a real ``clawlet serve``
(demo model: ``run: <cmd>`` calls the terminal, ``ask: <question>`` asks the user).

The module's server has ``terminal`` set to ``ask`` (PUT /api/config/tool-approvals), so every
``run:`` pauses for an approval card; the terminal runs in the server's home, where the tests look
for the files their commands write.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import PageErrors, Server, free_port, screenshot, start_serve, stop_serve

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`

#: waits on the stream: the machine running the tests may be slow and busy
SLOW = 60_000


@pytest.fixture(scope="module", autouse=True)
def terminal_asks(server: Server) -> Iterator[None]:
    answer = server.api("PUT", "/api/config/tool-approvals", json={"policies": {"terminal": "ask"}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["policies"]["terminal"] == "ask"
    try:
        yield
    finally:
        server.api("PUT", "/api/config/tool-approvals", json={"policies": {}})


def open_app(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.get_by_test_id("model-label")).to_contain_text("demo")


def new_chat(page: Page) -> str:
    page.wait_for_load_state("networkidle")  # the session list has loaded
    before = page.get_by_test_id("session-item").count()
    page.get_by_test_id("new-session").click()
    expect(page.get_by_test_id("session-item")).to_have_count(before + 1)
    active = page.locator(".session.active")
    expect(active).to_have_count(1)
    session_id = active.get_attribute("data-session-id")
    assert session_id
    return session_id


def submit(page: Page, text: str) -> None:
    box = page.get_by_test_id("chat-input")
    box.fill(text)
    box.press("Enter")


def expect_waiting(page: Page) -> None:
    """The turn paused: the chat says it waits (no error), the composer is locked."""
    expect(page.get_by_test_id("waiting-badge")).to_be_visible(timeout=SLOW)
    expect(page.locator(".session.active").get_by_test_id("session-waiting")).to_be_visible()
    expect(page.get_by_test_id("chat-input")).to_be_disabled()
    expect(page.get_by_test_id("chat-error")).to_have_count(0)


def expect_finished(page: Page) -> None:
    expect(page.get_by_test_id("send-button")).to_be_visible(timeout=SLOW)
    expect(page.get_by_test_id("waiting-badge")).to_have_count(0)
    expect(page.get_by_test_id("chat-input")).to_be_enabled()
    expect(page.get_by_test_id("assistant-bubble").last).not_to_have_class(re.compile("streaming"))


def read_when(path: Path, expected: str) -> str:
    """The file's text once it is ``expected`` (or whatever it is after a while)."""
    deadline = time.monotonic() + 20
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    while text != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    return text


def pause_on(page: Page, server: Server, command: str) -> tuple[str, Locator]:
    """Open the workbench, start a new chat with ``run: <command>`` and wait for its approval card
    (the chat waiting); the session id and the card."""
    open_app(page, server.url)
    session_id = new_chat(page)
    submit(page, f"run: {command}")
    card = page.get_by_test_id("approval-card")
    expect(card).to_be_visible(timeout=SLOW)
    expect_waiting(page)
    return session_id, card


def test_approve_runs_the_command_once(page: Page, server: Server) -> None:
    target = server.home / "workspace" / "approvals-a.txt"
    open_app(page, server.url)
    new_chat(page)
    submit(page, f"run: echo approved-once >> workspace/{target.name}")
    card = page.get_by_test_id("approval-card")
    expect(card).to_be_visible(timeout=SLOW)
    expect(card.get_by_test_id("approval-tool")).to_have_text("terminal")
    expect(card.get_by_test_id("approval-args")).to_contain_text(
        f'"command": "echo approved-once >> workspace/{target.name}"'
    )
    expect(page.get_by_test_id("tool-awaiting")).to_be_visible()
    expect_waiting(page)
    assert not target.exists(), "the command ran before it was approved"
    screenshot(page, "approval-card")

    card.get_by_test_id("approve-button").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("Approved", timeout=SLOW)
    expect(page.get_by_test_id("tool-output")).to_have_text("(no output)", timeout=SLOW)
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("[demo]", timeout=SLOW)
    expect_finished(page)
    expect(card.get_by_test_id("approve-button")).to_have_count(0)  # decided: read-only
    assert read_when(target, "approved-once\n") == "approved-once\n"
    time.sleep(1)
    assert target.read_text(encoding="utf-8").splitlines() == ["approved-once"]


def test_edit_runs_the_edited_command(page: Page, server: Server) -> None:
    original = server.home / "workspace" / "approvals-b-original.txt"
    edited = server.home / "workspace" / "approvals-b-edited.txt"
    _, card = pause_on(page, server, f"echo original >> workspace/{original.name}")
    card.get_by_test_id("edit-button").click()
    editor = card.get_by_test_id("args-editor")
    expect(editor).to_have_value(
        re.compile(r'"command": "echo original >> workspace/approvals-b-original.txt"')
    )
    # invalid arguments are refused before anything is sent
    editor.fill('{"command": ')
    expect(card.get_by_test_id("args-error")).to_contain_text("Not valid JSON")
    expect(card.get_by_test_id("edit-submit")).to_be_disabled()
    editor.fill('["echo"]')
    expect(card.get_by_test_id("args-error")).to_contain_text("must be a JSON object")
    expect(card.get_by_test_id("edit-submit")).to_be_disabled()
    editor.fill(f'{{"command": "echo edited >> workspace/{edited.name}"}}')
    expect(card.get_by_test_id("args-error")).to_have_count(0)
    card.get_by_test_id("edit-submit").click()

    decision = card.get_by_test_id("card-decision")
    expect(decision).to_contain_text("Edited and approved", timeout=SLOW)
    expect(decision).to_contain_text(f"echo edited >> workspace/{edited.name}")
    expect(page.get_by_test_id("tool-input")).to_have_text(f"echo edited >> workspace/{edited.name}")
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("[demo]", timeout=SLOW)
    expect_finished(page)
    screenshot(page, "approval-card-edited")
    assert read_when(edited, "edited\n") == "edited\n"
    assert not original.exists(), "the original command ran"


def test_reject_with_a_message(page: Page, server: Server) -> None:
    target = server.home / "workspace" / "approvals-c.txt"
    _, card = pause_on(page, server, f"echo never >> workspace/{target.name}")
    card.get_by_test_id("reject-button").click()
    card.get_by_test_id("reject-message").fill("not on my machine")
    card.get_by_test_id("reject-submit").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("Rejected: not on my machine", timeout=SLOW)
    reply = page.get_by_test_id("assistant-bubble").last
    expect(reply).to_contain_text("rejected", timeout=SLOW)
    expect(reply).to_contain_text("not on my machine")
    expect_finished(page)
    time.sleep(1)
    assert not target.exists(), "a rejected command ran"


def test_question_card_in_chinese(page: Page, server: Server) -> None:
    open_app(page, server.url)
    page.get_by_test_id("lang-toggle").click()
    expect(page.get_by_test_id("new-session")).to_contain_text("新对话")
    new_chat(page)
    submit(page, "ask: 你喜欢什么颜色？")
    card = page.get_by_test_id("question-card")
    expect(card).to_be_visible(timeout=SLOW)
    expect(card).to_contain_text("智能体向你提问")
    expect(card.get_by_test_id("question-text")).to_have_text("你喜欢什么颜色？")
    expect(page.get_by_test_id("waiting-badge")).to_have_text("等待你的决定")
    expect(card.get_by_test_id("decline-button")).to_have_text("不回答")
    expect(card.get_by_test_id("answer-submit")).to_be_disabled()  # no empty answer
    card.get_by_test_id("answer-input").fill("蓝色")
    expect(card.get_by_test_id("answer-submit")).to_be_enabled()
    screenshot(page, "question-card")
    card.get_by_test_id("answer-submit").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("已回答：蓝色", timeout=SLOW)
    expect(page.get_by_test_id("assistant-bubble").last).to_have_text(
        "[demo] You answered: 蓝色", timeout=SLOW
    )
    expect_finished(page)


def test_decline_a_question(page: Page, server: Server) -> None:
    open_app(page, server.url)
    new_chat(page)
    submit(page, "ask: may I?")
    card = page.get_by_test_id("question-card")
    expect(card).to_be_visible(timeout=SLOW)
    card.get_by_test_id("decline-button").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("Declined", timeout=SLOW)
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("rejected", timeout=SLOW)
    expect_finished(page)


def test_a_waiting_chat_survives_a_reload(page: Page, server: Server) -> None:
    target = server.home / "workspace" / "approvals-e.txt"
    open_app(page, server.url)
    session_id = new_chat(page)
    submit(page, f"run: echo after-reload >> workspace/{target.name}")
    expect(page.get_by_test_id("approval-card")).to_be_visible(timeout=SLOW)
    expect_waiting(page)

    page.reload()
    badge = page.locator(f'[data-session-id="{session_id}"] [data-testid="session-waiting"]')
    expect(badge).to_be_visible(timeout=SLOW)  # the session list says it waits
    page.locator(f'[data-session-id="{session_id}"] .session-title').click()
    card = page.get_by_test_id("approval-card")
    expect(card).to_be_visible(timeout=SLOW)
    expect(card.get_by_test_id("approval-args")).to_contain_text("echo after-reload")
    expect(page.get_by_test_id("tool-awaiting")).to_be_visible()  # the paused call, from the history
    expect_waiting(page)
    page.get_by_test_id("theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.wait_for_timeout(400)  # let the colour transitions finish
    screenshot(page, "approval-card-dark")

    card.get_by_test_id("approve-button").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("Approved", timeout=SLOW)
    expect(page.get_by_test_id("tool-output")).to_have_text("(no output)", timeout=SLOW)
    expect_finished(page)
    assert read_when(target, "after-reload\n") == "after-reload\n"
    # the finished chat, opened again, has no card and does not wait
    page.reload()
    expect(page.locator(f'[data-session-id="{session_id}"]')).to_be_visible()
    expect(badge).to_have_count(0)
    page.locator(f'[data-session-id="{session_id}"] .session-title').click()
    expect(page.get_by_test_id("tool-output")).to_have_text("(no output)")
    expect(page.get_by_test_id("approval-card")).to_have_count(0)
    expect(page.get_by_test_id("chat-input")).to_be_enabled()


def test_a_decision_made_elsewhere_is_shown(page: Page, server: Server, page_errors: PageErrors) -> None:
    page_errors.allow.append("409 (Conflict)")
    target = server.home / "workspace" / "approvals-g.txt"
    session_id, card = pause_on(page, server, f"echo elsewhere >> workspace/{target.name}")
    approval_id = card.get_attribute("data-approval-id")
    # someone else (another tab, the API) rejects it first
    answer = server.api(
        "POST",
        f"/api/sessions/{session_id}/approvals/{approval_id}",
        json={"decision": "reject", "message": "from elsewhere", "stream": False},
    )
    assert answer.status_code == 200, answer.text
    card.get_by_test_id("approve-button").click()
    expect(card.get_by_test_id("card-error")).to_contain_text("already decided (reject)", timeout=SLOW)
    expect(card.get_by_test_id("card-decision")).to_have_text("Rejected")
    expect(card.get_by_test_id("approve-button")).to_have_count(0)
    expect(page.get_by_test_id("chat-input")).to_be_enabled()
    assert not target.exists()


def test_cancel_a_waiting_turn(page: Page, server: Server) -> None:
    target = server.home / "workspace" / "approvals-h.txt"
    session_id, card = pause_on(page, server, f"echo cancelled >> workspace/{target.name}")
    page.get_by_test_id("cancel-turn").click()
    expect(card.get_by_test_id("card-decision")).to_contain_text("Cancelled")
    expect(page.get_by_test_id("waiting-badge")).to_have_count(0)
    expect(page.get_by_test_id("chat-input")).to_be_enabled()
    assert server.api("GET", f"/api/sessions/{session_id}/approvals").json()["waiting"] is False
    # the chat goes on
    submit(page, "hello again")
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("hello again", timeout=SLOW)
    assert not target.exists()


def test_policy_panel_edits_the_tool_approvals(page: Page, server: Server) -> None:
    open_app(page, server.url)
    page.get_by_test_id("tab-approvals").click()
    panel = page.get_by_test_id("approval-policies")
    expect(panel.get_by_test_id("policy-terminal")).to_have_value("ask")
    expect(panel.get_by_test_id("policy-ask_user").locator("option")).to_have_count(2)  # ask or deny only
    try:
        panel.get_by_test_id("policy-python_repl").select_option("deny")
        expect(page.get_by_test_id("notice")).to_contain_text("python_repl → deny")
        policies = server.api("GET", "/api/config/tool-approvals").json()
        assert policies["configured"] == {"terminal": "ask", "python_repl": "deny"}
        # Chinese labels; the choice is still there after a reload
        page.get_by_test_id("lang-toggle").click()
        page.reload()
        page.get_by_test_id("tab-approvals").click()
        select = page.get_by_test_id("policy-python_repl")
        expect(select).to_have_value("deny")
        expect(select.locator("option:checked")).to_have_text("拒绝")
        screenshot(page, "approval-policies")
        select.select_option("allow")
        expect(page.get_by_test_id("notice")).to_contain_text("已保存审批策略")
        assert server.api("GET", "/api/config/tool-approvals").json()["policies"]["python_repl"] == "allow"
    finally:
        server.api("PUT", "/api/config/tool-approvals", json={"policies": {"terminal": "ask"}})


def test_a_waiting_chat_survives_a_server_restart(
    page: Page, page_errors: PageErrors, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the page may try the server while it is down (a stream reconnecting, a poll): expected here
    page_errors.allow.append("net::ERR_CONNECTION_REFUSED")
    base, port = tmp_path_factory.mktemp("e2e-approvals-restart"), free_port()
    own = start_serve(base, port)
    try:
        policy = own.api("PUT", "/api/config/tool-approvals", json={"policies": {"terminal": "ask"}})
        assert policy.status_code == 200, policy.text
        target = own.home / "workspace" / "approvals-restart.txt"
        open_app(page, own.url)
        session_id = new_chat(page)
        submit(page, f"run: echo after-restart >> workspace/{target.name}")
        expect(page.get_by_test_id("approval-card")).to_be_visible(timeout=SLOW)
        expect_waiting(page)

        stop_serve(own)
        own = start_serve(base, port)
        page.reload()
        page.locator(f'[data-session-id="{session_id}"] .session-title').click()
        card = page.get_by_test_id("approval-card")
        expect(card).to_be_visible(timeout=SLOW)
        expect_waiting(page)
        card.get_by_test_id("approve-button").click()
        expect(page.get_by_test_id("tool-output")).to_have_text("(no output)", timeout=SLOW)
        expect_finished(page)
        assert read_when(target, "after-restart\n") == "after-restart\n"
    finally:
        stop_serve(own)
