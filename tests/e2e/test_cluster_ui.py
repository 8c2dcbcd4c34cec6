"""The UIs in cluster mode: the control plane serves the workbench and the inbox; each user signs in
with their own API token and works with their own sessions, which run on their own execution plane
(a control plane and two execution planes as separate processes, as ``clawlet cluster`` starts them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from clawlet.cluster.local_cluster import LocalCluster
from tests.e2e.conftest import free_port, screenshot

pytestmark = pytest.mark.slow  # drives Chromium: not in `pytest -m "not slow"`

LIVE = 30_000  # ms
DESKTOP: dict[str, Any] = {"viewport": {"width": 1440, "height": 900}, "is_mobile": False, "has_touch": False}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = tmp_path_factory.mktemp("cluster-ui")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLAWLET_HOME", str(base / "home"))
        started = LocalCluster(Path(base) / "cluster", ["alice", "bob"], free_port())
        try:
            started.start()
            yield started
        finally:
            started.stop()


def sign_in(page: Page, token: str) -> None:
    page.get_by_test_id("signin-token").fill(token)
    page.get_by_test_id("signin-submit").click()


def send(page: Page, text: str) -> None:
    box = page.get_by_test_id("chat-input")
    box.fill(text)
    box.press("Enter")


def test_each_user_signs_in_to_their_own_workbench(
    new_mobile_page: Callable[..., Page], cluster: LocalCluster
) -> None:
    alice = new_mobile_page(**DESKTOP)
    alice.goto(cluster.base_url)
    expect(alice.get_by_test_id("signin")).to_be_visible()
    sign_in(alice, cluster.tokens["bob"][:-2] + "zz")  # not anybody's token
    expect(alice.get_by_test_id("signin-error")).to_be_visible()
    sign_in(alice, cluster.tokens["alice"])
    expect(alice.get_by_test_id("model-label")).to_be_visible()
    alice.wait_for_load_state("networkidle")
    alice.get_by_test_id("new-session").click()
    send(alice, "run: echo 集群里的-alice")
    reply = alice.get_by_test_id("assistant-bubble").last
    expect(reply).to_contain_text("集群里的-alice", timeout=LIVE)  # the tool ran on alice's machine
    expect(reply).not_to_have_class(re.compile("streaming"), timeout=LIVE)
    expect(alice.get_by_test_id("session-item")).to_have_count(1)
    screenshot(alice, "cluster-workbench-alice")

    # bob, in another browser, sees none of alice's sessions and chats on his own machine
    bob = new_mobile_page(**DESKTOP)
    bob.goto(cluster.base_url)
    sign_in(bob, cluster.tokens["bob"])
    expect(bob.get_by_test_id("model-label")).to_be_visible()
    bob.wait_for_load_state("networkidle")
    expect(bob.get_by_test_id("session-item")).to_have_count(0)
    bob.get_by_test_id("new-session").click()
    send(bob, "hello from bob")
    expect(bob.get_by_test_id("assistant-bubble").last).to_contain_text("hello from bob", timeout=LIVE)
    expect(bob.get_by_test_id("session-item")).to_have_count(1)
    assert (cluster.data_dir / "exec-planes" / "bob" / "sessions").is_dir()


def test_the_inbox_signs_in_on_a_phone(new_mobile_page: Callable[..., Page], cluster: LocalCluster) -> None:
    phone = new_mobile_page()
    phone.goto(f"{cluster.base_url}/inbox/")
    expect(phone.get_by_test_id("signin")).to_be_visible()
    sign_in(phone, cluster.tokens["alice"])
    expect(phone.get_by_test_id("agent-grid")).to_be_visible()
    screenshot(phone, "cluster-inbox-alice")


def test_a_tool_set_to_ask_is_approved_in_the_browser(
    new_mobile_page: Callable[..., Page], cluster: LocalCluster
) -> None:
    """Issue 15: the approval card works in cluster mode as locally — the turn pauses on alice's
    machine, the card comes through the control plane, Approve runs the command there once."""
    token = cluster.tokens["alice"]
    policy = httpx.put(
        f"{cluster.base_url}/api/config/tool-approvals",
        json={"policies": {"terminal": "ask"}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=LIVE / 1000,
    )
    assert policy.status_code == 200, policy.text
    target = cluster.data_dir / "exec-planes" / "alice" / "home" / "workspace" / "cluster-approved.txt"
    page = new_mobile_page(**DESKTOP)
    page.goto(cluster.base_url)
    sign_in(page, token)
    expect(page.get_by_test_id("model-label")).to_be_visible()
    page.wait_for_load_state("networkidle")
    page.get_by_test_id("new-session").click()
    send(page, f"run: echo approved-in-cluster >> workspace/{target.name}")
    card = page.get_by_test_id("approval-card")
    expect(card).to_be_visible(timeout=LIVE)
    expect(card.get_by_test_id("approval-tool")).to_have_text("terminal")
    assert not target.exists(), "the command ran before it was approved"
    card.get_by_test_id("approve-button").click()
    expect(card.get_by_test_id("card-decision")).to_have_text("Approved", timeout=LIVE)
    expect(page.get_by_test_id("assistant-bubble").last).to_contain_text("[demo]", timeout=LIVE)
    expect(page.get_by_test_id("chat-input")).to_be_enabled(timeout=LIVE)
    assert target.read_text(encoding="utf-8").splitlines() == ["approved-in-cluster"]
    screenshot(page, "cluster-approval")
    httpx.put(
        f"{cluster.base_url}/api/config/tool-approvals",
        json={"policies": {"terminal": "allow"}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=LIVE / 1000,
    )
