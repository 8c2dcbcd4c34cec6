"""Signing in (issue 9): against a ``clawlet serve`` with ``CLAWLET_API_TOKEN``, both UIs show a
sign-in screen first, refuse a wrong token (without keeping it), keep the right one in localStorage
(never in a URL), send it on every request and stream, and go back to the sign-in screen, saying
why, on a 401 or the Sign out button. Without a token (the default) there is no sign-in screen.

Screenshots (``signin-*.png``) go to the e2e artifacts directory.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Request, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.e2e.conftest import TOKEN, PageErrors, Server, TokenServer, screenshot

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`

LIVE = 15_000  # ms
DESKTOP: dict[str, Any] = {"viewport": {"width": 1440, "height": 900}, "is_mobile": False, "has_touch": False}
TOKEN_KEY = "clawlet.token"
REFUSED = "That token was refused. Check it and try again."


class ApiRequests:
    """Every request the page makes to the guarded API, with the Authorization header it carried."""

    def __init__(self, page: Page) -> None:
        self.seen: list[tuple[str, str | None]] = []
        page.on("request", self.record)

    def record(self, request: Request) -> None:
        path = re.sub(r"^https?://[^/]+", "", request.url)
        if path.startswith("/api/"):
            self.seen.append((path, request.headers.get("authorization")))

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]


def stored_token(page: Page) -> str | None:
    token: str | None = page.evaluate(f"localStorage.getItem('{TOKEN_KEY}')")
    return token


def sign_in(page: Page, token: str) -> None:
    page.get_by_test_id("signin-token").fill(token)
    page.get_by_test_id("signin-submit").click()


def test_no_sign_in_screen_without_a_token(new_mobile_page: Callable[..., Page], server: Server) -> None:
    page = new_mobile_page(**DESKTOP)
    page.goto(server.url)
    expect(page.get_by_test_id("model-label")).to_contain_text("demo")
    expect(page.get_by_test_id("signin")).to_have_count(0)
    expect(page.get_by_test_id("sign-out")).to_have_count(0)  # nothing to sign out of
    phone = new_mobile_page()
    phone.goto(f"{server.url}/inbox/")
    expect(phone.get_by_test_id("agent-grid")).to_be_visible()
    expect(phone.get_by_test_id("signin")).to_have_count(0)
    expect(phone.get_by_test_id("sign-out")).to_have_count(0)


def test_workbench_sign_in_with_a_token_and_see_a_wrong_token_refused(
    new_mobile_page: Callable[..., Page], token_server: TokenServer, page_errors: PageErrors
) -> None:
    page = new_mobile_page(**DESKTOP)
    requests = ApiRequests(page)
    page.goto(token_server.url)
    expect(page.get_by_test_id("signin")).to_be_visible()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_test_id("signin-reason")).to_have_count(0)
    expect(page.get_by_test_id("model-label")).to_have_count(0)
    assert requests.seen == []  # nothing of the workbench ran before signing in
    screenshot(page, "signin-workbench")

    # a wrong token is refused, and not kept (checking it is no failed request: /auth says so)
    sign_in(page, "not-the-token")
    expect(page.get_by_test_id("signin-error")).to_have_text(REFUSED)
    expect(page.get_by_test_id("signin")).to_be_visible()
    assert stored_token(page) is None
    screenshot(page, "signin-refused")
    page.get_by_test_id("signin-token").fill("")
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("signin-error")).to_have_text("Enter the token.")

    # the right one: the workbench works, the token is kept in localStorage, not in the URL
    sign_in(page, token_server.token)
    expect(page.get_by_test_id("model-label")).to_contain_text("demo")
    assert stored_token(page) == token_server.token
    assert token_server.token not in page.url
    page.wait_for_load_state("networkidle")
    sessions = page.get_by_test_id("session-item").count()
    page.get_by_test_id("new-session").click()
    expect(page.get_by_test_id("session-item")).to_have_count(sessions + 1)
    box = page.get_by_test_id("chat-input")
    box.fill("hello from a signed-in browser")
    box.press("Enter")
    reply = page.get_by_test_id("assistant-bubble").last
    expect(reply).to_contain_text("hello from a signed-in browser", timeout=LIVE)  # the demo echo, streamed
    expect(page.get_by_test_id("send-button")).to_be_visible()
    expect(reply).not_to_have_class(re.compile("streaming"))
    assert "/api/chat" in requests.paths() and "/api/status" in requests.paths()
    assert {auth for _, auth in requests.seen} == {f"Bearer {token_server.token}"}, requests.seen
    screenshot(page, "signin-workbench-chat")

    # Sign out: back to the screen, the token forgotten
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("signin-reason")).to_have_text("Signed out.")
    assert stored_token(page) is None

    # signed in again, then the kept token stops being accepted: the next request's 401 signs out
    sign_in(page, token_server.token)
    expect(page.get_by_test_id("model-label")).to_contain_text("demo")
    page.wait_for_load_state("networkidle")
    page.evaluate(f"localStorage.setItem('{TOKEN_KEY}', 'changed-elsewhere')")
    page_errors.allow.append("401 (Unauthorized)")
    # any request now gets the 401: this click's, or one the page was making anyway (then the
    # button is gone before the click lands, which is fine)
    with contextlib.suppress(PlaywrightTimeoutError):
        page.get_by_test_id("new-session").click(timeout=5_000)
    expect(page.get_by_test_id("signin-reason")).to_have_text("Signed out: the token was refused.")
    expect(page.get_by_test_id("signin-reason")).to_have_attribute("role", "alert")
    expect(page.get_by_test_id("model-label")).to_have_count(0)
    assert stored_token(page) is None
    screenshot(page, "signin-workbench-signed-out")

    # a reload starts at the sign-in screen (nothing kept), in the language chosen there
    page.get_by_test_id("signin-lang").click()
    expect(page.get_by_role("heading", name="登录")).to_be_visible()
    page.reload()
    expect(page.get_by_role("heading", name="登录")).to_be_visible()
    expect(page.get_by_test_id("signin-reason")).to_have_count(0)
    sign_in(page, "还是不对")
    expect(page.get_by_test_id("signin-error")).to_have_text("令牌被拒绝，请检查后重试。")
    sign_in(page, token_server.token)
    expect(page.get_by_test_id("sign-out")).to_have_text("退出登录")


def test_inbox_sign_in_live_updates_and_a_restart_with_another_token(
    new_mobile_page: Callable[..., Page], token_server: TokenServer, page_errors: PageErrors
) -> None:
    page = new_mobile_page()
    requests = ApiRequests(page)
    response = token_server.api("POST", "/api/v1/agents", json={"id": "signed", "name": "Signed agent"})
    assert response.status_code in (201, 409), response.text

    page.goto(f"{token_server.url}/inbox/agents/signed")
    expect(page.get_by_test_id("signin")).to_be_visible()
    expect(page.get_by_test_id("signin").locator(".signin-app")).to_have_text("Agent Inbox")
    sign_in(page, "wrong")
    expect(page.get_by_test_id("signin-error")).to_have_text(REFUSED)
    assert stored_token(page) is None
    screenshot(page, "signin-inbox-refused")

    # signed in: the page asked for loads, with live updates over the token-carrying stream
    with page.expect_response(lambda response: response.url.endswith("/api/v1/events")) as stream:
        sign_in(page, token_server.token)
    assert stream.value.status == 200  # the event stream is open: it carries the token too
    expect(page.get_by_test_id("agent-inbox-page")).to_be_visible()
    expect(page.get_by_text("Loading…")).to_have_count(0)
    expect(page).to_have_url(f"{token_server.url}/inbox/agents/signed")
    assert stored_token(page) == token_server.token
    expect(page.get_by_test_id("reconnecting-banner")).to_have_count(0)

    box = page.get_by_test_id("new-task")
    box.fill("run: sleep 1")
    box.press("Enter")
    task = page.get_by_test_id("task-item").first
    expect(task.get_by_test_id("task-title")).to_have_text("run: sleep 1")
    expect(task).to_have_attribute("data-status", "running", timeout=LIVE)
    expect(task).to_have_attribute("data-status", "completed", timeout=LIVE)
    body = {"content": "made elsewhere 别处", "agentId": "signed"}
    created = token_server.api("POST", "/api/v1/tasks", json=body)
    assert created.status_code == 201, created.text
    row = page.locator(f'[data-testid="task-item"][data-task-id="{created.json()["id"]}"]')
    expect(row).to_have_attribute("data-status", "completed", timeout=LIVE)
    assert "/api/v1/events" in requests.paths()
    assert {auth for _, auth in requests.seen} == {f"Bearer {token_server.token}"}, requests.seen
    screenshot(page, "signin-inbox")

    # Sign out on the agent list, then in again
    page.get_by_test_id("back").click()
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("signin-reason")).to_have_text("Signed out.")
    assert stored_token(page) is None
    sign_in(page, token_server.token)
    expect(page.get_by_test_id("agent-grid")).to_be_visible()

    # the server restarts with another token: the stream's reconnect (and the polling) get a 401
    # (and the open stream is cut: Chromium says its chunked body is incomplete)
    expected = ["401 (Unauthorized)", "ERR_CONNECTION_REFUSED", "ERR_EMPTY_RESPONSE", "INCOMPLETE_CHUNKED"]
    page_errors.allow.extend(expected)
    try:
        token_server.restart("a-new-token")
        reason = page.get_by_test_id("signin-reason")
        expect(reason).to_have_text("Signed out: the token was refused.", timeout=LIVE)
        assert stored_token(page) is None
        screenshot(page, "signin-inbox-signed-out")
        sign_in(page, TOKEN)  # the old one is refused now
        expect(page.get_by_test_id("signin-error")).to_have_text(REFUSED)
        sign_in(page, "a-new-token")
        expect(page.get_by_test_id("agent-grid")).to_be_visible()
        expect(page.locator('[data-testid="agent-card"][data-agent-id="signed"]')).to_be_visible()
        expect(page.get_by_test_id("sign-out")).to_have_attribute("aria-label", "Sign out")
        screenshot(page, "signin-inbox-agents")
    finally:
        token_server.restart(TOKEN)
