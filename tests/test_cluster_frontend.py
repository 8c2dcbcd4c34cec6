"""Cluster mode's front door in-process: user API tokens, the runtime-type precedence chain, and the
``clawlet control-plane`` admin commands (as a user runs them, in a subprocess)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawlet.config import Settings
from clawlet.controlplane.cli import build_config
from clawlet.controlplane.server import ControlPlane, resolve_runtime_type

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    service = ControlPlane(build_config(Settings(), tmp_path / "cp"))
    try:
        yield service
    finally:
        service.close()


def test_user_tokens_authenticate_their_user_only(plane: ControlPlane) -> None:
    plane.create_user("alice@example.com", "Alice", {})
    plane.create_user("bob", "Bob", {})
    alice = plane.issue_user_token("alice@example.com")
    alice_again = plane.issue_user_token("alice@example.com", "laptop")
    bob = plane.issue_user_token("bob")
    assert len({alice, alice_again, bob}) == 3 and alice.startswith("clu_")
    found = plane.authenticate_user(alice)
    assert found is not None and found.id == "alice@example.com"
    assert plane.authenticate_user(alice_again).id == "alice@example.com"  # type: ignore[union-attr]
    assert plane.authenticate_user(bob).id == "bob"  # type: ignore[union-attr]
    for wrong in ("", "clu_", alice[:-1], alice + "x", "Bearer " + alice, bob.upper()):
        assert plane.authenticate_user(wrong) is None
    # only digests are stored
    with plane.store.engine.connect() as db:
        stored = db.exec_driver_sql("SELECT digest FROM user_tokens").scalars().all()
    assert alice not in stored and len(stored) == 3
    # a disabled user's tokens stop working; revoking removes them
    plane.update_user("bob", disabled=True)
    assert plane.authenticate_user(bob) is None
    assert plane.store.revoke_user_tokens("alice@example.com") == 2
    assert plane.authenticate_user(alice) is None


def test_runtime_type_precedence_session_agent_user_org_default(plane: ControlPlane) -> None:
    assert resolve_runtime_type() == "semigraph"
    assert resolve_runtime_type(org="openclaw") == "openclaw"
    assert resolve_runtime_type(user="u", org="o") == "u"
    assert resolve_runtime_type(agent="a", user="u", org="o") == "a"
    assert resolve_runtime_type(session="s", agent="a", user="u", org="o") == "s"
    assert resolve_runtime_type(session="  ", agent=None, user="", org=3) == "semigraph"

    plane.create_user("carol", "Carol", {}, org_id="acme")
    assert plane.resolve_runtime_type("carol", {}) == "semigraph"
    plane.set_org_runtime_type("acme", "openclaw")
    assert plane.resolve_runtime_type("carol", {}) == "openclaw"
    plane.update_user("carol", runtime_type="semigraph")
    assert plane.resolve_runtime_type("carol", {}) == "semigraph"
    assert plane.resolve_runtime_type("carol", {"agent_config": {"runtime_type": "openclaw"}}) == "openclaw"
    config = {"runtime_type": "semigraph", "agent_config": {"runtime_type": "openclaw"}}
    assert plane.resolve_runtime_type("carol", config) == "semigraph"
    plane.update_user("carol", runtime_type="")  # cleared: the organisation's again
    assert plane.resolve_runtime_type("carol", {}) == "openclaw"


def clawlet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clawlet", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=os.environ.copy(),
    )


def test_control_plane_admin_commands(tmp_path: Path) -> None:
    data = str(tmp_path / "cp")
    added = clawlet(
        "control-plane", "--data-dir", data, "add-user", "alice", "--api-key", "openai=sk-1", cwd=tmp_path
    )
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("clu_")
    secret = tmp_path / "cp" / "jwt_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600

    again = clawlet("control-plane", "--data-dir", data, "add-user", "alice", cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr
    bad = clawlet("control-plane", "--data-dir", data, "add-user", "../evil", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid user id" in bad.stderr
    bad_key = clawlet(
        "control-plane", "--data-dir", data, "add-user", "bob", "--api-key", "nokey", cwd=tmp_path
    )
    assert bad_key.returncode == 2 and "PROVIDER=KEY" in bad_key.stderr
    unknown = clawlet("control-plane", "--data-dir", data, "token", "nobody", cwd=tmp_path)
    assert unknown.returncode == 2 and "no user" in unknown.stderr

    second = clawlet("control-plane", "--data-dir", data, "token", "alice", cwd=tmp_path).stdout.strip()
    credentials = clawlet(
        "control-plane", "--data-dir", data, "vm-credentials", "alice", "--export", cwd=tmp_path
    )
    assert credentials.returncode == 0
    env = dict(line.removeprefix("export ").split("=", 1) for line in credentials.stdout.splitlines())
    assert set(env) == {"USER_ID", "VM_TOKEN", "VM_TICKET", "CONTROL_PLANE_WS"}
    assert env["USER_ID"] == "alice" and env["CONTROL_PLANE_WS"] == "ws://127.0.0.1:8100/ws/vm"
    listed = clawlet("control-plane", "--data-dir", data, "users", cwd=tmp_path)
    assert listed.stdout.split("\t")[:3] == ["alice", "", "offline"]

    plane = ControlPlane(build_config(Settings(), tmp_path / "cp"))
    try:
        assert plane.authenticate_user(token).id == "alice"  # type: ignore[union-attr]
        assert plane.authenticate_user(second).id == "alice"  # type: ignore[union-attr]
        assert plane.get_user("alice").api_keys == {"openai": "sk-1"}  # type: ignore[union-attr]
    finally:
        plane.close()


def skill_md(name: str, description: str, extra: str = "") -> list[dict[str, str]]:
    return [
        {
            "path": "SKILL.md",
            "content": f"---\nname: {name}\ndescription: {description}\n{extra}---\n\nSteps.\n",
        }
    ]


def test_the_skill_index_of_start_session_comes_from_the_registry(plane: ControlPlane) -> None:
    plane.create_user("alice", "Alice", {})
    plane.create_user("bob", "Bob", {})
    needs_jq = 'metadata: {"openclaw": {"requires": {"bins": ["jq"], "env": ["JQ_TOKEN"]}}}\n'
    plane.add_skill_package("weather", "1.0", skill_md("weather", "Old weather"))
    plane.add_skill_package("weather", "2.0", skill_md("weather", "查天气 (weather)", needs_jq))
    plane.add_skill_package("weather", "2.1-alice", skill_md("weather", "Alice's fork"), user_id="alice")
    plane.add_skill_package("diary", "1", skill_md("diary", "Alice's diary"), user_id="alice")
    plane.add_skill_package("binary", "1", [{"path": "SKILL.md", "content": "AAEC", "encoding": "base64"}])

    bob = {entry["skill_id"]: entry for entry in plane.skill_index("bob")}
    assert set(bob) == {"weather"}  # the global skills only; a base64 SKILL.md is left out
    assert bob["weather"]["version"] == "2.0" and bob["weather"]["description"] == "查天气 (weather)"
    assert bob["weather"]["requires"]["bins"] == ["jq"] and bob["weather"]["requires"]["env"] == ["JQ_TOKEN"]
    assert bob["weather"]["files"] == ["SKILL.md"]
    alice = {entry["skill_id"]: entry for entry in plane.skill_index("alice")}
    assert set(alice) == {"weather", "diary"}
    assert alice["weather"]["version"] == "2.1-alice"  # her own package wins over the global one
    # every entry is one the execution plane accepts
    from clawlet.execplane.skill_cache import parse_skill_index

    parsed = parse_skill_index(plane.skill_index("alice"))
    assert parsed.problems == [] and [e.skill_id for e in parsed.entries] == ["diary", "weather"]
