"""The skills scanner and snapshot, the assembled system prompt and the tool schemas (snapshot tests).

Snapshots live in tests/snapshots/, their token counts in tests/snapshots/TOKENS.md. To regenerate
after an intended change, run the tests with UPDATE_SNAPSHOTS=1, then review the diff by eye
(tests/support/snapshots.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from clawlet.config import Settings
from clawlet.engine.prompt import RAG_MEMORY_NOTE, build_system_prompt
from clawlet.memory.stores import KnowledgeBase
from clawlet.services import build_services
from clawlet.skills.scanner import refresh_snapshot, scan_skills
from clawlet.testing.function_model import FunctionModel
from clawlet.tools.registry import build_tools
from tests.support.snapshots import matches_snapshot


def write_skill(home: Path, folder: str, text: str) -> None:
    path = home / "skills" / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_example_skill_is_parsed(settings: Settings) -> None:
    result = scan_skills(settings.paths.root)
    assert result.problems == []
    (weather,) = result.skills
    assert weather.name == "get_weather"
    assert weather.description == "查询指定城市的天气信息 (look up the weather for a city)"
    assert weather.location == "skills/get_weather/SKILL.md"
    assert weather.emoji == "🌤️"
    assert weather.available is True and weather.missing == []
    snapshot = settings.paths.skills_snapshot.read_text(encoding="utf-8")
    assert snapshot == (
        "<available_skills>\n"
        "  <skill>\n"
        "    <name>get_weather</name>\n"
        "    <description>查询指定城市的天气信息 (look up the weather for a city)</description>\n"
        "    <location>skills/get_weather/SKILL.md</location>\n"
        "  </skill>\n"
        "</available_skills>\n"
    )


def test_the_example_requires_curl(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(settings.paths.root / "no-bins-here"))
    (weather,) = refresh_snapshot(settings.paths.root).skills
    assert weather.available is False
    assert weather.missing == ["bin:curl"]
    assert "get_weather" not in settings.paths.skills_snapshot.read_text(encoding="utf-8")


def test_unmet_requirements_are_listed_and_left_out_of_the_snapshot(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLAWLET_TEST_MISSING_VAR", raising=False)
    monkeypatch.setenv("CLAWLET_TEST_PRESENT_VAR", "1")
    home = settings.paths.root
    write_skill(
        home,
        "needs_bin",
        "---\nname: needs_bin\ndescription: needs a binary\nmetadata:\n  openclaw:\n"
        "    requires:\n      bins: [definitely-not-a-real-binary-xyz, sh]\n---\nbody\n",
    )
    write_skill(
        home,
        "needs_env",
        "---\nname: needs_env\ndescription: needs a variable\n"
        'metadata: {"openclaw": {"requires": {"env": '
        '["CLAWLET_TEST_MISSING_VAR", "CLAWLET_TEST_PRESENT_VAR"]}}}\n'
        "---\n",
    )
    write_skill(
        home,
        "any_bins",
        "---\nname: any_bins\ndescription: one of two\n"
        'metadata: {"openclaw": {"requires": {"anyBins": ["nope-1", "nope-2"]}, "os": ["plan9"]}}\n---\n',
    )
    write_skill(
        home,
        "satisfied",
        "---\nname: satisfied\ndescription: all there\n"
        'metadata: {"openclaw": {"requires": {"bins": ["sh"], "anyBins": ["nope", "sh"], '
        '"env": ["CLAWLET_TEST_PRESENT_VAR"]}, "os": ["linux", "darwin"]}}\n---\n',
    )
    result = refresh_snapshot(home)
    by_name = {skill.name: skill for skill in result.skills}
    assert by_name["needs_bin"].available is False
    assert by_name["needs_bin"].missing == ["bin:definitely-not-a-real-binary-xyz"]
    assert by_name["needs_env"].missing == ["env:CLAWLET_TEST_MISSING_VAR"]
    assert by_name["any_bins"].missing == ["anyBin:nope-1|nope-2", "os:plan9"]
    assert by_name["satisfied"].available is True and by_name["satisfied"].missing == []
    snapshot = settings.paths.skills_snapshot.read_text(encoding="utf-8")
    assert "<name>satisfied</name>" in snapshot
    for unavailable in ("needs_bin", "needs_env", "any_bins"):
        assert unavailable not in snapshot
    assert result.problems == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("---\nname: x\ndescription: [unclosed\n---\n", "invalid YAML"),
        ("---\nname: no_description\n---\nbody\n", "missing 'description'"),
        ("---\nname: blank\ndescription: '   '\n---\n", "missing 'description'"),
        ("no frontmatter at all\n", "missing 'description'"),
        ("---\nname: open\ndescription: never closed\n", "never closed"),
        ("---\n- a list\n- not a mapping\n---\n", "must be a mapping"),
        ("---\nname: j\ndescription: d\nmetadata: '{\"openclaw\": '\n---\n", "metadata is not valid JSON"),
        (
            "---\nname: r\ndescription: d\nmetadata: {openclaw: {requires: [curl]}}\n---\n",
            "must be a mapping",
        ),
        (
            "---\nname: b\ndescription: d\nmetadata: {openclaw: {requires: {bins: 5}}}\n---\n",
            "expected a list",
        ),
    ],
)
def test_malformed_skills_are_reported_and_skipped(settings: Settings, text: str, error: str) -> None:
    write_skill(settings.paths.root, "broken", text)
    result = refresh_snapshot(settings.paths.root)
    assert [skill.name for skill in result.skills] == ["get_weather"]
    (problem,) = result.problems
    assert problem.location == "skills/broken/SKILL.md"
    assert error in problem.error
    assert "broken" not in settings.paths.skills_snapshot.read_text(encoding="utf-8")


def test_undecodable_skill_file_is_a_problem_not_a_crash(settings: Settings) -> None:
    path = settings.paths.skills / "binary" / "SKILL.md"
    path.parent.mkdir()
    path.write_bytes(b"\xff\xfe\x00garbage")
    result = scan_skills(settings.paths.root)
    assert [p.location for p in result.problems] == ["skills/binary/SKILL.md"]
    assert "cannot read" in result.problems[0].error


def test_snapshot_is_rewritten_when_a_skill_is_added(settings: Settings) -> None:
    home = settings.paths.root
    before = settings.paths.skills_snapshot.read_text(encoding="utf-8")
    mtime = settings.paths.skills_snapshot.stat().st_mtime_ns
    refresh_snapshot(home)  # nothing changed: the file is not rewritten
    assert settings.paths.skills_snapshot.stat().st_mtime_ns == mtime
    write_skill(home, "translate", '---\nname: 翻译 & <co>\ndescription: 中译英 "quoted"\n---\nsteps\n')
    refresh_snapshot(home)
    after = settings.paths.skills_snapshot.read_text(encoding="utf-8")
    assert after != before
    assert "<name>翻译 &amp; &lt;co&gt;</name>" in after
    assert '<description>中译英 "quoted"</description>' in after
    assert "<location>skills/translate/SKILL.md</location>" in after
    assert after.index("get_weather") < after.index("translate")  # sorted by folder


def test_metadata_as_inline_json_and_the_legacy_clawdbot_key(settings: Settings) -> None:
    home = settings.paths.root
    write_skill(
        home,
        "inline",
        "---\nname: inline\ndescription: d\n"
        'metadata: \'{"openclaw": {"emoji": "🔧", "requires": {"bins": ["no-such-bin-q"]}}}\'\n---\n',
    )
    write_skill(
        home,
        "legacy",
        "---\ndescription: legacy key\nmetadata:\n  clawdbot:\n    emoji: 🦞\n    requires:\n"
        "      env: [CLAWLET_TEST_NEVER_SET]\n---\n",
    )
    by_name = {skill.name: skill for skill in scan_skills(home).skills}
    assert by_name["inline"].emoji == "🔧"
    assert by_name["inline"].missing == ["bin:no-such-bin-q"]
    # Without a name the folder name is used.
    assert by_name["legacy"].emoji == "🦞"
    assert by_name["legacy"].missing == ["env:CLAWLET_TEST_NEVER_SET"]
    assert by_name["legacy"].location == "skills/legacy/SKILL.md"


# --- the system prompt ------------------------------------------------------------------------


def build_fixed_home(root: Path) -> None:
    files = {
        "workspace/SOUL.md": "# Soul\nBe kind and direct.\n",
        "workspace/IDENTITY.md": "# Identity\nName: Clawlet.\n",
        "workspace/USER.md": "# User\n偏好中文回答。\n",
        "workspace/AGENTS.md": "# Agents\n- Read the skill before using it.\n",
        "skills/notes/SKILL.md": "---\nname: notes\ndescription: Keep notes in knowledge/\n---\nSteps.\n",
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    memory_lines = [f"- fact {n:05d}: the user likes item number {n}." for n in range(800)]
    memory = "# Long-term memory\n" + "\n".join(memory_lines) + "\n"
    assert len(memory) > 20_000
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(memory, encoding="utf-8")
    refresh_snapshot(root)


def test_system_prompt_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "fixed"
    build_fixed_home(root)
    prompt = build_system_prompt(root)
    labels = ["Skills Snapshot", "Soul", "Identity", "User Profile", "Agents Guide", "Long-term Memory"]
    positions = [prompt.index(f"<!-- {label} -->\n") for label in labels]
    assert positions == sorted(positions) and positions[0] == 0
    assert prompt.endswith("\n... [truncated]")
    memory_part = prompt.split("<!-- Long-term Memory -->\n", 1)[1]
    assert len(memory_part) == 20_000 + len("\n... [truncated]")
    matches_snapshot("system_prompt.md", prompt)


def test_system_prompt_in_rag_mode_replaces_memory(tmp_path: Path) -> None:
    root = tmp_path / "fixed"
    build_fixed_home(root)
    prompt = build_system_prompt(root, rag_mode=True)
    assert prompt.endswith(f"<!-- Long-term Memory -->\n{RAG_MEMORY_NOTE}")
    assert "fact 00001" not in prompt
    normal = build_system_prompt(root)
    assert prompt.split("<!-- Long-term Memory -->")[0] == normal.split("<!-- Long-term Memory -->")[0]


def test_missing_files_leave_empty_sections(tmp_path: Path) -> None:
    prompt = build_system_prompt(tmp_path / "empty")
    assert prompt == "\n\n".join(
        f"<!-- {label} -->\n"
        for label in (
            "Skills Snapshot",
            "Soul",
            "Identity",
            "User Profile",
            "Agents Guide",
            "Long-term Memory",
        )
    )


# --- tool schemas -----------------------------------------------------------------------------


def test_tool_schemas_snapshot(settings: Settings) -> None:
    tools = build_tools(settings, KnowledgeBase(settings.paths, None))
    schemas = [convert_to_openai_tool(tool) for tool in tools]
    for schema in schemas:
        parameters = schema["function"]["parameters"]
        assert parameters["type"] == "object"
        assert parameters["required"] == list(parameters["properties"])
    matches_snapshot("tool_schemas.json", schemas_json(schemas))


def schemas_json(schemas: list[dict[str, Any]]) -> str:
    return json.dumps(schemas, ensure_ascii=False, indent=2) + "\n"


# --- what the model is sent: a home with skills and RAG mode on ------------------------------


async def test_the_prompt_and_tools_a_home_with_skills_and_rag_sends_snapshot(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The system prompt and tool schemas the model is sent (read from an in-process model) for the
    default home with two more skills and RAG mode on: the memory section is the RAG note and the
    memory retrieved comes as a message of its own."""
    home = settings.paths.root
    bins = home / "bin"  # the example skill needs curl: present here on every machine
    bins.mkdir()
    (bins / "curl").write_text("#!/bin/sh\n", encoding="utf-8")
    (bins / "curl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bins}{os.pathsep}{os.environ['PATH']}")
    write_skill(home, "notes", "---\nname: notes\ndescription: Keep notes in knowledge/\n---\nSteps.\n")
    write_skill(
        home,
        "translate",
        "---\nname: translate\ndescription: 中译英 (Chinese to English)\n"
        'metadata: {"openclaw": {"emoji": "🔤"}}\n---\nTranslate the text.\n',
    )
    settings.paths.memory_file.write_text("# Memory\n- The user's cat is called Miso.\n", encoding="utf-8")
    model = FunctionModel(lambda messages, info: "ok")
    engine = build_services(settings, model=model).engine
    engine.runtime_config.set_rag_mode(True)

    _ = [event async for event in engine.stream("what is my cat called? Miso?", [])]

    ((messages, info),) = model.calls
    system, recalled, _question = messages
    assert isinstance(system, SystemMessage) and system.text.endswith(RAG_MEMORY_NOTE)
    assert [skill in system.text for skill in ("get_weather", "notes", "translate")] == [True] * 3
    assert "Miso" in recalled.text
    matches_snapshot("skills_rag/system_prompt.md", system.text)
    matches_snapshot(
        "skills_rag/tool_schemas.json", json.dumps(info.tools, ensure_ascii=False, indent=2) + "\n"
    )


def test_system_prompt_is_shared_while_no_part_changes(tmp_path: Path) -> None:
    """Every model call of every turn assembles the prompt: while nothing changed, it is one string
    shared by all of them (the turns in flight hold no copy each), and an edit shows at once."""
    root = tmp_path / "fixed"
    build_fixed_home(root)
    first = build_system_prompt(root)
    assert build_system_prompt(root) is first
    assert build_system_prompt(root, rag_mode=True) is not first  # another prompt, its own entry
    assert build_system_prompt(root) is first
    (root / "workspace" / "SOUL.md").write_text("You are a changed soul.\n", encoding="utf-8")
    changed = build_system_prompt(root)
    assert "You are a changed soul." in changed and changed != first
    assert build_system_prompt(root) == changed
