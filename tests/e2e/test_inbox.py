"""The mobile task inbox (``/inbox``) in a real browser at a phone's size (390×844, touch) against a
real ``clawlet serve`` running the demo model: agents, tasks running live, the conversation,
renaming, filters, search, swipe to delete, polling without SSE, offline use and notifications.

Screenshots (``inbox-*.png``) go to the e2e artifacts directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import PageErrors, Server, create_task, screenshot, wait_status

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`

LIVE = 15_000  # ms: a demo reply takes well under a second; `run: sleep N` N seconds more


# --------------------------------------------------------------------------------------------
# helpers


def ensure_agent(server: Server, agent_id: str, name: str, description: str | None = None) -> None:
    body: dict[str, Any] = {"id": agent_id, "name": name}
    if description:
        body["description"] = description
    response = server.api("POST", "/api/v1/agents", json=body)
    assert response.status_code in (201, 409), response.text


def open_inbox(page: Page, server: Server, agent_id: str) -> None:
    page.goto(f"{server.url}/inbox/agents/{agent_id}")
    expect(page.get_by_test_id("agent-inbox-page")).to_be_visible()
    expect(page.get_by_text("Loading…")).to_have_count(0)


def item(page: Page, task_id: str) -> Locator:
    return page.locator(f'[data-testid="task-item"][data-task-id="{task_id}"]')


def listed_ids(page: Page) -> list[str]:
    items = page.get_by_test_id("task-item")
    return [items.nth(i).get_attribute("data-task-id") or "" for i in range(items.count())]


def swipe_left(page: Page, target: Locator, distance: float) -> None:
    """A real touch gesture through Chromium's input pipeline, at a finger's pace (a move per
    frame) and coming to rest before lifting, so no fling follows (it would swallow the next tap)."""
    box = target.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] - 24, box["y"] + box["height"] / 2
    cdp = page.context.new_cdp_session(page)

    def touch(kind: str, at: float | None) -> None:
        points = [] if at is None else [{"x": at, "y": y}]
        cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

    try:
        touch("touchStart", x)
        steps = 12
        for step in range(1, steps + 1):
            page.wait_for_timeout(16)
            touch("touchMove", x - distance * step / steps)
        for _ in range(3):
            page.wait_for_timeout(40)
            touch("touchMove", x - distance)
        touch("touchEnd", None)
    finally:
        cdp.detach()


def bubbles_settled(page: Page) -> None:
    """No optimistic message is left waiting for (or failing to get) its server copy."""
    expect(page.locator('[data-testid="user-bubble"]:not([data-pending=""])')).to_have_count(0)


# --------------------------------------------------------------------------------------------
# page 1: agents


def test_agent_list_and_the_new_agent_form(
    mobile_page: Page, server: Server, page_errors: PageErrors
) -> None:
    page = mobile_page
    page.goto(f"{server.url}/inbox")
    expect(page).to_have_url(f"{server.url}/inbox/")  # the service worker's scope
    main = page.locator('[data-testid="agent-card"][data-agent-id="main"]')
    expect(main.get_by_test_id("default-tag")).to_have_text("Default")
    expect(main.get_by_test_id("avatar")).to_have_text("M")
    expect(main.get_by_test_id("model-tag")).to_have_text("default model")
    expect(main.get_by_test_id("task-count")).to_have_text(re.compile(r"^\d+ tasks?$"))
    expect(page.locator('link[rel="manifest"]')).to_have_attribute("href", "/inbox/manifest.webmanifest")

    # the form checks what the server checks, and says why
    page.get_by_test_id("new-agent").click()
    dialog = page.get_by_test_id("agent-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("agent-submit").click()
    expect(page.get_by_test_id("agent-id-error")).to_have_text("Enter an ID.")
    expect(page.get_by_test_id("agent-name-error")).to_have_text("Enter a name.")
    page.get_by_test_id("agent-id").fill("Travel Bot")
    expect(page.get_by_test_id("agent-id-error")).to_contain_text("lowercase letters, digits and hyphens")
    page.get_by_test_id("agent-id").fill("main")
    expect(page.get_by_test_id("agent-id-error")).to_contain_text("already exists")

    # an id taken since the list was loaded: the server's 409 lands on the field
    ensure_agent(server, "taken", "Taken")
    page_errors.allow.append("409 (Conflict)")
    page.get_by_test_id("agent-id").fill("taken")
    page.get_by_test_id("agent-name-input").fill("Someone else")
    page.get_by_test_id("agent-submit").click()
    expect(page.get_by_test_id("agent-id-error")).to_have_text("An agent with the ID “taken” already exists.")

    page.get_by_test_id("agent-id").fill("travel")
    page.get_by_test_id("agent-name-input").fill("旅行助手")
    page.get_by_test_id("agent-description").fill("Plans trips and books tickets · 规划行程、订票")
    expect(page.get_by_test_id("agent-model").locator("option")).to_have_count(1)  # no models configured
    screenshot(page, "inbox-agent-form")
    page.get_by_test_id("agent-submit").click()
    expect(dialog).to_have_count(0)
    expect(page.get_by_test_id("notice")).to_contain_text("旅行助手")

    travel = page.locator('[data-testid="agent-card"][data-agent-id="travel"]')
    expect(travel.get_by_test_id("agent-name")).to_have_text("旅行助手")
    expect(travel.get_by_test_id("avatar")).to_have_text("旅")
    expect(travel).to_contain_text("规划行程")
    expect(travel.get_by_test_id("task-count")).to_have_text("0 tasks")
    expect(travel.get_by_test_id("default-tag")).to_have_count(0)
    agents = {agent["id"]: agent for agent in server.api("GET", "/api/v1/agents").json()}
    assert agents["travel"]["name"] == "旅行助手"
    # the grid has two columns on a phone
    first, second = page.get_by_test_id("agent-card").nth(0), page.get_by_test_id("agent-card").nth(1)
    first_box, second_box = first.bounding_box(), second.bounding_box()
    assert first_box and second_box and abs(first_box["y"] - second_box["y"]) < 1
    assert second_box["x"] > first_box["x"] + first_box["width"]
    page.mouse.wheel(0, -1000)
    screenshot(page, "inbox-agents")

    # a card opens the agent's inbox, whose task count follows new tasks live
    travel.click()
    expect(page).to_have_url(f"{server.url}/inbox/agents/travel")
    expect(page.get_by_test_id("inbox-agent-name")).to_have_text("旅行助手")
    page.get_by_test_id("back").click()
    create_task(server, "count me", "travel")
    expect(travel.get_by_test_id("task-count")).to_have_text("1 task")


def test_the_model_picker_offers_the_models_of_openclaw_json(mobile_page: Page, server: Server) -> None:
    ensure_agent(server, "placeholder", "Placeholder")  # makes sure openclaw.json exists
    config_file = server.home.parent / "openclaw" / "openclaw.json"
    original = config_file.read_text(encoding="utf-8")
    config = json.loads(original)
    config.setdefault("agents", {}).setdefault("defaults", {})["models"] = {
        "openai/gpt-4o-mini": {"alias": "Mini"},
        "deepseek/deepseek-chat": {},
    }
    config_file.write_text(json.dumps(config), encoding="utf-8")
    try:
        page = mobile_page
        page.goto(f"{server.url}/inbox/")
        page.get_by_test_id("new-agent").click()
        options = page.get_by_test_id("agent-model").locator("option")
        expect(options).to_have_text(
            ["default model", "Mini (openai/gpt-4o-mini)", "deepseek-chat (deepseek/deepseek-chat)"]
        )
        page.get_by_test_id("agent-id").fill("picker")
        page.get_by_test_id("agent-name-input").fill("Picker")
        page.get_by_test_id("agent-model").select_option("openai/gpt-4o-mini")
        page.get_by_test_id("agent-submit").click()
        card = page.locator('[data-testid="agent-card"][data-agent-id="picker"]')
        expect(card.get_by_test_id("model-tag")).to_have_text("openai/gpt-4o-mini")
    finally:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config["agents"]["defaults"].pop("models", None)
        config_file.write_text(json.dumps(config), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# pages 2 and 3: a task from creation to a follow-up


def test_a_task_runs_live_and_the_conversation_continues(mobile_page: Page, server: Server) -> None:
    page = mobile_page
    ensure_agent(server, "runner", "Runner")
    open_inbox(page, server, "runner")
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

    # one step: type, Enter; it shows at once and runs
    box = page.get_by_test_id("new-task")
    box.fill("run: sleep 3")
    box.press("Enter")
    expect(box).to_have_value("")
    task = page.get_by_test_id("task-item").first
    expect(task.get_by_test_id("task-title")).to_have_text("run: sleep 3")
    expect(task).to_have_attribute("data-status", "running", timeout=LIVE)
    expect(task.get_by_test_id("status-badge")).to_have_text("Running")
    task_id = task.get_attribute("data-task-id")

    # the detail page: running, the reply streams in, then completed — no reload
    task.click()
    expect(page).to_have_url(f"{server.url}/inbox/agents/runner/tasks/{task_id}")
    expect(page.get_by_test_id("user-bubble").get_by_test_id("bubble-text")).to_have_text("run: sleep 3")
    header_badge = page.locator(".appbar").get_by_test_id("status-badge")
    expect(header_badge).to_have_attribute("data-status", "running")
    expect(page.get_by_test_id("typing-bubble")).to_be_visible()
    expect(page.get_by_test_id("stop-task")).to_be_visible()
    expect(header_badge).to_have_attribute("data-status", "completed", timeout=LIVE)
    reply = page.get_by_test_id("agent-bubble")
    expect(reply).to_have_count(1)
    expect(reply).to_contain_text("returned")
    expect(reply.locator("pre code")).to_have_text("(no output)")  # Markdown: a code block
    expect(page.get_by_test_id("typing-bubble")).to_have_count(0)
    assert page.evaluate("window.__sameDocument") is True

    # a follow-up: Shift+Enter adds a line, Enter sends; shown at once, never twice
    reply_box = page.get_by_test_id("reply")
    reply_box.click()
    reply_box.type("What did you run?")
    reply_box.press("Shift+Enter")
    reply_box.type("第二行 in Chinese")
    expect(reply_box).to_have_value("What did you run?\n第二行 in Chinese")
    expect(page.get_by_test_id("user-bubble")).to_have_count(1)
    reply_box.press("Enter")
    expect(reply_box).to_have_value("")
    users = page.get_by_test_id("user-bubble")
    expect(users).to_have_count(2)
    expect(users.nth(1).get_by_test_id("bubble-text")).to_have_text("What did you run?\n第二行 in Chinese")
    expect(reply).to_have_count(2, timeout=LIVE)
    expect(reply.nth(1)).to_contain_text("第二行 in Chinese")
    expect(reply.nth(1).locator("code").first).to_be_visible()  # the echo's `run: ls` hint
    expect(header_badge).to_have_attribute("data-status", "completed")
    bubbles_settled(page)
    page.wait_for_timeout(3500)  # a polling round later: still one copy of each message
    expect(users).to_have_count(2)
    expect(reply).to_have_count(2)
    messages = server.api("GET", f"/api/v1/tasks/{task_id}/messages").json()
    assert [m["senderType"] for m in messages] == ["user", "agent", "user", "agent"]
    times = page.locator(".bubble-meta time")
    expect(times.first).to_have_text(re.compile(r"^\d\d:\d\d$"))

    # rename: Esc cancels, Enter saves (and locks the title)
    title = page.get_by_test_id("task-detail-title")
    page.get_by_test_id("task-title-button").click()
    page.get_by_test_id("title-input").fill("Not this")
    page.get_by_test_id("title-input").press("Escape")
    expect(title).to_have_text("run: sleep 3")
    page.get_by_test_id("task-title-button").click()
    page.get_by_test_id("title-input").fill("Sleep test 睡眠测试")
    page.get_by_test_id("title-input").press("Enter")
    expect(title).to_have_text("Sleep test 睡眠测试")
    saved = server.api("GET", f"/api/v1/tasks/{task_id}").json()
    assert saved["title"] == "Sleep test 睡眠测试"
    assert saved["titleLocked"] is True
    screenshot(page, "inbox-task")

    # back in the list: the new title, the reply's preview, a relative time
    page.get_by_test_id("back").click()
    row = item(page, task_id or "")
    expect(row.get_by_test_id("task-title")).to_have_text("Sleep test 睡眠测试")
    expect(row.get_by_test_id("task-preview")).to_contain_text("[demo]")
    expect(row.get_by_test_id("task-time")).to_have_text("just now")
    assert page.evaluate("window.__sameDocument") is True


def test_stop_a_running_task(mobile_page: Page, server: Server) -> None:
    page = mobile_page
    ensure_agent(server, "stopper", "Stopper")
    task = create_task(server, "run: sleep 30", "stopper")
    wait_status(server, task["id"], "running")
    page.goto(f"{server.url}/inbox/agents/stopper/tasks/{task['id']}")
    page.get_by_test_id("stop-task").click()
    expect(page.locator(".appbar").get_by_test_id("status-badge")).to_have_text("Cancelled")
    expect(page.get_by_test_id("cancelled-note")).to_be_visible()
    expect(page.get_by_test_id("reply")).to_have_count(0)
    assert server.api("GET", f"/api/v1/tasks/{task['id']}").json()["status"] == "cancelled"


# --------------------------------------------------------------------------------------------
# the list: order, filters, search, swipe to delete


def test_order_filters_search_and_swipe_to_delete(mobile_page: Page, server: Server) -> None:
    page = mobile_page
    ensure_agent(server, "sorter", "Sorter")
    alpha = create_task(server, "alpha report\nthe secret word is zebra", "sorter")
    wait_status(server, alpha["id"], "completed")
    cancelled = create_task(server, "run: sleep 30", "sorter")
    wait_status(server, cancelled["id"], "running")
    server.api("POST", f"/api/v1/tasks/{cancelled['id']}/cancel")
    bravo = create_task(server, "bravo 蓝色 plan", "sorter")
    wait_status(server, bravo["id"], "completed")
    running = create_task(server, "run: sleep 30", "sorter")
    wait_status(server, running["id"], "running")
    try:
        open_inbox(page, server, "sorter")
        # the seed's order: running first, completed newest first, cancelled last
        expect(page.get_by_test_id("task-item")).to_have_count(4)
        assert listed_ids(page) == [running["id"], bravo["id"], alpha["id"], cancelled["id"]]
        badges = page.get_by_test_id("task-item").get_by_test_id("status-badge")
        expect(badges).to_have_text(["Running", "Completed", "Completed", "Cancelled"])
        screenshot(page, "inbox-agent")

        page.get_by_test_id("filter-running").click()
        expect(page.get_by_test_id("task-item")).to_have_count(1)
        assert listed_ids(page) == [running["id"]]
        page.get_by_test_id("filter-waiting").click()
        expect(page.get_by_test_id("task-item")).to_have_count(0)
        expect(page.get_by_test_id("tasks-empty")).to_have_text("No tasks here.")
        page.get_by_test_id("filter-completed").click()
        expect(page.get_by_test_id("task-item")).to_have_count(2)
        assert listed_ids(page) == [bravo["id"], alpha["id"]]
        expect(page.get_by_test_id("filter-completed")).to_have_attribute("aria-selected", "true")
        page.get_by_test_id("filter-all").click()
        expect(page.get_by_test_id("task-item")).to_have_count(4)

        # search titles and messages; matches are highlighted
        page.get_by_test_id("search-toggle").click()
        search = page.get_by_test_id("search-input")
        search.fill("zebra")
        results = page.get_by_test_id("search-result")
        expect(results).to_have_count(1)
        expect(results).to_have_attribute("data-task-id", alpha["id"])
        expect(results.locator("mark")).to_have_text("zebra")
        search.fill("蓝色")
        expect(results).to_have_count(1)
        expect(results).to_have_attribute("data-task-id", bravo["id"])
        expect(results.locator("mark").first).to_have_text("蓝色")
        screenshot(page, "inbox-search")
        search.fill("nothing-like-this")
        expect(page.get_by_test_id("search-empty")).to_have_text("No tasks match “nothing-like-this”.")
        page.get_by_test_id("search-close").click()

        # swipe left: a short swipe reveals Delete, a tap deletes
        row = item(page, alpha["id"])
        swipe_left(page, row, 110)
        delete = row.get_by_test_id("swipe-delete")
        expect(delete).to_be_visible()
        expect(page).to_have_url(re.compile(r"/inbox/agents/sorter$"))  # the swipe did not open the task
        screenshot(page, "inbox-swipe")
        delete.tap()
        expect(row).to_have_count(0)
        assert server.api("GET", f"/api/v1/tasks/{alpha['id']}").status_code == 404
        # a long swipe deletes at once
        swipe_left(page, item(page, cancelled["id"]), 300)
        expect(item(page, cancelled["id"])).to_have_count(0)
        assert server.api("GET", f"/api/v1/tasks/{cancelled['id']}").status_code == 404
        # a vertical-ish tap still opens a task
        item(page, bravo["id"]).tap()
        expect(page).to_have_url(re.compile(f"/tasks/{bravo['id']}$"))
    finally:
        server.api("POST", f"/api/v1/tasks/{running['id']}/cancel")


# --------------------------------------------------------------------------------------------
# real time without SSE, offline, notifications


def test_updates_arrive_by_polling_when_sse_is_blocked(
    new_mobile_page: Callable[..., Page], server: Server, page_errors: PageErrors
) -> None:
    page = new_mobile_page()
    page_errors.allow.append("net::ERR_FAILED")  # the blocked event stream
    blocked: list[str] = []

    def block(route: Any) -> None:
        blocked.append(route.request.url)
        route.abort()

    page.route("**/api/v1/events", block)
    ensure_agent(server, "poller", "Poller")
    open_inbox(page, server, "poller")
    expect(page.get_by_test_id("reconnecting-banner")).to_be_visible()

    # a task created elsewhere shows up and completes by polling alone (every 5 s)
    task = create_task(server, "hello by polling 轮询", "poller")
    row = item(page, task["id"])
    expect(row).to_be_visible(timeout=LIVE)
    expect(row).to_have_attribute("data-status", "completed", timeout=LIVE)
    expect(row.get_by_test_id("task-preview")).to_contain_text("[demo]")

    # the conversation page polls every 3 s: the follow-up's reply arrives, once
    row.click()
    expect(page.get_by_test_id("agent-bubble")).to_have_count(1)
    box = page.get_by_test_id("reply")
    box.fill("again, by polling")
    box.press("Enter")
    users = page.get_by_test_id("user-bubble")
    expect(users).to_have_count(2)
    expect(page.get_by_test_id("agent-bubble")).to_have_count(2, timeout=LIVE)
    bubbles_settled(page)
    page.wait_for_timeout(3500)
    expect(users).to_have_count(2)
    expect(users.nth(1).get_by_test_id("bubble-text")).to_have_text("again, by polling")
    assert len(blocked) >= 2, "the client keeps trying to reconnect (every 3 s)"
    screenshot(page, "inbox-polling")

    # once the stream is back, the banner goes
    page.unroute("**/api/v1/events")
    expect(page.get_by_test_id("reconnecting-banner")).to_have_count(0, timeout=LIVE)


def test_installable_and_opens_offline(
    new_mobile_page: Callable[..., Page], server: Server, page_errors: PageErrors
) -> None:
    page = new_mobile_page(service_workers="allow")
    ensure_agent(server, "offline", "Offline agent")
    task = create_task(server, "offline 离线 saved", "offline")
    wait_status(server, task["id"], "completed")

    page.goto(f"{server.url}/inbox/agents/offline")
    expect(item(page, task["id"])).to_be_visible()
    manifest = json.loads(page.evaluate("fetch('/inbox/manifest.webmanifest').then(r => r.text())"))
    assert manifest["start_url"] == "/inbox/"
    assert manifest["scope"] == "/inbox/"
    assert manifest["display"] == "standalone"
    assert {icon["sizes"] for icon in manifest["icons"] if icon["type"] == "image/png"} == {
        "192x192",
        "512x512",
    }
    icon = page.evaluate("fetch('/inbox/icon-192.png').then(r => r.headers.get('content-type'))")
    assert icon == "image/png"
    script = page.evaluate("navigator.serviceWorker.ready.then(r => r.active.scriptURL)")
    assert script == f"{server.url}/inbox/sw.js"
    page.wait_for_function("navigator.serviceWorker.controller !== null")

    # visited once under the worker: the list and the conversation are kept
    page.reload()
    expect(item(page, task["id"])).to_be_visible()
    item(page, task["id"]).click()
    expect(page.get_by_test_id("agent-bubble")).to_have_count(1)
    page.get_by_test_id("back").click()
    expect(item(page, task["id"])).to_be_visible()
    page.wait_for_function(
        """async () => {
            const cache = await caches.open('inbox-api-v1')
            const urls = (await cache.keys()).map((request) => request.url)
            const list = urls.some((url) => url.includes('agentId=offline'))
            return list && urls.some((url) => url.endsWith('/messages'))
        }"""
    )

    page_errors.allow.append("ERR_INTERNET_DISCONNECTED")
    page.context.set_offline(True)
    try:
        page.reload()
        expect(page.get_by_test_id("offline-banner")).to_have_text("Offline — showing saved tasks")
        row = item(page, task["id"])
        expect(row.get_by_test_id("task-title")).to_have_text("offline 离线 saved")
        expect(row.get_by_test_id("status-badge")).to_have_text("Completed")
        screenshot(page, "inbox-offline")
        row.click()
        expect(page.get_by_test_id("user-bubble").get_by_test_id("bubble-text")).to_have_text(
            "offline 离线 saved"
        )
        expect(page.get_by_test_id("agent-bubble")).to_have_count(1)
    finally:
        page.context.set_offline(False)
    expect(page.get_by_test_id("offline-banner")).to_have_count(0, timeout=LIVE)


NOTIFICATION_STUB = """
window.__notifications = []
const record = (via, title, options) => {
  window.__notifications.push({ via, title, body: options && options.body })
}
ServiceWorkerRegistration.prototype.showNotification = function (title, options) {
  record('service worker', title, options)
  return Promise.resolve()
}
class RecordingNotification {
  constructor(title, options) { record('page', title, options) }
  close() {}
  static get permission() { return 'granted' }
  static requestPermission() { return Promise.resolve('granted') }
}
window.Notification = RecordingNotification
let hidden = false
Object.defineProperty(Document.prototype, 'visibilityState', {
  configurable: true,
  get: () => (hidden ? 'hidden' : 'visible'),
})
Object.defineProperty(Document.prototype, 'hidden', { configurable: true, get: () => hidden })
window.__setHidden = (value) => { hidden = value; document.dispatchEvent(new Event('visibilitychange')) }
"""


@pytest.mark.parametrize(("service_workers", "via"), [("allow", "service worker"), ("block", "page")])
def test_a_notification_when_a_task_finishes_while_hidden(
    new_mobile_page: Callable[..., Page], server: Server, service_workers: str, via: str
) -> None:
    """Phones only allow notifications through the service worker; without one, the page's own
    ``Notification`` is used. Both are recorded by a stub (the code path is what is tested)."""
    page = new_mobile_page(permissions=["notifications"], service_workers=service_workers)
    page.add_init_script(NOTIFICATION_STUB)
    agent = f"notifier-{service_workers}"
    ensure_agent(server, agent, "Notifier")
    open_inbox(page, server, agent)
    if service_workers == "allow":
        page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    expect(page.get_by_test_id("notify-toggle")).to_have_attribute("aria-pressed", "true")

    # visible: no notification
    box = page.get_by_test_id("new-task")
    box.fill("while you watch")
    box.press("Enter")
    expect(page.get_by_test_id("task-item")).to_have_attribute("data-status", "completed", timeout=LIVE)
    assert page.evaluate("window.__notifications") == []

    # hidden: one notification, when it finishes
    page.evaluate("window.__setHidden(true)")
    task = create_task(server, "run: sleep 2", agent)
    expect(item(page, task["id"])).to_have_attribute("data-status", "running", timeout=LIVE)
    assert page.evaluate("window.__notifications") == []
    page.wait_for_function("window.__notifications.length > 0", timeout=LIVE)
    assert page.evaluate("window.__notifications") == [
        {"via": via, "title": "Task completed", "body": "run: sleep 2"}
    ]

    # turned off in the app: none
    page.evaluate("window.__setHidden(false)")
    page.get_by_test_id("notify-toggle").click()
    expect(page.get_by_test_id("notify-toggle")).to_have_attribute("aria-pressed", "false")
    page.evaluate("window.__setHidden(true)")
    quiet = create_task(server, "quietly", agent)
    expect(item(page, quiet["id"])).to_have_attribute("data-status", "completed", timeout=LIVE)
    assert len(page.evaluate("window.__notifications")) == 1


# --------------------------------------------------------------------------------------------
# Chinese, and pages that do not exist


def test_chinese_by_default_for_a_chinese_browser(
    new_mobile_page: Callable[..., Page], server: Server
) -> None:
    page = new_mobile_page(locale="zh-CN")
    page.goto(f"{server.url}/inbox/")
    expect(page.locator("h1")).to_have_text("智能体")
    expect(page.get_by_test_id("new-agent")).to_have_text("新建 Agent")
    main = page.locator('[data-testid="agent-card"][data-agent-id="main"]')
    expect(main.get_by_test_id("default-tag")).to_have_text("默认")
    expect(main.get_by_test_id("model-tag")).to_have_text("默认模型")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"

    main.click()
    expect(page.get_by_test_id("filter-tabs").get_by_role("tab")).to_have_text(
        [re.compile("^全部"), re.compile("^进行中"), re.compile("^需回复"), re.compile("^已完成")]
    )
    box = page.get_by_test_id("new-task")
    content = "帮我查快递，单号 SF1234567890"
    box.fill(content)
    box.press("Enter")
    row = page.get_by_test_id("task-item").first
    expect(row.get_by_test_id("task-title")).to_have_text(content[:20])  # the seed's automatic title
    expect(row.get_by_test_id("status-badge")).to_have_text("已完成", timeout=LIVE)
    expect(row.get_by_test_id("task-time")).to_have_text("刚刚")
    screenshot(page, "inbox-zh-agent")
    row.click()
    expect(page.get_by_test_id("agent-bubble")).to_contain_text("帮我查快递")
    expect(page.get_by_test_id("reply")).to_have_attribute(
        "placeholder", "继续对话…（Enter 发送，Shift+Enter 换行）"
    )
    screenshot(page, "inbox-zh-task")

    # the toggle switches language, and it is remembered
    page.get_by_test_id("back").click()
    page.get_by_test_id("back").click()
    page.get_by_test_id("lang-toggle").click()
    expect(page.locator("h1")).to_have_text("Agents")
    page.reload()
    expect(page.locator("h1")).to_have_text("Agents")


def test_unknown_pages_say_so(mobile_page: Page, server: Server, page_errors: PageErrors) -> None:
    page = mobile_page
    page_errors.allow.append("404 (Not Found)")
    page.goto(f"{server.url}/inbox/somewhere/else")
    expect(page.get_by_test_id("not-found")).to_contain_text("This page does not exist.")
    page.goto(f"{server.url}/inbox/agents/ghost")
    expect(page.get_by_test_id("agent-missing")).to_have_text("There is no agent “ghost”.")
    page.goto(f"{server.url}/inbox/agents/main/tasks/01NOSUCHTASK0000000000000")
    expect(page.get_by_test_id("task-missing")).to_contain_text("This task does not exist")
    page.get_by_role("link", name="Back to the inbox").click()
    expect(page).to_have_url(f"{server.url}/inbox/agents/main")
