"""Waiting tasks in the mobile inbox (issue 9), in a real browser at a phone's size (390×844, touch)
against a real ``clawlet serve`` with the demo model: a task whose agent asks a question
(``ask: …``) lands in "Needs reply", is opened and answered in the reply box, and completes;
another is answered on its question card, another declined there (in Chinese); a tool call waiting for
approval (``terminal`` set to ``ask``) is approved from the phone and runs exactly once, another is
edited and runs with the edited arguments; in Chinese one is rejected with a reason and never runs.
No console errors.

Screenshots: ``inbox-waiting.png`` (the approval card), ``inbox-waiting-list.png``,
``inbox-waiting-question.png``, ``inbox-question-card.png``, ``inbox-waiting-edit.png``,
``inbox-waiting-zh.png``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Server, create_task, screenshot, wait_status

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`

LIVE = 30_000  # ms: a demo reply takes well under a second, but the machine may be busy


def set_terminal_policy(server: Server, policy: str) -> None:
    response = server.api("PUT", "/api/config/tool-approvals", json={"policies": {"terminal": policy}})
    assert response.status_code == 200, response.text


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@contextmanager
def waiting_task(server: Server, command: str) -> Iterator[str]:
    """With ``terminal`` set to ``ask``: a task running ``command``, waiting for its approval (the
    policy is back to ``allow`` afterwards); its id."""
    set_terminal_policy(server, "ask")
    try:
        task = create_task(server, f"run: {command}")
        wait_status(server, task["id"], "waiting")
        yield str(task["id"])
    finally:
        set_terminal_policy(server, "allow")


def header_badge(page: Page) -> Any:
    return page.locator(".appbar").get_by_test_id("status-badge")


def test_a_question_goes_to_needs_reply_and_the_answer_completes_it(
    mobile_page: Page, server: Server
) -> None:
    page = mobile_page
    page.goto(f"{server.url}/inbox/agents/main")
    expect(page.get_by_test_id("agent-inbox-page")).to_be_visible()
    box = page.get_by_test_id("new-task")
    box.fill("ask: Which city should I book the hotel in?")
    box.press("Enter")
    expect(box).to_have_value("")

    # the run pauses: the task needs a reply, and the "Needs reply" tab shows it
    row = page.get_by_test_id("task-item").first
    expect(row).to_have_attribute("data-status", "waiting", timeout=LIVE)
    expect(row.get_by_test_id("status-badge")).to_have_text("Needs reply")
    task_id = row.get_attribute("data-task-id")
    page.get_by_test_id("filter-waiting").click()
    expect(page.get_by_test_id("filter-waiting")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_test_id("filter-waiting")).to_contain_text("1")
    waiting_rows = page.get_by_test_id("task-item")
    expect(waiting_rows).to_have_count(1)
    expect(waiting_rows.first).to_have_attribute("data-task-id", task_id or "")
    expect(waiting_rows.first.get_by_test_id("task-preview")).to_contain_text("Which city")
    screenshot(page, "inbox-waiting-list")

    # the detail: the question is the agent's message; the composer answers it
    waiting_rows.first.click()
    expect(page).to_have_url(f"{server.url}/inbox/agents/main/tasks/{task_id}")
    expect(header_badge(page)).to_have_attribute("data-status", "waiting")
    question = page.get_by_test_id("agent-bubble")
    expect(question).to_have_count(1)
    expect(question).to_contain_text("❓ Which city should I book the hotel in?")
    card = page.get_by_test_id("question-card")
    expect(card.get_by_test_id("question-text")).to_have_text("Which city should I book the hotel in?")
    answer = page.get_by_test_id("reply")
    expect(answer).to_have_attribute("placeholder", "Type your answer… (Enter to send)")
    expect(page.get_by_test_id("approval-card")).to_have_count(0)
    screenshot(page, "inbox-waiting-question")

    answer.fill("Hangzhou, near the West Lake")
    answer.press("Enter")
    expect(answer).to_have_value("")
    users = page.get_by_test_id("user-bubble")
    expect(users.nth(1).get_by_test_id("bubble-text")).to_have_text("Hangzhou, near the West Lake")
    expect(header_badge(page)).to_have_attribute("data-status", "completed", timeout=LIVE)
    replies = page.get_by_test_id("agent-bubble")
    expect(replies).to_have_count(2)
    expect(replies.nth(1).get_by_test_id("bubble-text")).to_have_text(
        "[demo] You answered: Hangzhou, near the West Lake"
    )
    expect(users).to_have_count(2)  # the answer shows once (its optimistic copy was replaced)
    expect(page.get_by_test_id("question-card")).to_have_count(0)
    expect(page.get_by_test_id("reply")).to_have_attribute(
        "placeholder", "Continue the conversation… (Enter to send, Shift+Enter for a new line)"
    )

    # back in the inbox the Needs reply tab is empty again
    page.get_by_test_id("back").click()
    expect(page.get_by_test_id("task-item").first).to_have_attribute("data-status", "completed")
    page.get_by_test_id("filter-waiting").click()
    expect(page.get_by_test_id("tasks-empty")).to_have_text("No tasks here.")


def open_question(page: Page, server: Server, question: str) -> Any:
    """A task whose agent asks ``question``, opened on the phone; its question card."""
    task = create_task(server, f"ask: {question}")
    wait_status(server, task["id"], "waiting")
    page.goto(f"{server.url}/inbox/agents/main/tasks/{task['id']}")
    card = page.get_by_test_id("question-card")
    expect(card.get_by_test_id("question-text")).to_have_text(question)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    return card


def test_a_question_is_answered_on_its_card_and_the_run_continues_with_the_answer(
    mobile_page: Page, server: Server
) -> None:
    page = mobile_page
    card = open_question(page, server, "Which airport?")
    expect(card).to_contain_text("The agent asks you")
    expect(card.get_by_test_id("answer-submit")).to_be_disabled()  # not with nothing typed
    card.get_by_test_id("answer-input").fill("Pudong")
    screenshot(page, "inbox-question-card")
    card.get_by_test_id("answer-submit").tap()
    expect(header_badge(page)).to_have_attribute("data-status", "completed", timeout=LIVE)
    expect(page.get_by_test_id("question-card")).to_have_count(0)
    users = page.get_by_test_id("user-bubble")
    expect(users).to_have_count(2)
    expect(users.nth(1).get_by_test_id("bubble-text")).to_have_text("Pudong")
    expect(page.get_by_test_id("agent-bubble").nth(1).get_by_test_id("bubble-text")).to_have_text(
        "[demo] You answered: Pudong"
    )


def test_a_question_is_declined_on_its_card_in_chinese(
    new_mobile_page: Callable[..., Page], server: Server
) -> None:
    page = new_mobile_page(locale="zh-CN")
    card = open_question(page, server, "Which hotel?")
    expect(card).to_contain_text("智能体向你提问")
    card.get_by_test_id("decline-button").tap()
    expect(header_badge(page)).to_have_text("已完成", timeout=LIVE)
    expect(page.get_by_test_id("question-card")).to_have_count(0)
    expect(page.get_by_test_id("user-bubble").nth(1).get_by_test_id("bubble-text")).to_have_text(
        "🚫 Rejected"
    )
    expect(page.get_by_test_id("agent-bubble")).to_have_count(2)


def test_a_tool_call_is_approved_from_the_phone_and_runs_once(mobile_page: Page, server: Server) -> None:
    side = server.home / "workspace" / "phone.txt"
    command = "echo from-the-phone >> workspace/phone.txt && wc -l < workspace/phone.txt"
    with waiting_task(server, command) as task_id:
        assert not side.exists(), "the command ran before it was approved"

        page = mobile_page
        page.goto(f"{server.url}/inbox/agents/main/tasks/{task_id}")
        card = page.get_by_test_id("approval-card")
        expect(card).to_be_visible()
        expect(card.get_by_test_id("approval-title")).to_have_text("Allow terminal to run?")
        expect(card.get_by_test_id("approval-input")).to_have_text(command)
        expect(card.get_by_test_id("approve-button")).to_have_text("Approve")
        expect(card.get_by_test_id("reject-button")).to_have_text("Reject")
        expect(page.get_by_test_id("reply")).to_have_count(0)  # buttons decide, not the text box
        bubble = page.get_by_test_id("agent-bubble")
        expect(bubble).to_contain_text("May I run terminal with this input?")
        expect(bubble.locator("pre code")).to_have_text(command)  # Markdown: a code block
        # the card fits the phone's width (nothing scrolls sideways)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(page, "inbox-waiting")

        card.get_by_test_id("approve-button").tap()
        expect(header_badge(page)).to_have_attribute("data-status", "completed", timeout=LIVE)
        expect(page.get_by_test_id("approval-card")).to_have_count(0)
        expect(page.get_by_test_id("user-bubble").nth(1).get_by_test_id("bubble-text")).to_have_text(
            "✅ Approved"
        )
        reply = page.get_by_test_id("agent-bubble").nth(1)
        expect(reply).to_contain_text("returned")
        expect(reply.locator("pre code")).to_have_text("1")
        assert lines_of(side) == ["from-the-phone"]  # exactly once


def test_a_tool_call_is_edited_from_the_phone_and_runs_with_the_edited_arguments(
    mobile_page: Page, server: Server
) -> None:
    side = server.home / "workspace" / "edited-phone.txt"
    with waiting_task(server, "echo original >> workspace/edited-phone.txt") as task_id:
        page = mobile_page
        page.goto(f"{server.url}/inbox/agents/main/tasks/{task_id}")
        card = page.get_by_test_id("approval-card")
        card.get_by_test_id("edit-button").tap()
        editor = card.get_by_test_id("args-editor")
        expect(editor).to_have_value('{\n  "command": "echo original >> workspace/edited-phone.txt"\n}')
        editor.fill('{"command": ')
        expect(card.get_by_test_id("args-error")).to_contain_text("Not valid JSON")
        expect(card.get_by_test_id("edit-submit")).to_be_disabled()
        edited = "echo edited >> workspace/edited-phone.txt"
        editor.fill(f'{{"command": "{edited}"}}')
        expect(card.get_by_test_id("args-error")).to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(page, "inbox-waiting-edit")
        assert not side.exists(), "the command ran before it was approved"

        card.get_by_test_id("edit-submit").tap()
        expect(header_badge(page)).to_have_attribute("data-status", "completed", timeout=LIVE)
        expect(page.get_by_test_id("approval-card")).to_have_count(0)
        said = page.get_by_test_id("user-bubble").nth(1).get_by_test_id("bubble-text")
        expect(said).to_contain_text("✏️ Approved with edited input")
        expect(said).to_contain_text(edited)  # the user's text as typed, not Markdown
        expect(page.get_by_test_id("agent-bubble").nth(1)).to_contain_text("returned")
        assert lines_of(side) == ["edited"]  # the edited command, once; the original never ran


def test_rejected_in_chinese_with_a_reason_it_never_runs(
    new_mobile_page: Callable[..., Page], server: Server
) -> None:
    side = server.home / "workspace" / "rejected.txt"
    with waiting_task(server, "echo no > workspace/rejected.txt") as task_id:
        page = new_mobile_page(locale="zh-CN")
        page.goto(f"{server.url}/inbox/agents/main/tasks/{task_id}")
        card = page.get_by_test_id("approval-card")
        expect(card.get_by_test_id("approval-title")).to_have_text("允许运行 terminal 吗？")
        expect(header_badge(page)).to_have_text("需回复")
        reason = card.get_by_test_id("reject-reason")
        expect(reason).to_have_attribute("placeholder", "拒绝理由（可选）")
        reason.fill("不要在我的电脑上运行")
        reason.press("Enter")  # Enter decides nothing
        expect(card).to_be_visible()
        screenshot(page, "inbox-waiting-zh")
        card.get_by_test_id("reject-button").tap()
        expect(header_badge(page)).to_have_text("已完成", timeout=LIVE)
        expect(page.get_by_test_id("user-bubble").nth(1).get_by_test_id("bubble-text")).to_have_text(
            "🚫 Rejected: 不要在我的电脑上运行"
        )
        expect(page.get_by_test_id("agent-bubble").nth(1)).to_contain_text("不要在我的电脑上运行")
        assert not side.exists()
