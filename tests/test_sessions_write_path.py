"""The transcript on a turn's way to the model: the user's message is on disk before an in-process
turn calls the model and before the answer is written, and appending to a long session does not
read and parse the whole file again."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clawlet.config import Settings
from clawlet.events import RunCancelled, RunFailed, RunFinished, RunStarted, TextDelta
from clawlet.home import init_home
from clawlet.llm import request_sent
from clawlet.services import Services, build_services
from clawlet.sessions.store import TranscriptStore
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn

DEADLINE = 60.0


HOLD = "Hold on."


def answer(body: dict[str, Any]) -> Any:
    """The scripted answer; to ``HOLD`` the opening chunk, then nothing for the test's deadline (a
    turn that keeps running until it is cancelled)."""
    if body["messages"][-1]["content"] == HOLD:
        return text_turn("Holding on.", chunks=2, delay=DEADLINE)
    return text_turn("The answer.")


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(answer) as server:
        yield server


async def turn_running(services: Services, llm: ScriptedOpenAIServer) -> Any:
    """A turn of session ``holding`` that has called the model and goes on running."""
    run = await services.sessions.start_turn("holding", HOLD, title=False)
    deadline = time.monotonic() + DEADLINE
    while not any(request["messages"][-1]["content"] == HOLD for request in list(llm.requests)):
        assert time.monotonic() < deadline, "the holding turn never called the model"
        await asyncio.sleep(0.01)
    return run


@pytest.fixture
def services(clawlet_home: Path, llm: ScriptedOpenAIServer) -> Services:
    settings = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
    init_home(settings.paths)
    return build_services(settings)


def counting_parses(store: TranscriptStore, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    parsed: list[Path] = []
    real = store._read_file

    def counting(path: Path) -> Any:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(store, "_read_file", counting)
    return parsed


def test_appending_to_a_long_session_does_not_parse_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TranscriptStore(tmp_path / "sessions")
    for n in range(50):
        store.append("long", "user", f"question {n}")
        store.append("long", "assistant", f"answer {n}")
    parsed = counting_parses(store, monkeypatch)
    store.append("long", "user", "one more")
    history = store.load_for_agent("long")
    assert parsed == []
    assert len(history) == 101 and history[-1] == {"role": "user", "content": "one more"}
    on_disk = json.loads(store.path_for("long").read_text(encoding="utf-8"))
    assert [m["content"] for m in on_disk["messages"]][-2:] == ["answer 49", "one more"]


def test_another_writer_is_seen_by_the_next_append(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "sessions")
    other = TranscriptStore(tmp_path / "sessions")  # another process, as far as caches go
    store.append("s", "user", "one")
    other.append("s", "assistant", "two")
    store.append("s", "user", "three")
    assert [m["content"] for m in other.load_messages("s")] == ["one", "two", "three"]
    # an edit in place (not an atomic replace) right after: seen, as its size differs (a same-size
    # edit in the same clock tick of a file this store wrote itself is the one change not seen)
    path = store.path_for("s")
    path.write_text(path.read_text(encoding="utf-8").replace('"three"', '"three!"'), encoding="utf-8")
    assert store.load_messages("s")[-1]["content"] == "three!"


def test_what_a_caller_changes_does_not_reach_the_cache(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "sessions")
    store.append("s", "user", "one")
    loaded = store.load("s")
    loaded["messages"][0]["content"] = "changed by a caller"
    loaded["messages"].append({"role": "user", "content": "added by a caller"})
    assert store.load_messages("s") == [{"role": "user", "content": "one"}]


def test_a_v1_transcript_is_still_migrated_when_loaded(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "sessions")
    path = store.path_for("old")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    assert store.list_sessions()[0]["message_count"] == 1
    assert store.load_messages("old") == [{"role": "user", "content": "hi"}]
    assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


def test_the_model_is_called_once_the_message_is_on_disk(
    services: Services, llm: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-process turn starts once its user message is on disk (written beside the engine's
    set-up, the write waited for the busy loop at each system call and held the first token back
    longer than the model took); nothing of the answer goes out before. Another turn runs, so the
    message is written on a worker thread (a lone turn writes it on the loop, before it starts)."""
    store = services.transcripts
    entered, release = threading.Event(), threading.Event()
    real_append = store.append

    def slow_append(session_id: str, role: str, content: str, tool_calls: Any = None) -> None:
        if session_id == "durable" and role == "user":
            entered.set()
            assert release.wait(DEADLINE), "the test never released the write"
        real_append(session_id, role, content, tool_calls)

    monkeypatch.setattr(store, "append", slow_append)

    async def scenario() -> None:
        holding = await turn_running(services, llm)
        run = await services.sessions.start_turn("durable", "What is it?", title=False)
        deadline = time.monotonic() + DEADLINE
        while not entered.is_set():
            assert time.monotonic() < deadline, "the message was never written"
            await asyncio.sleep(0.01)
        for _ in range(200):  # loop turns: the turn would have called the model by now
            await asyncio.sleep(0)
        assert len(llm.requests) == 1 and not store.exists("durable")  # the holding turn's only
        assert [type(event) for event in run.log] == [RunStarted]
        release.set()
        await run.wait()
        assert len(llm.requests) == 2
        assert any(isinstance(event, TextDelta) for event in run.log)
        assert isinstance(run.log[0], RunStarted)
        assert isinstance(run.log[-1], RunFinished)
        messages = store.load_messages("durable")
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "What is it?"),
            ("assistant", "The answer."),
        ]
        assert await services.sessions.cancel("holding")
        await holding.wait()

    asyncio.run(scenario())


@pytest.mark.parametrize(("stored", "beside_another_turn"), [(False, False), (True, False), (True, True)])
def test_a_message_that_cannot_be_saved_fails_the_run_and_no_answer_is_written(
    services: Services,
    llm: ScriptedOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    stored: bool,
    beside_another_turn: bool,
) -> None:
    """A lone turn of a stored session writes its message while the model thinks (so the model was
    asked); a new session's, or one beside another turn, is written first (so it was not). Either
    way nothing of the answer goes out or is written."""
    store = services.transcripts
    if stored:
        store.append("unsaved", "user", "Before?")
        store.append("unsaved", "assistant", "Before.")
    real_append = store.append

    def failing_append(session_id: str, role: str, content: str, tool_calls: Any = None) -> None:
        if session_id == "unsaved" and role == "user":
            raise OSError("disk full")
        real_append(session_id, role, content, tool_calls)

    monkeypatch.setattr(store, "append", failing_append)

    async def scenario() -> None:
        await (await services.sessions.start_turn("warm", "Build the model.", title=False)).wait()
        holding = await turn_running(services, llm) if beside_another_turn else None
        run = await services.sessions.start_turn("unsaved", "Hello?", title=False)
        await run.wait()
        assert [type(event) for event in run.log] == [RunStarted, RunFailed]
        assert isinstance(run.log[-1], RunFailed) and "disk full" in run.log[-1].error
        contents = [m["content"] for m in store.load_messages("unsaved")] if stored else None
        assert contents == (["Before?", "Before."] if stored else None)
        assert store.exists("unsaved") == stored
        asked = [request for request in llm.requests if request["messages"][-1]["content"] == "Hello?"]
        assert len(asked) == (1 if stored and not beside_another_turn else 0)
        if holding is not None:
            assert await services.sessions.cancel("holding")
            await holding.wait()

    asyncio.run(scenario())


def test_a_lone_turn_of_a_stored_session_writes_its_message_once_the_model_request_is_out(
    services: Services, llm: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop has nothing to do while the model works on the answer: the message's fsyncs go
    there, not before the request. Nothing of the answer goes out before it is on disk."""
    store = services.transcripts
    store.append("thinking", "user", "Before?")
    store.append("thinking", "assistant", "Before.")
    steps: list[str] = []
    real_trace, real_append = request_sent._trace, store.append

    async def tracing(event_name: str, info: dict[str, Any]) -> None:
        steps.append(event_name)
        await real_trace(event_name, info)

    def recording(session_id: str, role: str, content: str, tool_calls: Any = None) -> None:
        steps.append(f"{role} written, {len(run_log)} events out")
        real_append(session_id, role, content, tool_calls)

    monkeypatch.setattr(request_sent, "_trace", tracing)
    monkeypatch.setattr(store, "append", recording)
    run_log: list[Any] = []

    async def scenario() -> None:
        await (await services.sessions.start_turn("warm", "Build the model.", title=False)).wait()
        assert services.engine.traces_model_requests  # the scripted server's model, built
        run = await services.sessions.start_turn("thinking", "What is it?", title=False)
        run_log[:] = run.log  # the same events as the run publishes them (RunStarted by now)
        async for event in run.events():
            run_log.append(event)
        await run.wait()
        assert isinstance(run.log[-1], RunFinished)

    asyncio.run(scenario())
    written = steps.index("user written, 1 events out")
    assert steps[written - 1].endswith(".receive_response_headers.started")
    assert any(step.endswith(".send_request_body.complete") for step in steps[:written])
    assert [(m["role"], m["content"]) for m in store.load_messages("thinking")][2:] == [
        ("user", "What is it?"),
        ("assistant", "The answer."),
    ]


def test_a_stored_sessions_lone_turn_on_a_model_without_traced_requests_writes_its_message_at_once(
    clawlet_home: Path,
) -> None:
    """The demo model makes no HTTP request: waiting for one would leave the message unwritten
    until the first token (a crash meanwhile would lose it), so it is written before the turn
    starts, as a new session's is."""
    settings = Settings(provider="demo")
    init_home(settings.paths)
    services = build_services(settings)
    store = services.transcripts
    store.append("demo", "user", "Before?")
    store.append("demo", "assistant", "Before.")

    async def scenario() -> None:
        await (await services.sessions.start_turn("warm", "Build the model.", title=False)).wait()
        assert not services.engine.traces_model_requests
        run = await services.sessions.start_turn("demo", "Hello there", title=False)
        assert [m["content"] for m in store.load_messages("demo")][-1] == "Hello there"
        await run.wait()
        assert isinstance(run.log[-1], RunFinished)

    asyncio.run(scenario())
    assert [m["role"] for m in store.load_messages("demo")] == ["user", "assistant"] * 2


def test_the_answer_is_written_off_the_event_loop_segment_by_segment(
    clawlet_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool call splits the answer in two segments: each is written by a worker thread (an
    fsync on the event loop would stall every other stream), in order, after the user's message
    (which a lone turn of a new session writes on the loop before it starts: nothing else runs
    there)."""
    script = [
        tool_turn(ToolCall("read_file", {"path": "workspace/SOUL.md"}), text="Reading."),
        text_turn("Done."),
    ]
    with ScriptedOpenAIServer(script) as llm:
        settings = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        init_home(settings.paths)
        services = build_services(settings)
        store = services.transcripts
        writers: list[tuple[str, str]] = []
        real_append = store.append

        def recording(session_id: str, role: str, content: str, tool_calls: Any = None) -> None:
            writers.append((role, threading.current_thread().name))
            real_append(session_id, role, content, tool_calls)

        monkeypatch.setattr(store, "append", recording)

        async def scenario() -> str:
            run = await services.sessions.start_turn("segments", "Read your soul.", title=False)
            await run.wait()
            assert isinstance(run.log[-1], RunFinished), run.log[-1]
            return threading.current_thread().name

        loop_thread = asyncio.run(scenario())
    assert writers[0] == ("user", loop_thread)
    assert [role for role, _thread in writers[1:]] == ["assistant", "assistant"]
    assert all(thread != loop_thread for _role, thread in writers[1:])
    messages = store.load_messages("segments")
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[1]["content"] == "Reading." and messages[1]["tool_calls"][0]["tool"] == "read_file"
    assert messages[2]["content"] == "Done."


def test_a_new_or_kept_session_history_is_taken_without_a_read_on_a_worker_thread(
    services: Services, llm: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``start_turn`` takes the history of a session with no file, or whose file is the one the store
    last wrote, on the event loop (one stat, no thread hop); a file another writer changed is read."""
    store = services.sessions.store
    reads: list[str] = []
    real_load = store.load_for_agent

    def counting_load(session_id: str) -> list[dict[str, str]]:
        reads.append(session_id)
        return real_load(session_id)

    monkeypatch.setattr(store, "load_for_agent", counting_load)

    def sent_to_model() -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in llm.requests[-1]["messages"] if m["role"] != "system"]

    async def turn(text: str) -> None:
        run = await services.sessions.start_turn("kept", text, title=False)
        await run.wait()
        assert isinstance(run.log[-1], RunFinished)

    async def scenario() -> None:
        await turn("first")
        assert sent_to_model() == [("user", "first")]
        await turn("second")
        assert sent_to_model() == [("user", "first"), ("assistant", "The answer."), ("user", "second")]
        assert reads == []
        TranscriptStore(store.directory, store.home).append("kept", "user", "from another writer")
        await turn("third")
        assert reads == ["kept"]
        assert sent_to_model()[-2:] == [("user", "from another writer"), ("user", "third")]

    asyncio.run(scenario())


def test_a_lone_turn_writes_its_message_on_the_loop_and_a_turn_beside_another_on_a_worker_thread(
    services: Services, llm: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no other turn running, the loop has nothing else to do while the message's write waits
    for the disk, and a worker thread would only start it once the loop is idle (after the
    response has started): the message is written on the loop, before the turn starts. Beside a
    running turn it is written on a worker thread, so that turn's stream never waits for the disk."""
    store = services.transcripts
    writers: list[tuple[str, str]] = []
    real_append = store.append

    def recording(session_id: str, role: str, content: str, tool_calls: Any = None) -> None:
        if role == "user":
            writers.append((session_id, threading.current_thread().name))
        real_append(session_id, role, content, tool_calls)

    monkeypatch.setattr(store, "append", recording)

    async def scenario() -> str:
        holding = await turn_running(services, llm)
        beside = await services.sessions.start_turn("beside", "And you?", title=False)
        await beside.wait()
        assert isinstance(beside.log[-1], RunFinished)
        assert await services.sessions.cancel("holding")
        await holding.wait()
        alone = await services.sessions.start_turn("alone", "Only me?", title=False)
        await alone.wait()
        assert isinstance(alone.log[-1], RunFinished)
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert [session for session, _thread in writers] == ["holding", "beside", "alone"]
    threads = dict(writers)
    assert threads["holding"] == loop_thread and threads["alone"] == loop_thread
    assert threads["beside"] != loop_thread
    assert [m["content"] for m in store.load_messages("beside")] == ["And you?", "The answer."]
    assert [m["content"] for m in store.load_messages("alone")] == ["Only me?", "The answer."]


@pytest.mark.parametrize("stored", [False, True])
def test_a_turn_cancelled_before_its_first_step_still_has_its_message_written(
    services: Services, llm: ScriptedOpenAIServer, stored: bool
) -> None:
    """Even a stored session's turn, which writes its message only once needed, cancelled before
    it ran a step: the message is on disk when the cancel returns (and nothing of an answer)."""
    store = services.transcripts
    if stored:
        store.append("quick", "user", "Before?")
        store.append("quick", "assistant", "Before.")

    async def scenario() -> None:
        await (await services.sessions.start_turn("warm", "Build the model.", title=False)).wait()
        requests_before = len(llm.requests)
        run = await services.sessions.start_turn("quick", "Never mind.", title=False)
        assert await services.sessions.cancel("quick")
        assert isinstance(run.log[-1], RunCancelled)
        assert [m["content"] for m in store.load_messages("quick")][-1] == "Never mind."
        assert len(llm.requests) == requests_before  # the model was not asked

    asyncio.run(scenario())
