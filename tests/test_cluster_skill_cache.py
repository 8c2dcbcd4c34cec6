"""Cluster-mode skills: ``skill_index`` parsing (clawlet's and the seed's spellings), requirement
checks, the ``<available_skills>`` block (golden string), and ``SkillPackageCache``: hits and
misses, byte-exact binaries, refused packages (nothing written), crash safety, fetch-once under
concurrency (tasks, cache instances and processes), degraded mode and version switches."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import clawlet.storage
from clawlet.execplane.skill_cache import (
    InvalidSkillId,
    InvalidSkillPackage,
    SkillIndexEntry,
    SkillIndexError,
    SkillPackageCache,
    SkillRequirements,
    SkillUnavailable,
    available_skills_block,
    check_requirements,
    parse_package,
    parse_skill_index,
)
from clawlet.skills.scanner import render_snapshot, scan_skills, skill_summary

SKILL_MD_TEXT = (
    "---\nname: pdf\ndescription: 处理 PDF 文件\n---\n\n# PDF 技能\n\n运行 `python scripts/fill.py`。\n"
)
BINARY = bytes(range(256)) * 3


def fake_which(*present: str) -> Any:
    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in present else None

    return which


def package(
    files: Mapping[str, str | bytes], *, version: str | None = None, wrapped: bool = True
) -> dict[str, Any]:
    """A ``get_skill_package`` answer: ``str`` content as UTF-8 text, ``bytes`` as base64."""
    entries: list[dict[str, Any]] = []
    for path, content in files.items():
        if isinstance(content, bytes):
            entries.append(
                {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}
            )
        else:
            entries.append({"path": path, "content": content, "encoding": "utf-8"})
    body: dict[str, Any] = {"files": entries}
    if version is not None:
        body["version"] = version
    return {"package": body} if wrapped else body


PDF_FILES: dict[str, str | bytes] = {
    "SKILL.md": SKILL_MD_TEXT,
    "REFERENCE.md": "参考资料\n",
    "scripts/fill.py": "print('填写表单')\n",
    "scripts/tools/helper.bin": BINARY,
}


class Fetcher:
    """A fake control plane: counts calls, can be slow or failing, serves per-version packages."""

    def __init__(self, packages: Mapping[str, Mapping[str, Any]] | None = None, delay: float = 0.0) -> None:
        self.packages: dict[str, Mapping[str, Any]] = dict(packages or {"latest": package(PDF_FILES)})
        self.calls: list[tuple[str, str]] = []
        self.delay = delay
        self.error: Exception | None = None

    async def __call__(self, skill_id: str, version: str) -> Mapping[str, Any]:
        self.calls.append((skill_id, version))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.packages.get(version) or self.packages["latest"]


def cache_entries(cache_dir: Path) -> list[str]:
    """What is in the cache directory, apart from the per-skill lock files."""
    if not cache_dir.exists():
        return []
    return sorted(p.name for p in cache_dir.iterdir() if not p.name.endswith(".lock"))


# -- skill_index -------------------------------------------------------------------------------


def test_index_entry_in_clawlets_spelling() -> None:
    entry = SkillIndexEntry.from_dict(
        {
            "skill_id": "pdf",
            "name": " pdf ",
            "description": "处理 PDF 文件",
            "version": "2026.1.2",
            "files": ["SKILL.md", "scripts/fill.py"],
            "requires": {"bins": ["python3"], "anyBins": ["pdftotext", "mutool"], "env": "PDF_KEY"},
        }
    )
    assert entry == SkillIndexEntry(
        skill_id="pdf",
        name="pdf",
        description="处理 PDF 文件",
        version="2026.1.2",
        files=("SKILL.md", "scripts/fill.py"),
        requires=SkillRequirements(bins=("python3",), any_bins=("pdftotext", "mutool"), env=("PDF_KEY",)),
    )
    assert SkillIndexEntry.from_dict(entry.to_dict()) == entry


def test_index_entry_in_the_seeds_spelling() -> None:
    entry = SkillIndexEntry.from_dict(
        {
            "id": "skill-1",
            "name": "数据分析",
            "description": "分析表格数据",
            "file_inventory": [{"path": "SKILL.md"}, "scripts/a.py"],
            "requires": {"binaries": ["jq"], "env_vars": ["API_KEY"], "bins": ["jq", "curl"]},
        }
    )
    assert entry.skill_id == "skill-1"
    assert entry.version == "latest"
    assert entry.files == ("SKILL.md", "scripts/a.py")
    assert entry.requires == SkillRequirements(bins=("jq", "curl"), env=("API_KEY",))


def test_index_entry_defaults() -> None:
    entry = SkillIndexEntry.from_dict({"skill_id": "web-search", "version": 3})
    assert (entry.name, entry.description, entry.version, entry.files) == ("web-search", "", "3", ())
    assert entry.requires == SkillRequirements()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("pdf", "must be an object"),
        ({"name": "no id"}, "no string 'skill_id'"),
        ({"skill_id": "../etc"}, "skill id must be"),
        ({"skill_id": ".hidden"}, "skill id must be"),
        ({"skill_id": "a/b"}, "skill id must be"),
        ({"skill_id": "pdf", "name": 5}, "'name' must be a string"),
        ({"skill_id": "pdf", "description": ["x"]}, "'description' must be a string"),
        ({"skill_id": "pdf", "version": True}, "'version' must be a string"),
        ({"skill_id": "pdf", "version": "v\n1"}, "invalid version"),
        ({"skill_id": "pdf", "files": "SKILL.md"}, "'files' must be a list"),
        ({"skill_id": "pdf", "files": ["a\nb"]}, "'files' must hold one-line paths"),
        ({"skill_id": "pdf", "requires": ["jq"]}, "'requires' must be an object"),
        (
            {"skill_id": "pdf", "requires": {"binaries": {"jq": 1}}},
            "requires.binaries must be a string or a list",
        ),
        ({"skill_id": "pdf", "requires": {"env": [""]}}, "requires.env must hold non-empty"),
    ],
)
def test_malformed_index_entries_say_what_is_wrong(raw: Any, message: str) -> None:
    with pytest.raises(SkillIndexError, match=message):
        SkillIndexEntry.from_dict(raw)


def test_parse_skill_index_keeps_good_entries_and_reports_bad_ones() -> None:
    parsed = parse_skill_index(
        [
            {"skill_id": "pdf", "description": "a"},
            {"skill_id": "bad id"},
            "not an object",
            {"id": "pdf", "description": "duplicate"},
            {"id": "xlsx"},
        ]
    )
    assert [entry.skill_id for entry in parsed.entries] == ["pdf", "xlsx"]
    assert parsed.entries[0].description == "a"
    assert len(parsed.problems) == 3
    assert parsed.problems[0].startswith("skill_index[1]: skill 'bad id'")
    assert parsed.problems[1].startswith("skill_index[2]: a skill index entry must be an object")
    assert parsed.problems[2] == "skill_index[3]: duplicate skill id 'pdf' (kept the first)"
    assert parse_skill_index(None).entries == []
    with pytest.raises(SkillIndexError, match="must be a list"):
        parse_skill_index({"pdf": {}})


# -- requirements ------------------------------------------------------------------------------


def test_check_requirements_with_a_fake_machine() -> None:
    entry = SkillIndexEntry.from_dict(
        {
            "skill_id": "pdf",
            "requires": {
                "bins": ["python3", "jq"],
                "anyBins": ["rg", "grep"],
                "env": ["API_KEY", "EMPTY", "SET"],
            },
        }
    )
    environ = {"EMPTY": "", "SET": "1"}
    ok, missing = check_requirements(entry, which=fake_which("python3"), environ=environ)
    assert ok is False
    assert missing == ["bin:jq", "anyBin:rg|grep", "env:API_KEY", "env:EMPTY"]
    everything = {"API_KEY": "k", "EMPTY": "x", "SET": "1"}
    assert check_requirements(entry, which=fake_which("python3", "jq", "grep"), environ=everything) == (
        True,
        [],
    )
    assert check_requirements(SkillIndexEntry("plain", "plain"), which=fake_which(), environ={}) == (True, [])


def test_check_requirements_accepts_a_raw_seed_entry_and_checks_os() -> None:
    raw = {"id": "mac", "requires": {"binaries": ["jq"], "env_vars": ["TOKEN"], "os": ["darwin"]}}
    ok, missing = check_requirements(raw, which=fake_which(), environ={}, platform="linux")
    assert (ok, missing) == (False, ["bin:jq", "env:TOKEN", "os:darwin"])
    ok, missing = check_requirements(raw, which=fake_which("jq"), environ={"TOKEN": "t"}, platform="darwin")
    assert (ok, missing) == (True, [])


# -- the <available_skills> block --------------------------------------------------------------


def test_available_skills_block_renders_as_the_local_engine(tmp_path: Path) -> None:
    entries = parse_skill_index(
        [
            {
                "skill_id": "pdf",
                "name": "pdf",
                "description": "处理 PDF 文件（读取、合并、拆分、表单填写等）",
                "files": ["SKILL.md", "REFERENCE.md", "FORMS.md"],
            },
            {
                "skill_id": "xlsx",
                "name": "xlsx",
                "description": "处理 Excel 文件（创建、编辑、公式、图表等）",
                "files": ["SKILL.md", "scripts/recalc.py"],
                "requires": {"bins": ["python3"]},
            },
            {
                "skill_id": "needs-key",
                "name": "needs-key",
                "description": "left out: its env var is missing",
                "requires": {"env_vars": ["MISSING_KEY"]},
            },
        ]
    ).entries
    cache_dir = Path("/home/user/.clawlet/skills")
    block = available_skills_block(entries, cache_dir, which=fake_which("python3"), environ={})
    assert block == (
        "<available_skills>\n"
        "  <skill>\n"
        "    <name>pdf</name>\n"
        "    <description>处理 PDF 文件（读取、合并、拆分、表单填写等）</description>\n"
        "    <location>/home/user/.clawlet/skills/pdf/SKILL.md</location>\n"
        "  </skill>\n"
        "  <skill>\n"
        "    <name>xlsx</name>\n"
        "    <description>处理 Excel 文件（创建、编辑、公式、图表等）</description>\n"
        "    <location>/home/user/.clawlet/skills/xlsx/SKILL.md</location>\n"
        "  </skill>\n"
        "</available_skills>\n"
        "\n"
        "When a task matches a skill, first read its SKILL.md (the full instructions) with the read_file"
        " tool. Run a skill's scripts (in scripts/ of its directory) with the terminal tool.\n"
    )
    assert "needs-key" not in block
    renamed = available_skills_block(
        entries[:1], cache_dir, which=fake_which(), environ={}, read_tool="load_skill", shell_tool="bash"
    )
    assert "with the load_skill tool" in renamed and "with the bash tool" in renamed


def test_local_and_cluster_agents_see_the_same_skills_alike(tmp_path: Path) -> None:
    """A skill in a local home and the same SKILL.md in a cluster's skill index render the same
    ``<available_skills>`` block (the cluster's location is its cache directory)."""
    home = tmp_path / "home"
    texts = {
        "pdf": SKILL_MD_TEXT,
        "odd": '---\ndescription: "a <tricky> & \\"quoted\\" one"\n---\nbody\n',
    }
    for folder, text in texts.items():
        (home / "skills" / folder).mkdir(parents=True)
        (home / "skills" / folder / "SKILL.md").write_text(text, encoding="utf-8")
    local = render_snapshot(scan_skills(home).skills)
    index = [{"skill_id": folder, **skill_summary(text, folder)} for folder, text in sorted(texts.items())]
    cluster = available_skills_block(parse_skill_index(index).entries, Path("skills"), environ={})
    assert "&lt;tricky&gt; &amp;" in local
    assert cluster.startswith(local + "\n")


def test_available_skills_block_is_empty_without_available_skills(tmp_path: Path) -> None:
    entry = SkillIndexEntry("pdf", "pdf", requires=SkillRequirements(bins=("nope",)))
    assert available_skills_block([entry], tmp_path, which=fake_which(), environ={}) == ""
    assert available_skills_block([], tmp_path) == ""


def test_read_skill_md_of_an_uncached_skill(tmp_path: Path) -> None:
    cache = SkillPackageCache(tmp_path, Fetcher())
    with pytest.raises(SkillUnavailable, match="not cached; load it first") as info:
        cache.read_skill_md("pdf")
    assert info.value.skill_id == "pdf"


def test_read_skill_md_refuses_a_symlink_out_of_the_skill(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret", encoding="utf-8")
    (tmp_path / "cache" / "evil").mkdir(parents=True)
    (tmp_path / "cache" / "evil" / "SKILL.md").symlink_to(outside)
    cache = SkillPackageCache(tmp_path / "cache", Fetcher())
    with pytest.raises(SkillUnavailable, match="points outside"):
        cache.read_skill_md("evil")


@pytest.mark.parametrize("skill_id", ["", "..", "../x", "a/b", ".hidden", "a..b", "a b", "x" * 129, "名字"])
async def test_unsafe_skill_ids_are_refused_without_fetching(tmp_path: Path, skill_id: str) -> None:
    fetch = Fetcher()
    cache = SkillPackageCache(tmp_path / "cache", fetch)
    with pytest.raises(InvalidSkillId, match="skill id must be"):
        await cache.load(skill_id)
    with pytest.raises(InvalidSkillId):
        cache.read_skill_md(skill_id)
    assert fetch.calls == []
    assert not (tmp_path / "cache").exists()


async def test_invalid_version_is_refused(tmp_path: Path) -> None:
    fetch = Fetcher()
    with pytest.raises(SkillUnavailable, match="invalid version"):
        await SkillPackageCache(tmp_path, fetch).load("pdf", "v1\n")
    assert fetch.calls == []


# -- refused packages: nothing written ---------------------------------------------------------

ESCAPES = [
    "/etc/passwd",
    "/tmp/x",
    "../outside.txt",
    "scripts/../../outside.txt",
    "a/b/../../../outside.txt",
    "..",
    ".",
    "./SKILL.md",
    "scripts//a.py",
    "scripts/",
    "",
    "scripts\\..\\..\\outside.txt",
    "..\\outside.txt",
    "C:/Windows/x",
    "c:outside",
    "a\x00b",
    "line\nbreak",
    "~/outside.txt",
    "~root/x",
    " SKILL.md",
    "scripts/a.py ",
    ".clawlet-skill.json",
    "x" * 256,
    "/".join(["d"] * 40),
]


@pytest.mark.parametrize("path", ESCAPES)
async def test_every_path_escape_is_refused_with_nothing_written(tmp_path: Path, path: str) -> None:
    cache_dir = tmp_path / "cache"
    fetch = Fetcher({"latest": package({"SKILL.md": "ok", path: "evil"})})
    cache = SkillPackageCache(cache_dir, fetch)
    with pytest.raises(InvalidSkillPackage) as info:
        await cache.load("pdf")
    assert info.value.skill_id == "pdf"
    assert "files[1] path" in info.value.reason
    assert cache_entries(cache_dir) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing next to it either
    assert not cache.is_cached("pdf")


async def test_the_path_guard_refuses_a_symlink_inside_the_staging_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: even if the fresh staging directory held a symlink out, nothing is written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    real_mkdtemp = tempfile.mkdtemp

    def planted_mkdtemp(**kwargs: Any) -> str:
        staging = str(real_mkdtemp(**kwargs))
        Path(staging, "scripts").symlink_to(outside, target_is_directory=True)
        return staging

    monkeypatch.setattr("clawlet.execplane.skill_cache.tempfile.mkdtemp", planted_mkdtemp)
    cache = SkillPackageCache(tmp_path / "cache", Fetcher())
    with pytest.raises(InvalidSkillPackage, match="outside the allowed directory"):
        await cache.load("pdf")
    assert list(outside.iterdir()) == []
    assert cache_entries(tmp_path / "cache") == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (package({"REFERENCE.md": "no skill file"}), "no top-level SKILL.md"),
        (package({"docs/SKILL.md": "nested only"}), "no top-level SKILL.md"),
        (
            {"files": [{"path": "SKILL.md", "content": "a"}, {"path": "SKILL.md", "content": "b"}]},
            "duplicate path",
        ),
        (
            {"files": [{"path": "SKILL.md", "content": "a"}, {"path": "skill.md", "content": "b"}]},
            "duplicate path",
        ),
        (package({"SKILL.md": "a", "scripts": "file", "scripts/a.py": "dir"}), "is a file and a parent"),
        (
            {
                "files": [
                    {"path": "SKILL.md", "content": "a"},
                    {"path": "x", "content": "%%%", "encoding": "base64"},
                ]
            },
            "not valid base64",
        ),
        (
            {
                "files": [
                    {"path": "SKILL.md", "content": "a"},
                    {"path": "x", "content": "a", "encoding": "gzip"},
                ]
            },
            "unsupported encoding",
        ),
        (
            {"files": [{"path": "SKILL.md", "content": "a"}, {"path": "x", "content": b"raw"}]},
            "no string 'content'",
        ),
        (
            {"files": [{"path": "SKILL.md", "content": "a"}, {"path": "x", "content": "\ud800"}]},
            "not valid UTF-8",
        ),
        (
            {
                "files": [
                    {"path": "SKILL.md", "content": "a"},
                    {"path": "link", "type": "symlink", "target": "/etc"},
                ]
            },
            "not a regular file",
        ),
        ({"files": [{"path": "SKILL.md", "content": "a"}, "oops"]}, r"files\[1\] is not an object"),
        ({"package": "nope"}, "'package' is not an object"),
        ({"package": {}}, "no 'files' list"),
        ({"files": {"SKILL.md": "a"}}, "no 'files' list"),
    ],
)
async def test_malformed_packages_are_refused_with_nothing_written(
    tmp_path: Path, answer: dict[str, Any], message: str
) -> None:
    cache = SkillPackageCache(tmp_path, Fetcher({"latest": answer}))
    with pytest.raises(InvalidSkillPackage, match=message):
        await cache.load("pdf")
    assert cache_entries(tmp_path) == []


async def test_a_non_object_answer_is_refused(tmp_path: Path) -> None:
    async def fetch(skill_id: str, version: str) -> Any:
        return ["SKILL.md"]

    with pytest.raises(InvalidSkillPackage, match="not an object but list"):
        await SkillPackageCache(tmp_path, fetch).load("pdf")


async def test_size_and_count_limits(tmp_path: Path) -> None:
    big = package({"SKILL.md": "a", "data.bin": b"\0" * 2000})
    with pytest.raises(InvalidSkillPackage, match="larger than 1000 bytes"):
        await SkillPackageCache(tmp_path, Fetcher({"latest": big}), max_bytes=1000).load("pdf")
    many = package({"SKILL.md": "a", **{f"f{n}.txt": "x" for n in range(10)}})
    with pytest.raises(InvalidSkillPackage, match="11 files"):
        await SkillPackageCache(tmp_path, Fetcher({"latest": many}), max_files=10).load("pdf")
    assert cache_entries(tmp_path) == []
    # multi-byte text counts in bytes, not characters
    chinese = package({"SKILL.md": "技" * 400})  # 1200 bytes
    with pytest.raises(InvalidSkillPackage, match="larger than"):
        parse_package("pdf", chinese, max_bytes=1000)


async def test_an_unwritable_cache_is_unavailable_not_an_os_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    fetch = Fetcher()
    with pytest.raises(SkillUnavailable, match="cache is not writable"):
        await SkillPackageCache(blocker / "skills", fetch).load("pdf")
    assert fetch.calls == []


# -- crash safety ------------------------------------------------------------------------------


async def test_fetch_failing_midway_leaves_nothing_and_the_next_load_retries(tmp_path: Path) -> None:
    fetch = Fetcher()
    fetch.error = ConnectionError("connection reset")
    cache = SkillPackageCache(tmp_path, fetch)
    with pytest.raises(SkillUnavailable, match=r"not cached and fetching it failed \(ConnectionError"):
        await cache.load("pdf")
    assert cache_entries(tmp_path) == []
    fetch.error = None
    assert (await cache.load("pdf") / "SKILL.md").is_file()
    assert len(fetch.calls) == 2


async def test_a_write_failing_midway_leaves_no_partial_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = clawlet.storage.atomic_write_bytes
    written: list[Path] = []

    def failing_write(path: Path, data: bytes) -> None:
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        real_write(path, data)
        written.append(path)

    monkeypatch.setattr("clawlet.execplane.skill_cache.atomic_write_bytes", failing_write)
    fetch = Fetcher()
    cache = SkillPackageCache(tmp_path, fetch)
    with pytest.raises(SkillUnavailable, match=r"cannot write it to the cache: .*No space left"):
        await cache.load("pdf")
    assert len(written) == 2  # it really failed half-way
    assert cache_entries(tmp_path) == []
    assert not cache.is_cached("pdf")

    monkeypatch.setattr("clawlet.execplane.skill_cache.atomic_write_bytes", real_write)
    skill_dir = await cache.load("pdf")
    assert (skill_dir / "scripts" / "tools" / "helper.bin").read_bytes() == BINARY
    assert len(fetch.calls) == 2


async def test_the_rename_failing_keeps_the_old_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetch = Fetcher({"v1": package({"SKILL.md": "v1"}), "v2": package({"SKILL.md": "v2"})})
    cache = SkillPackageCache(tmp_path, fetch)
    await cache.load("pdf", "v1")
    real_rename = os.rename

    def failing_rename(source: Any, destination: Any) -> None:
        if str(source).endswith(".partial"):
            raise OSError(5, "I/O error")
        real_rename(source, destination)

    monkeypatch.setattr("clawlet.execplane.skill_cache.os.rename", failing_rename)
    with pytest.raises(SkillUnavailable, match="I/O error"):
        await cache.load("pdf", "v2")
    monkeypatch.undo()
    assert cache.read_skill_md("pdf") == "v1"
    assert cache.cached_version("pdf") == "v1"
    assert cache_entries(tmp_path) == ["pdf"]


async def test_leftovers_of_a_killed_load_are_never_hits_and_get_removed(tmp_path: Path) -> None:
    partial = tmp_path / ".pdf~k1ll3d.partial"
    (partial / "scripts").mkdir(parents=True)
    (partial / "SKILL.md").write_text("from a process that died", encoding="utf-8")
    old = tmp_path / ".pdf~0ld.old"
    old.mkdir()
    other = tmp_path / ".pdf.x~abc.partial"  # another skill ("pdf.x"): not ours to remove
    other.mkdir()
    fetch = Fetcher()
    cache = SkillPackageCache(tmp_path, fetch)
    assert not cache.is_cached("pdf")
    await cache.load("pdf")
    assert len(fetch.calls) == 1
    assert cache.read_skill_md("pdf") == SKILL_MD_TEXT
    assert cache_entries(tmp_path) == [".pdf.x~abc.partial", "pdf"]


async def test_cancelling_a_load_leaves_nothing_and_releases_the_locks(tmp_path: Path) -> None:
    fetch = Fetcher(delay=10)
    cache = SkillPackageCache(tmp_path, fetch)
    task = asyncio.create_task(cache.load("pdf"))
    while not fetch.calls:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cache_entries(tmp_path) == []
    fetch.delay = 0
    await asyncio.wait_for(cache.load("pdf"), timeout=60)
    assert cache.is_cached("pdf")


# -- concurrency -------------------------------------------------------------------------------


async def test_concurrent_loads_in_one_process_fetch_once(tmp_path: Path) -> None:
    fetch = Fetcher(delay=0.05)
    cache = SkillPackageCache(tmp_path, fetch)
    results = await asyncio.gather(*(cache.load("pdf") for _ in range(20)))
    assert set(results) == {tmp_path / "pdf"}
    assert fetch.calls == [("pdf", "latest")]


async def test_separate_cache_instances_on_one_directory_fetch_once(tmp_path: Path) -> None:
    fetch = Fetcher(delay=0.05)
    caches = [SkillPackageCache(tmp_path, fetch) for _ in range(5)]
    results = await asyncio.gather(*(cache.load("pdf") for cache in caches for _ in range(3)))
    assert set(results) == {tmp_path / "pdf"}
    assert fetch.calls == [("pdf", "latest")]


async def test_different_skills_load_in_parallel(tmp_path: Path) -> None:
    all_started = asyncio.Event()
    calls: list[str] = []

    async def fetch(skill_id: str, version: str) -> Mapping[str, Any]:
        calls.append(skill_id)
        if len(calls) == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), timeout=10)  # times out if loads were serialised
        return package({"SKILL.md": skill_id})

    cache = SkillPackageCache(tmp_path, fetch)
    await asyncio.gather(cache.load("a"), cache.load("b"), cache.load("c"))
    assert sorted(calls) == ["a", "b", "c"]
    assert [cache.read_skill_md(skill) for skill in "abc"] == ["a", "b", "c"]


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_separate_processes_fetch_once(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from clawlet.execplane.skill_cache import SkillPackageCache

        cache_dir, log = Path(sys.argv[1]), Path(sys.argv[2])

        async def fetch(skill_id, version):
            with log.open("a") as handle:
                handle.write("fetch\\n")
            await asyncio.sleep(0.3)
            return {"package": {"files": [{"path": "SKILL.md", "content": "shared"}]}}

        path = asyncio.run(SkillPackageCache(cache_dir, fetch).load("pdf"))
        print((path / "SKILL.md").read_text())
        """
    )
    log = tmp_path / "fetches.log"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "cache"), str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
        assert out.strip() == "shared"
    assert log.read_text() == "fetch\n"
    assert cache_entries(tmp_path / "cache") == ["pdf"]


# -- degraded mode -----------------------------------------------------------------------------


async def test_control_plane_unreachable_cached_works_uncached_is_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await SkillPackageCache(tmp_path, Fetcher()).load("pdf", "v1")
    offline = Fetcher()
    offline.error = ConnectionError("control plane unreachable")
    cache = SkillPackageCache(tmp_path, offline)

    assert await cache.load("pdf") == tmp_path / "pdf"
    assert await cache.load("pdf", "v1") == tmp_path / "pdf"
    assert offline.calls == []  # hits never ask the control plane
    assert cache.read_skill_md("pdf") == SKILL_MD_TEXT

    with caplog.at_level(logging.WARNING, logger="clawlet.execplane.skill_cache"):
        assert await cache.load("pdf", "v2") == tmp_path / "pdf"  # tried, then fell back
    assert offline.calls == [("pdf", "v2")]
    assert "using the cached version v1" in caplog.text
    assert cache.cached_version("pdf") == "v1"

    with pytest.raises(SkillUnavailable) as info:
        await cache.load("xlsx")
    assert info.value.skill_id == "xlsx"
    assert "not cached" in info.value.reason and "control plane unreachable" in info.value.reason
    assert isinstance(info.value.__cause__, ConnectionError)
    assert cache_entries(tmp_path) == ["pdf"]


async def test_fetch_timeout_is_unavailable_too(tmp_path: Path) -> None:
    fetch = Fetcher()
    fetch.error = TimeoutError()
    with pytest.raises(SkillUnavailable, match="TimeoutError"):
        await SkillPackageCache(tmp_path, fetch).load("pdf")


# -- versions ----------------------------------------------------------------------------------


async def test_version_switch_replaces_the_directory(tmp_path: Path) -> None:
    fetch = Fetcher(
        {
            "v1": package({"SKILL.md": "版本一", "scripts/old.py": "old"}),
            "v2": package({"SKILL.md": "版本二", "scripts/new.py": "new"}),
        }
    )
    cache = SkillPackageCache(tmp_path, fetch)
    skill_dir = await cache.load("pdf", "v1")
    assert cache.cached_version("pdf") == "v1"
    assert await cache.load("pdf") == skill_dir  # "latest" takes whatever is cached
    assert await cache.load("pdf", "v1") == skill_dir
    assert fetch.calls == [("pdf", "v1")]

    assert await cache.load("pdf", "v2") == skill_dir
    assert fetch.calls == [("pdf", "v1"), ("pdf", "v2")]
    assert cache.cached_version("pdf") == "v2"
    assert cache.read_skill_md("pdf") == "版本二"
    assert not (skill_dir / "scripts" / "old.py").exists()
    assert (skill_dir / "scripts" / "new.py").read_text(encoding="utf-8") == "new"
    assert cache_entries(tmp_path) == ["pdf"]  # the old copy is gone
    await cache.load("pdf", "v2")
    assert len(fetch.calls) == 2


async def test_latest_records_the_version_the_package_names(tmp_path: Path) -> None:
    fetch = Fetcher({"latest": package({"SKILL.md": "x"}, version="2026.3", wrapped=False)})
    cache = SkillPackageCache(tmp_path, fetch)
    await cache.load("pdf")
    assert cache.cached_version("pdf") == "2026.3"
    await cache.load("pdf", "2026.3")
    assert len(fetch.calls) == 1


async def test_unknown_cached_version_is_refetched_for_a_specific_version(tmp_path: Path) -> None:
    (tmp_path / "pdf").mkdir()
    (tmp_path / "pdf" / "SKILL.md").write_text("placed by hand", encoding="utf-8")
    fetch = Fetcher({"latest": package({"SKILL.md": "fetched"})})
    cache = SkillPackageCache(tmp_path, fetch)
    await cache.load("pdf")
    assert fetch.calls == []  # a hit for "latest"
    assert cache.cached_version("pdf") is None
    await cache.load("pdf", "v9")
    assert cache.read_skill_md("pdf") == "fetched"
    assert cache.cached_version("pdf") == "v9"
