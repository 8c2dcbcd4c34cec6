"""The workbench in a real browser against a real ``clawlet serve`` running the demo model."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import PageErrors, Server, free_port, screenshot, start_serve, stop_serve

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`


def open_app(page: Page, server: Server, url: str | None = None) -> None:
    page.goto(url or server.url)
    expect(page.get_by_test_id("model-label")).to_contain_text("demo")


def send(page: Page, text: str) -> None:
    box = page.get_by_test_id("chat-input")
    box.fill(text)
    box.press("Enter")
    expect(page.get_by_test_id("send-button")).to_be_visible()  # the stream has finished


def new_chat(page: Page) -> None:
    page.wait_for_load_state("networkidle")  # the session list has loaded
    before = page.get_by_test_id("session-item").count()
    page.get_by_test_id("new-session").click()
    expect(page.get_by_test_id("session-item")).to_have_count(before + 1)
    expect(page.locator(".session.active")).to_have_count(1)
    expect(page.get_by_test_id("user-bubble")).to_have_count(0)


def test_navbar_shows_the_demo_model_and_sends_a_message(page: Page, server: Server) -> None:
    open_app(page, server)
    expect(page.get_by_test_id("model-label")).to_contain_text("DEMO")
    new_chat(page)
    send(page, "hello there")
    expect(page.get_by_test_id("user-bubble").last).to_have_text("hello there")
    reply = page.get_by_test_id("assistant-bubble").last
    expect(reply).to_contain_text("hello there")
    expect(reply).not_to_have_class(re.compile("streaming"))
    # the title event renames the session in the sidebar; token usage is filled in
    active = page.locator(".session.active .title-text")
    expect(active).not_to_have_text("New conversation")
    expect(page.get_by_test_id("token-usage")).to_contain_text(re.compile(r"\d+ tokens"))


def test_a_message_typed_while_new_chat_is_being_created_goes_to_that_chat(
    page: Page, server: Server
) -> None:
    """New chat, then a message before the server has created the session: one new session, holding
    the message (a loaded machine made this race: the message created a second session)."""
    open_app(page, server)
    page.wait_for_load_state("networkidle")
    before = page.get_by_test_id("session-item").count()
    held: list[Route] = []

    def hold_creation(route: Route) -> None:
        if route.request.method == "POST":
            held.append(route)  # answered below, once the message has been typed
        else:
            route.continue_()

    page.route("**/api/sessions", hold_creation)
    page.get_by_test_id("new-session").click()
    deadline = time.monotonic() + 60
    while not held:  # the click's POST /api/sessions has reached the route
        assert time.monotonic() < deadline, "New chat sent no POST /api/sessions"
        page.wait_for_timeout(50)
    box = page.get_by_test_id("chat-input")
    box.fill("typed before the session existed")
    box.press("Enter")
    for route in list(held):
        route.continue_()
    page.unroute("**/api/sessions")
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("typed before the session existed")
    expect(page.get_by_test_id("send-button")).to_be_visible()
    expect(page.get_by_test_id("session-item")).to_have_count(before + 1)
    sessions = json.loads(urllib.request.urlopen(f"{server.url}/api/sessions", timeout=30).read())
    assert len(sessions) == before + 1, sessions


def test_tool_call_shows_a_thought_chain_and_a_second_bubble(page: Page, server: Server) -> None:
    open_app(page, server)
    new_chat(page)
    send(page, "run: echo hi")
    bubbles = page.get_by_test_id("assistant-bubble")
    expect(bubbles).to_have_count(2)
    chain = bubbles.first.get_by_test_id("thought-chain")
    expect(chain.get_by_test_id("tool-input")).to_have_text("echo hi")
    expect(chain.get_by_test_id("tool-output")).to_have_text("hi")
    expect(bubbles.nth(1)).to_contain_text("returned")
    expect(bubbles.nth(1).locator("pre code")).to_have_text("hi")  # a highlighted Markdown code block
    screenshot(page, "chat-thought-chain")

    # the same thought chain comes back from the stored history after a reload
    session_id = page.locator(".session.active").get_attribute("data-session-id")
    page.reload()
    page.locator(f'[data-session-id="{session_id}"] .session-title').click()
    expect(page.get_by_test_id("assistant-bubble")).to_have_count(2)
    expect(page.get_by_test_id("tool-output")).to_have_text("hi")
    expect(page.get_by_test_id("token-usage")).to_contain_text(re.compile(r"\d+ tokens"))

    # Raw Messages: what the model sees, system prompt first
    page.get_by_test_id("raw-toggle").click()
    raw = page.get_by_test_id("raw-message")
    expect(raw.first).to_contain_text("system")
    expect(raw.first).to_contain_text("<!-- Soul -->")
    expect(raw.nth(1)).to_contain_text("run: echo hi")
    page.get_by_test_id("raw-toggle").click()
    expect(page.get_by_test_id("assistant-bubble")).to_have_count(2)


def test_stop_cancels_a_running_turn(page: Page, server: Server) -> None:
    open_app(page, server)
    new_chat(page)
    box = page.get_by_test_id("chat-input")
    box.fill("run: sleep 600")  # longer than any wait here: only Stop ends it in time
    box.press("Enter")
    expect(page.get_by_test_id("tool-input")).to_have_text("sleep 600")
    page.get_by_test_id("stop-button").click()
    expect(page.get_by_test_id("send-button")).to_be_visible()
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("Stopped")
    session_id = page.locator(".session.active").get_attribute("data-session-id")
    deadline = time.monotonic() + 60
    while server.api("GET", f"/api/sessions/{session_id}/history").json()["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_enter_sends_and_shift_enter_adds_a_line(page: Page, server: Server) -> None:
    open_app(page, server)
    new_chat(page)
    box = page.get_by_test_id("chat-input")
    box.click()
    box.type("first line")
    box.press("Shift+Enter")
    box.type("second line")
    expect(box).to_have_value("first line\nsecond line")
    expect(page.get_by_test_id("user-bubble")).to_have_count(0)
    box.press("Enter")
    expect(page.get_by_test_id("user-bubble")).to_have_text("first line\nsecond line")
    expect(box).to_have_value("")
    expect(page.get_by_test_id("send-button")).to_be_visible()


def test_editor_saves_memory_to_disk(page: Page, server: Server) -> None:
    open_app(page, server)
    picker = page.get_by_test_id("file-picker")
    options = picker.locator("option")
    values = [options.nth(i).get_attribute("value") for i in range(options.count())]
    for expected in (
        "workspace/SOUL.md",
        "workspace/IDENTITY.md",
        "workspace/USER.md",
        "workspace/AGENTS.md",
        "memory/MEMORY.md",
        "SKILLS_SNAPSHOT.md",
        "skills/get_weather/SKILL.md",
    ):
        assert expected in values
    picker.select_option("memory/MEMORY.md")
    expect(page.get_by_test_id("file-tokens")).to_contain_text(re.compile(r"\d+ tokens"))
    editor = page.locator(".monaco-editor .view-lines")
    expect(editor).to_contain_text("MEMORY", ignore_case=True)
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type("- The e2e robot likes green tea")
    expect(page.get_by_test_id("dirty-marker")).to_be_visible()
    screenshot(page, "editor")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("dirty-marker")).to_have_count(0)
    expect(page.get_by_test_id("notice")).to_contain_text("memory/MEMORY.md")
    memory = server.home / "memory" / "MEMORY.md"
    deadline = time.monotonic() + 60
    while "The e2e robot likes green tea" not in memory.read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, memory.read_text(encoding="utf-8")
        time.sleep(0.1)

    # the skills tab lists each skill with its availability
    page.get_by_test_id("tab-skills").click()
    skill = page.get_by_test_id("skill").filter(has_text="get_weather")
    expect(skill).to_contain_text(re.compile("available|unavailable"))


def test_typing_fast_on_a_slow_machine_keeps_every_keystroke_in_place(page: Page, server: Server) -> None:
    """The editor owns its text while the user types: a render of an older value (React behind the
    keystrokes, as on a loaded machine) must not reset it and move the cursor to the start (it did:
    the CI saw "obot likes green tea# Long-term memory …- The e2e r" saved)."""
    open_app(page, server)
    editor = page.locator(".monaco-editor .view-lines")
    expect(editor).to_contain_text("MEMORY", ignore_case=True)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 20})
    try:
        editor.click()
        page.keyboard.press("Control+End")
        page.keyboard.press("Enter")
        line = "- typed on a slow machine: " + "abcdefghij" * 6
        page.keyboard.type(line)
        page.keyboard.press("Control+s")
        expect(page.get_by_test_id("dirty-marker")).to_have_count(0, timeout=60_000)
    finally:
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
    memory = server.home / "memory" / "MEMORY.md"
    deadline = time.monotonic() + 60
    while line not in memory.read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, memory.read_text(encoding="utf-8")
        time.sleep(0.1)
    assert memory.read_text(encoding="utf-8").rstrip().endswith(line)


def test_rag_mode_shows_a_retrieval_card(page: Page, server: Server) -> None:
    fact = "The secret project codename is BLUE HERON."
    current = server.api("GET", "/api/files", params={"path": "memory/MEMORY.md"}).json()["content"]
    saved = server.api(
        "POST", "/api/files", json={"path": "memory/MEMORY.md", "content": f"{current}\n\n{fact}\n"}
    )
    assert saved.status_code == 200
    open_app(page, server)
    toggle = page.get_by_test_id("rag-toggle")
    expect(toggle).not_to_be_checked()
    page.locator("label.toggle").click()
    expect(toggle).to_be_checked()
    try:
        assert server.api("GET", "/api/config/rag-mode").json() == {"enabled": True}
        new_chat(page)
        send(page, "What is the secret project codename?")
        card = page.get_by_test_id("retrieval-card")
        expect(card).to_be_visible()
        card.locator(".collapser").click()
        expect(card).to_contain_text("BLUE HERON")
        expect(card).to_contain_text("MEMORY.md")
        screenshot(page, "retrieval-card")
    finally:
        server.api("PUT", "/api/config/rag-mode", json={"enabled": False})


def test_compress_a_long_session(page: Page, server: Server, page_errors: PageErrors) -> None:
    open_app(page, server)
    new_chat(page)
    # too few messages: the server's 400 message is shown
    page_errors.allow.append("400 (Bad Request)")
    send(page, "turn one")
    page.get_by_test_id("compress-button").click()
    page.get_by_test_id("dialog-confirm").click()
    expect(page.get_by_test_id("notice")).to_contain_text("at least")
    for n in range(2, 6):
        send(page, f"turn {n}")
    page.get_by_test_id("compress-button").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    page.get_by_test_id("dialog-confirm").click()
    notice = page.get_by_test_id("notice")
    expect(notice).to_contain_text(re.compile(r"Compressed: \d+ messages archived, \d+ remain"))
    expect(page.get_by_test_id("summary-bubble")).to_be_visible()


def test_rename_and_delete_a_session(page: Page, server: Server) -> None:
    open_app(page, server)
    new_chat(page)
    item = page.locator(".session.active")
    session_id = item.get_attribute("data-session-id")
    item.hover()
    item.get_by_test_id("rename-session").click()
    field = page.get_by_test_id("rename-input")
    field.fill("My renamed chat")
    field.press("Enter")
    expect(page.locator(f'[data-session-id="{session_id}"] .title-text')).to_have_text("My renamed chat")
    assert server.api("GET", f"/api/sessions/{session_id}/history").json()["title"] == "My renamed chat"
    page.locator(f'[data-session-id="{session_id}"]').hover()
    page.locator(f'[data-session-id="{session_id}"]').get_by_test_id("delete-session").click()
    page.get_by_test_id("dialog-confirm").click()
    expect(page.locator(f'[data-session-id="{session_id}"]')).to_have_count(0)
    assert server.api("GET", f"/api/sessions/{session_id}/history").status_code == 404


def test_dark_mode_and_chinese_ui(page: Page, server: Server) -> None:
    open_app(page, server)
    new_chat(page)
    send(page, "run: echo 你好")
    page.get_by_test_id("theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.wait_for_timeout(400)  # let the colour transitions finish
    screenshot(page, "dark-mode")
    page.get_by_test_id("lang-toggle").click()
    expect(page.get_by_test_id("new-session")).to_contain_text("新对话")
    expect(page.get_by_test_id("thought-chain")).to_contain_text("思维链")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    page.get_by_test_id("theme-toggle").click()
    page.wait_for_timeout(400)
    screenshot(page, "chinese-ui")
    # both choices persist across a reload
    page.reload()
    expect(page.get_by_test_id("new-session")).to_contain_text("新对话")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")


def test_pane_widths_persist(page: Page, server: Server) -> None:
    open_app(page, server)
    sidebar = page.get_by_test_id("sidebar")
    before = sidebar.bounding_box()
    handle = page.get_by_test_id("splitter-left").bounding_box()
    assert before and handle
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 80, y, steps=5)
    page.mouse.up()
    after = settled_box(page, "sidebar", before["width"] + 80)  # React renders the last move later
    page.reload()
    expect(page.get_by_test_id("model-label")).to_be_visible()
    settled_box(page, "sidebar", after["width"])


def settled_box(page: Page, test_id: str, width: float) -> dict[str, float]:
    """The element's box once its width is ``width`` (±3 px), waiting up to a generous deadline:
    on a loaded machine the last render comes late."""
    deadline = time.monotonic() + 30
    while True:
        box = page.get_by_test_id(test_id).bounding_box()
        if box is not None and abs(box["width"] - width) <= 3:
            return dict(box)
        assert time.monotonic() < deadline, f"{test_id} is {box} wide, expected {width}"
        time.sleep(0.05)


# --- a split SSE stream, delivered in separately flushed pieces -----------------------------

SPLIT_BODY = (
    'event: tool_start\r\ndata: {"type": "tool_start", "tool": "terminal", "input": "echo 分块"}\r\n\r\n'
    'event: tool_end\ndata: {"type": "tool_end", "tool": "terminal", "output": "分块", "is_error": false}\n\n'
    ": keep-alive\n\n"
    'event: new_response\ndata: {"type": "new_response"}\n\n'
    'event: token\ndata: {"type": "token", "content": "拆开的事件"}\n\n'
    'event: token\ndata: {"type": "token", "content": " arrived whole"}\n\n'
    'event: done\ndata: {"type": "done", "content": "", "session_id": "x"}\n\n'
).encode()


def split_points(body: bytes) -> list[bytes]:
    """Pieces cut inside an event line, inside a 3-byte character and between \\r and \\n."""
    inside_char = body.index("拆".encode()) + 1
    between_crlf = body.index(b"\r\n") + 1
    inside_line = body.index(b"tool_end") + 4
    cuts = sorted({between_crlf, inside_line, inside_char, inside_char + 1})
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(body[start:cut])
        start = cut
    pieces.append(body[start:])
    return pieces


class SplittingProxy(BaseHTTPRequestHandler):
    """Forwards everything to clawlet, except POST /api/chat, which it answers in split pieces."""

    upstream = ""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
        request = urllib.request.Request(
            self.upstream + self.path, data=body, headers=headers, method=self.command
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, data, reply_headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, data, reply_headers = error.code, error.read(), error.headers
        self.send_response(status)
        self.send_header("content-type", reply_headers.get("content-type", "application/octet-stream"))
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        if self.path != "/api/chat":
            self._forward()
            return
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for piece in split_points(SPLIT_BODY):
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.15)
        self.close_connection = True


@pytest.fixture
def splitting_proxy(server: Server) -> Iterator[str]:
    handler = type("Handler", (SplittingProxy,), {"upstream": server.url})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_split_sse_events_render_correctly(page: Page, server: Server, splitting_proxy: str) -> None:
    assert len(split_points(SPLIT_BODY)) == 5
    open_app(page, server, url=splitting_proxy)
    new_chat(page)
    send(page, "anything")
    bubbles = page.get_by_test_id("assistant-bubble")
    expect(bubbles).to_have_count(2)
    expect(bubbles.first.get_by_test_id("tool-input")).to_have_text("echo 分块")
    expect(bubbles.first.get_by_test_id("tool-output")).to_have_text("分块")
    expect(bubbles.nth(1)).to_have_text("拆开的事件 arrived whole")


def test_a_turn_the_server_stopped_in_shows_as_interrupted(page: Page, tmp_path: Path) -> None:
    """A user message left unanswered when the server stopped is marked when it starts again, and
    the workbench says so where the answer would be."""
    sessions = tmp_path / "home" / "sessions"
    sessions.mkdir(parents=True)
    transcript = {"title": "cut short", "created_at": 1.0, "updated_at": 1.0, "compressed_context": ""}
    messages = [{"role": "user", "content": "run: sleep 600"}]
    (sessions / "cut.json").write_text(json.dumps({**transcript, "messages": messages}), encoding="utf-8")
    restarted = start_serve(tmp_path, free_port())
    try:
        page.goto(restarted.url)
        page.locator('[data-session-id="cut"] .session-title').click()
        expect(page.get_by_test_id("user-bubble")).to_have_text("run: sleep 600")
        notice = page.get_by_test_id("assistant-bubble").get_by_test_id("interrupted-notice")
        expect(notice).to_contain_text("the server stopped before answering")
        expect(page.get_by_test_id("assistant-bubble")).not_to_contain_text("[interrupted:")
        screenshot(page, "chat-interrupted")
        page.goto("about:blank")  # nothing polls the server once it stops
    finally:
        stop_serve(restarted)
