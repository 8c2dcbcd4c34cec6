"""Cluster mode's process-level faults (issue 8's acceptance), against real processes on loopback.

Each test starts a control plane and execution planes as separate OS processes with
:class:`~clawlet.cluster.local_cluster.LocalCluster` (as ``clawlet cluster`` does) and drives them
only from outside: the HTTP API, signals, ``/proc`` and the files the processes write.

The execution planes' model is a :class:`~clawlet.testing.scripted_openai.ScriptedOpenAIServer` on
loopback rather than the demo model, because the demo model reports no token usage, so no
``usage_report`` would ever be queued. It behaves like the demo model for what these tests send:
``python: <code>`` calls ``python_repl`` with that code, ``recall: <query>`` calls
``long_term_memory`` (the exec plane's ``memory_search`` request to the control plane), a tool
result is answered with the tool's output, anything else is echoed. Slow turns do not sleep for a
fixed time: their tool waits for a *gate* file the test creates when it is ready, so "in the middle
of a turn" is a state the test waits for, not a guess about timing.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.controlplane.db import ControlPlaneStore, default_database_url
from clawlet.controlplane.frontend import resume_after
from clawlet.execplane.offline import USAGE_QUEUE_FILE
from clawlet.execplane.session_child import CHILD_MODULE
from clawlet.execplane.session_process import PROCESS_LOG
from clawlet.execplane.session_template import TEMPLATE_MODULE
from clawlet.llm.demo import TITLE_REQUEST_MARKER
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.conftest import free_port, parse_sse

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

DEADLINE = 90.0
"""Seconds any one awaited state may take (generous: a loaded 2-core machine)."""
GATE_WAIT = 25.0
"""How long a gated tool waits for its gate (python_repl's own limit is 30 s)."""

ECHO_CHUNKS = 24
"""Text chunks of an echo: a turn has more events than an interrupted turn's end (see test 1)."""

QUEUED_OFFLINE = re.compile(r"queued usage_report record (\w+) until the control plane is back")
"""The exec plane's log line for a usage report queued while the control plane is unreachable."""

SECRET_PIECE = 12
"""Characters of a ticket or a VM token's payload or signature that no log may contain."""

SENT_FRAME = "control plane <- "
"""How an exec plane's DEBUG log shows a frame it sent (the JWT masked)."""

Events = list[tuple[str, dict[str, Any]]]


# -- the scripted model --------------------------------------------------------------------------


def _last_message(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    return last if isinstance(last, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def scripted_reply(body: dict[str, Any]) -> Turn:
    """The demo model's behaviour for what these tests send (see the module docstring)."""
    last = _last_message(body)
    text = _text(last.get("content")).strip()
    if last.get("role") == "tool":
        return text_turn(f"[scripted] the tool said: {text}", chunks=6)
    if text.startswith("python:"):
        return tool_turn(ToolCall("python_repl", {"code": text.removeprefix("python:").strip()}))
    if text.startswith("recall:"):
        return tool_turn(ToolCall("long_term_memory", {"query": text.removeprefix("recall:").strip()}))
    return text_turn(f"[scripted] you said: {text}", chunks=ECHO_CHUNKS)


def gated_code(gate: str, output: str) -> str:
    """Python that waits for the file ``workspace/<gate>`` of its home to exist (at most
    ``GATE_WAIT`` s), then prints ``output``. The gate is in the workspace because the tool runs in
    the sandbox, which sees nothing of the host but the home's workspace (see :func:`open_gate`)."""
    return (
        f"import pathlib, time\n"
        f"gate = pathlib.Path('workspace', {gate!r})\n"
        f"deadline = time.monotonic() + {GATE_WAIT}\n"
        f"while not gate.exists() and time.monotonic() < deadline:\n"
        f"    time.sleep(0.05)\n"
        f"print({output!r} if gate.exists() else 'gate timeout')"
    )


def llm_env(llm: ScriptedOpenAIServer) -> dict[str, str]:
    """An execution plane's environment for the scripted model."""
    return {
        "CLAWLET_PROVIDER": "openai",
        "CLAWLET_LLM_BASE_URL": llm.base_url,
        "CLAWLET_LLM_MODEL": llm.model,
        "CLAWLET_LLM_API_KEY": "test-key",
    }


def is_title_request(body: dict[str, Any]) -> bool:
    """Whether a model request is the session title's (made by the exec plane's app after a first
    turn; its usage is reported as a record of its own, ``purpose: "title"``: see
    :func:`is_title_usage`)."""
    first = (body.get("messages") or [{}])[0]
    return isinstance(first, dict) and _text(first.get("content")).startswith(TITLE_REQUEST_MARKER)


def turn_requests(llm: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    """The model requests of the agents' turns so far (titles left out)."""
    return [body for body in list(llm.requests) if not is_title_request(body)]


def usage_of(llm: ScriptedOpenAIServer) -> tuple[int, int]:
    """The tokens (in, out) the scripted model reported over the turns' requests so far."""
    from clawlet.testing.scripted_openai import _estimate_tokens  # what the server reports

    tokens_in = tokens_out = 0
    for body in turn_requests(llm):
        turn = scripted_reply(body)
        tokens_in += _estimate_tokens(body.get("messages", []))
        tokens_out += _estimate_tokens([turn.text, [call.arguments_json() for call in turn.tool_calls]])
    return tokens_in, tokens_out


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


# -- the cluster ---------------------------------------------------------------------------------


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Factory: ``make_cluster(users, exec_env=…, exec_planes=True)``: a control plane and (unless
    ``exec_planes`` is false) one connected exec plane per user, with ``exec_env`` added to their
    environment; everything is stopped at the end."""
    started: list[LocalCluster] = []

    def make(
        users: list[str], *, exec_env: dict[str, str] | None = None, exec_planes: bool = True
    ) -> LocalCluster:
        cluster = LocalCluster(tmp_path / "cluster", users, free_port())
        started.append(cluster)
        cluster.prepare_users()
        cluster.start_control_plane()
        if exec_planes:
            for user in users:
                cluster.start_exec_plane(user, {**cluster.vm_credentials(user), **(exec_env or {})})
            cluster.wait_connected(len(users))
        return cluster

    yield make
    for cluster in started:
        cluster.stop()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def chat(cluster: LocalCluster, user: str, message: str, session_id: str) -> Events:
    response = httpx.post(
        f"{cluster.base_url}/api/chat",
        json={"message": message, "session_id": session_id},
        headers=auth(cluster.tokens[user]),
        timeout=DEADLINE,
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def names(events: Events) -> list[str]:
    return [name for name, _ in events]


def wait_until(ready: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """Poll ``ready`` until it returns something truthy (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def health(cluster: LocalCluster) -> dict[str, Any] | None:
    try:
        data = httpx.get(f"{cluster.base_url}/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def connected_exec_planes(cluster: LocalCluster) -> int:
    data = health(cluster)
    return int(data.get("connected_exec_planes", 0)) if data else 0


@dataclass
class Background:
    """A call running in a thread: its result or exception once it ends."""

    function: Callable[[], Any]
    result: Any = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.function()
        except BaseException as exc:
            self.error = exc

    def wait(self, timeout: float = DEADLINE) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.function} did not end within {timeout:g}s"
        if self.error is not None:
            raise self.error
        return self.result


class EventStream:
    """``GET /api/cluster/sessions/{id}/events`` read in a thread: the session's raw exec-plane
    events as they arrive, from the control plane's first (``after=0``) or from where
    ``last_event_id`` (an SSE ``id`` this stream or another gave) left off. The thread ends when
    the stream does (the session stops, or the control plane goes away)."""

    def __init__(
        self, cluster: LocalCluster, user: str, session_id: str, *, last_event_id: str | None = None
    ) -> None:
        self.url = f"{cluster.base_url}/api/cluster/sessions/{session_id}/events"
        self.headers = auth(cluster.tokens[user])
        if last_event_id is None:
            self.url += "?after=0"
        else:
            self.headers["Last-Event-ID"] = last_event_id
        self.events: list[dict[str, Any]] = []
        self.ids: list[str] = []
        """The SSE ``id`` of each event."""
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            timeout = httpx.Timeout(10.0, read=None)
            with httpx.stream("GET", self.url, headers=self.headers, timeout=timeout) as response:
                assert response.status_code == 200, response.status_code
                event_id = ""
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        event_id = line[3:].strip()
                    elif line.startswith("data:"):
                        with self._lock:
                            self.events.append(json.loads(line[5:]))
                            self.ids.append(event_id)
        except Exception as exc:  # the control plane was killed, typically
            self.error = exc

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def wait_for(
        self, match: Callable[[dict[str, Any]], bool], what: str, timeout: float = DEADLINE
    ) -> dict[str, Any]:
        """The first event ``match`` accepts, once it has arrived."""
        try:
            found: dict[str, Any] = wait_until(
                lambda: next((event for event in self.snapshot() if match(event)), None), what, timeout
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the stream got {self.snapshot()} (error: {self.error!r})") from None
        return found

    def ended(self) -> bool:
        return not self._thread.is_alive()


def is_type(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event.get("type") == kind and all(event.get(k) == v for k, v in fields.items())


def open_store(cluster: LocalCluster) -> ControlPlaneStore:
    """The control plane's database (``<data_dir>/control-plane/controlplane.db``), for reading."""
    return ControlPlaneStore.open(default_database_url(cluster.cp_dir))


def is_title_usage(row: dict[str, Any]) -> bool:
    """Whether a usage row is a session title's model call (not a turn's)."""
    return (row.get("extra") or {}).get("purpose") == "title"


def usage_rows(store: ControlPlaneStore, user: str, session_id: str) -> list[dict[str, Any]]:
    """The usage rows of the turns of ``session_id`` (the control plane's id of the session)."""
    return [
        row for row in store.list_usage(user) if row["session_id"] == session_id and not is_title_usage(row)
    ]


def last_heartbeat(store: ControlPlaneStore, user: str) -> int:
    """When the control plane last heard from ``user``'s exec plane (ms; heartbeats update it)."""
    return max((vm.last_seen or 0 for vm in store.list_vms(user)), default=0)


def open_gate(cluster: LocalCluster, users: list[str], gate: str) -> None:
    """Create the gate file :func:`gated_code` waits for in each user's exec-plane workspace."""
    for user in users:
        (cluster.data_dir / "exec-planes" / user / "home" / "workspace" / gate).touch()


def queued_records(cluster: LocalCluster, user: str) -> list[dict[str, Any]]:
    """The fire-and-forget records waiting in ``user``'s exec plane's ``usage_queue.jsonl``."""
    path = cluster.data_dir / "exec-planes" / user / USAGE_QUEUE_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line being written
    return records


def session_processes(exec_plane_pid: int) -> dict[str, int]:
    """The session processes of an exec plane, found through ``/proc``: {session id: pid}.

    A session process is a child of the exec plane running ``python -m <CHILD_MODULE>``, or a child
    of the exec plane's session template (``python -m <TEMPLATE_MODULE>``, which forks them); its
    command line does not name the session, but its stderr (fd 2) is ``<session dir>/process.log``."""
    parents: dict[int, int] = {}
    commands: dict[int, list[bytes]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    templates = {
        pid
        for pid, parent in parents.items()
        if parent == exec_plane_pid and TEMPLATE_MODULE.encode() in commands[pid]
    }
    found: dict[str, int] = {}
    for pid, parent in parents.items():
        spawned = parent == exec_plane_pid and CHILD_MODULE.encode() in commands[pid]
        if not spawned and parent not in templates:
            continue
        try:
            stderr = Path(os.readlink(f"/proc/{pid}/fd/2"))
        except OSError:
            continue  # gone meanwhile
        if stderr.name == PROCESS_LOG:
            found[stderr.parent.name] = pid
    return found


def logs_of(cluster: LocalCluster) -> dict[str, str]:
    return {
        path.name: path.read_text(encoding="utf-8", errors="replace")
        for path in sorted((cluster.data_dir / "logs").glob("*.log"))
    }


# -- 1. the control plane dies in the middle of a turn -------------------------------------------


def test_control_plane_killed_mid_turn_and_restarted(
    make_cluster: Callable[..., LocalCluster],
    llm: ScriptedOpenAIServer,
    request: pytest.FixtureRequest,
) -> None:
    cluster = make_cluster(["alice"], exec_env=llm_env(llm))
    store = open_store(cluster)
    request.addfinalizer(store.close)
    remote_id = "s1"  # the exec plane's id of the session: the API's own (it runs there)
    assert names(chat(cluster, "alice", "first turn", "s1"))[-2:] == ["done", "title"]

    # a turn whose tool waits for the gate; the control plane dies while it waits
    gate = "gate-1"
    old = EventStream(cluster, "alice", "s1")
    message = "python: " + gated_code(gate, "slept through it")
    turn = Background(lambda: chat(cluster, "alice", message, "s1"))
    old.wait_for(is_type("tool_call_start", tool_name="python_repl"), "the gated tool to start")
    seen_before, last_id_before = old.snapshot(), old.ids[-1]
    # a heartbeat (every 10 s) after those events: its ping's pong confirms they arrived, so the
    # exec plane will not replay them — only what it buffers from now on reaches the new process
    heard = last_heartbeat(store, "alice")
    wait_until(lambda: last_heartbeat(store, "alice") > heard, "a heartbeat after the tool started")
    time.sleep(0.5)  # the pong's way back (if it is late, the events are replayed: still correct)
    assert cluster.kill("control-plane") == -signal.SIGKILL
    killed_at = time.monotonic()
    wait_until(old.ended, "the old control plane's event stream to end")
    with pytest.raises(httpx.HTTPError):  # the user's stream of that turn broke with the process
        turn.wait()

    # the turn completes on the exec plane meanwhile; its usage report waits on disk
    open_gate(cluster, ["alice"], gate)
    queued_offline = wait_until(
        lambda: QUEUED_OFFLINE.findall(logs_of(cluster)["exec-plane-alice.log"]),
        "the interrupted turn's usage report to be queued while the control plane is away",
    )
    assert len(queued_offline) == 1, queued_offline
    waiting = {record["id"]: record for record in queued_records(cluster, "alice")}
    assert waiting[queued_offline[0]]["session_id"] == remote_id, waiting
    cluster.check_alive()  # the exec plane rode out the outage

    # the same port and data directory again: the exec plane comes back by itself
    cluster.start_control_plane()
    restarted_at = time.monotonic()
    cluster.wait_connected(1)
    reconnected_at = time.monotonic()
    print(  # measured, for the report (pytest -s)
        f"\nexec plane back {reconnected_at - restarted_at:.1f}s after the control plane answered,"
        f" {reconnected_at - killed_at:.1f}s after the kill"
    )
    me = httpx.get(f"{cluster.base_url}/api/cluster/me", headers=auth(cluster.tokens["alice"]), timeout=30)
    assert me.json() == {"user_id": "alice", "exec_plane_connected": True}

    # the events of the outage arrive at the new control plane once each, in order
    last_before = max(event["seq"] for event in seen_before)

    def interrupted_turn_complete(event: dict[str, Any]) -> bool:
        return event.get("type") == "execution_complete" and event["seq"] > last_before

    new = EventStream(cluster, "alice", "s1")
    complete = new.wait_for(interrupted_turn_complete, "the interrupted turn's end at the new control plane")
    assert "slept through it" in complete["content"]
    received = [event for event in new.snapshot() if event["seq"] <= complete["seq"]]
    seqs = [event["seq"] for event in received]
    assert seqs == sorted(set(seqs)), f"duplicated or out of order: {seqs}"
    kinds = [event["type"] for event in received if event["seq"] > last_before]
    assert kinds[0] == "tool_call_complete" and kinds[-1] == "execution_complete", kinds
    assert "text_chunk" in kinds
    tool_end = next(event for event in received if event["type"] == "tool_call_complete")
    assert "slept through it" in tool_end["result"] and not tool_end["is_error"]
    # nothing lost: what the old control plane had and what the new one got hold the whole turn
    # once (``seq`` skips only the events without a seed name: RunStarted, NewSegment, Usage)
    by_seq = {event["seq"]: event for event in [*seen_before, *received]}
    ordered = [by_seq[seq] for seq in sorted(by_seq)]
    first_end = next(i for i, event in enumerate(ordered) if event["type"] == "execution_complete")
    interrupted = ordered[first_end + 1 :]
    assert [event["type"] for event in interrupted if event["type"] != "text_chunk"] == [
        "tool_call_start",
        "tool_call_complete",
        "execution_complete",
    ], interrupted
    chunks = [event["content"] for event in interrupted if event["type"] == "text_chunk"]
    assert "".join(chunks) == complete["content"], interrupted
    # a client that resumes with the last SSE id the old control plane gave it gets them too
    resumed = EventStream(cluster, "alice", "s1", last_event_id=last_id_before)
    resumed.wait_for(interrupted_turn_complete, "the interrupted turn's end after Last-Event-ID", 30)
    # the event log outlived the old process: the new one replays what the old one had (same SSE
    # ids), and a client resuming with an old id gets only what came after it
    assert [event for event in new.snapshot() if event["seq"] <= last_before] == seen_before
    assert new.ids[: len(seen_before)] == old.ids[: len(seen_before)]
    assert min(event["seq"] for event in resumed.snapshot()) > last_before

    # the queued usage reports arrive exactly once: one row per turn, with the model's tokens
    wait_until(lambda: not queued_records(cluster, "alice"), "the usage queue to be flushed")
    wait_until(lambda: len(usage_rows(store, "alice", remote_id)) >= 2, "the usage rows")
    rows = usage_rows(store, "alice", remote_id)
    assert len(rows) == 2 and queued_offline[0] in {row["id"] for row in rows}, rows
    assert (sum(row["tokens_in"] for row in rows), sum(row["tokens_out"] for row in rows)) == usage_of(llm)

    # and the session keeps working through the HTTP API
    after = chat(cluster, "alice", "after the restart", "s1")
    assert names(after)[-1] == "done", after
    assert "after the restart" in str(after[-1][1]["content"])
    wait_until(lambda: len(usage_rows(store, "alice", remote_id)) >= 3, "the next turn's usage row")
    rows = usage_rows(store, "alice", remote_id)
    assert len(rows) == 3, rows
    assert (sum(row["tokens_in"] for row in rows), sum(row["tokens_out"] for row in rows)) == usage_of(llm)
    exec_log = logs_of(cluster)["exec-plane-alice.log"]
    assert "buffered SSE events" in exec_log and "flushing the fire-and-forget queue" in exec_log


# -- 1b. a request in flight when the control plane dies -----------------------------------------


def exec_plane_frames(cluster: LocalCluster, user: str) -> list[dict[str, Any]]:
    """The frames ``user``'s exec plane sent, from its DEBUG log (``control plane <- {frame}``)."""
    frames = []
    for line in logs_of(cluster)[f"exec-plane-{user}.log"].splitlines():
        try:
            message = json.loads(line).get("message", "")
            if message.startswith(SENT_FRAME):
                frames.append(json.loads(message.removeprefix(SENT_FRAME)))
        except (ValueError, AttributeError):
            continue  # not a JSON line, or a frame cut at 500 characters
    return frames


def test_a_request_in_flight_when_the_control_plane_dies_is_settled_by_resume(
    make_cluster: Callable[..., LocalCluster], llm: ScriptedOpenAIServer
) -> None:
    """The exec plane's ``memory_search`` is in flight (sent, unanswered) when the control plane
    dies: after the reconnect, ``resume`` settles it (the new process never saw it: ``lost``) rather
    than leaving it to its 60 s timeout, and the tool degrades to "no memories" as the seed says."""
    cluster = make_cluster(["alice"], exec_env={**llm_env(llm), "CLAWLET_LOG_LEVEL": "DEBUG"})
    control_plane = cluster.processes["control-plane"]
    frozen = threading.Event()

    def script(body: dict[str, Any]) -> Turn:
        turn = scripted_reply(body)
        if turn.tool_calls and turn.tool_calls[0].name == "long_term_memory":
            frozen.wait(DEADLINE)  # answer only once the control plane cannot
        return turn

    llm.set_script(script)
    try:
        turn = Background(lambda: chat(cluster, "alice", "recall: the user's favourite colour", "m1"))
        wait_until(lambda: any("recall:" in json.dumps(body) for body in llm.requests), "the model call")
        control_plane.send_signal(signal.SIGSTOP)  # frozen: it keeps the socket, answers nothing
    finally:
        frozen.set()
    request = wait_until(
        lambda: next(
            (f for f in exec_plane_frames(cluster, "alice") if f.get("method") == "memory_search"), None
        ),
        "the exec plane's memory_search request",
    )
    assert cluster.kill("control-plane") == -signal.SIGKILL
    with pytest.raises(httpx.HTTPError):
        turn.wait()
    cluster.start_control_plane()
    cluster.wait_connected(1)

    events = EventStream(cluster, "alice", "m1")
    done = events.wait_for(is_type("execution_complete"), "the turn's end at the new control plane")
    memory = next(
        e for e in events.snapshot() if is_type("tool_call_complete", tool_name="long_term_memory")(e)
    )
    assert "No long-term memories matched" in memory["result"] and not memory["is_error"], memory
    assert "No long-term memories matched" in done["content"]
    exec_log = logs_of(cluster)["exec-plane-alice.log"]
    assert "resumed 1 requests: 0 completed, 1 lost, 0 still pending" in exec_log
    assert f"memory_search request {request['id']} was lost while reconnecting" in exec_log
    assert "did not answer memory_search" not in exec_log  # not its timeout
    assert re.search(
        r"resume from \S+: 0 completed, 0 pending, 1 lost", logs_of(cluster)["control-plane.log"]
    )


# -- 2. one session process dies in the middle of a turn -----------------------------------------


def test_a_killed_session_process_fails_only_its_turn(
    make_cluster: Callable[..., LocalCluster], llm: ScriptedOpenAIServer
) -> None:
    cluster = make_cluster(["alice", "bob"], exec_env=llm_env(llm))
    sessions = [("alice", "victim"), ("alice", "neighbour"), ("bob", "other-user")]
    # every session's process is up before the turns that matter start together
    for user, sid in sessions:
        assert names(chat(cluster, user, f"hello from {sid}", sid))[-2:] == ["done", "title"]

    gate = "gate-2"
    streams = {sid: EventStream(cluster, user, sid) for user, sid in sessions}
    turns = {
        sid: Background(
            functools.partial(chat, cluster, user, "python: " + gated_code(gate, f"ok {sid}"), sid)
        )
        for user, sid in sessions
    }
    for sid, stream in streams.items():
        stream.wait_for(is_type("tool_call_start", tool_name="python_repl"), f"{sid}'s tool to start")

    alice_pid, bob_pid = (cluster.processes[f"exec-plane-{user}"].pid for user in ("alice", "bob"))
    victim_id = "victim"
    children, bobs = session_processes(alice_pid), session_processes(bob_pid)
    assert victim_id in children and "neighbour" in children, children
    assert list(bobs) == ["other-user"], bobs
    os.kill(children[victim_id], signal.SIGKILL)

    victim = turns["victim"].wait()
    assert names(victim)[-1] == "error", victim
    error = str(victim[-1][1]["error"])
    assert "session process" in error and "SIGKILL" in error, error
    assert "done" not in names(victim)
    raw_error = streams["victim"].wait_for(is_type("execution_error"), "the victim's execution_error")
    assert "SIGKILL" in raw_error["error"]

    # the others were running all along and finish normally once their tools may
    for sid in ("neighbour", "other-user"):
        assert turns[sid].thread.is_alive(), f"{sid} ended early: {turns[sid].result}"
        assert not [e for e in streams[sid].snapshot() if f"ok {sid}" in str(e.get("result"))]
    open_gate(cluster, ["alice", "bob"], gate)
    for sid in ("neighbour", "other-user"):
        events = turns[sid].wait()
        assert "error" not in names(events) and names(events)[-1] == "done", events
        assert f"ok {sid}" in str(events[-1][1]["content"])
    cluster.check_alive()
    assert connected_exec_planes(cluster) == 2
    # their processes are the ones they had: nothing restarted them
    assert session_processes(bob_pid) == bobs
    survivors = session_processes(alice_pid)
    assert victim_id not in survivors and survivors == {k: v for k, v in children.items() if k != victim_id}

    # the killed session's next message starts a new process, and the conversation goes on
    again = chat(cluster, "alice", "are you back?", "victim")
    assert names(again)[-1] == "done" and "are you back?" in str(again[-1][1]["content"]), again
    new_children = session_processes(alice_pid)
    assert victim_id in new_children and new_children[victim_id] != children[victim_id]
    history = httpx.get(
        f"{cluster.base_url}/api/sessions/victim/history", headers=auth(cluster.tokens["alice"]), timeout=30
    ).json()["messages"]
    assert history[-1]["role"] == "assistant" and "are you back?" in history[-1]["content"]


# -- 3. a used ticket and an expired ticket ------------------------------------------------------


def test_reused_and_expired_tickets_are_refused(
    make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    # debug logging in every process: not even a debug line may hold a ticket or a VM token
    monkeypatch.setenv("CLAWLET_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("CLAWLET_LOG_FORMAT", "text")
    cluster = make_cluster(["alice"], exec_planes=False)
    first = cluster.vm_credentials("alice")
    cluster.start_exec_plane("alice", first)
    cluster.wait_connected(1)

    # the same credentials again: the ticket was redeemed by the first connection
    reused = cluster.start_extra_exec_plane("exec-plane-alice-reused", first)
    assert cluster.wait_exit(reused) == 1  # refused for good: not retried
    # a ticket that expired before it was used
    expiring = cluster.vm_credentials("alice", ticket_ttl=0.5)
    issued_by = time.time()
    time.sleep(max(0.0, issued_by + 0.6 - time.time()))  # now past the ticket's expiry
    expired = cluster.start_extra_exec_plane("exec-plane-alice-expired", expiring)
    assert cluster.wait_exit(expired) == 1

    logs = logs_of(cluster)
    for name, reason in ((reused, "ticket already used"), (expired, "ticket expired")):
        text = logs[f"{name}.log"]
        assert f"the control plane refused the connection: ticket_rejected: {reason}" in text, text
        assert "not retrying" in text
    control = logs["control-plane.log"]
    assert control.count("refused an execution plane connection for user 'alice': ticket_rejected") == 2
    # the first exec plane was not disturbed by either
    assert connected_exec_planes(cluster) == 1
    me = httpx.get(f"{cluster.base_url}/api/cluster/me", headers=auth(cluster.tokens["alice"]), timeout=30)
    assert me.json() == {"user_id": "alice", "exec_plane_connected": True}
    assert names(chat(cluster, "alice", "still connected?", "t1"))[-2:] == ["done", "title"]

    # no ticket and no VM token in any log (the processes' and the sessions'), URL or frame —
    # not even a piece of one (websockets' debug lines show a frame's head and tail)
    pieces = {
        secret[start : start + SECRET_PIECE]
        for credentials in (first, expiring)
        for secret in (credentials["VM_TICKET"], *credentials["VM_TOKEN"].split(".")[1:])
        for start in range(len(secret) - SECRET_PIECE + 1)
    }
    log_files = sorted(cluster.data_dir.rglob("*.log"))
    assert {path.name for path in log_files} >= {"control-plane.log", "process.log"}
    for path in log_files:
        text = path.read_text(encoding="utf-8", errors="replace")
        leaked = sorted(piece for piece in pieces if piece in text)
        assert not leaked, f"{path} holds pieces of a ticket or a VM token: {leaked[:3]}"
    assert "ticket=***" in control  # the URLs with a ticket were logged, masked


def test_resume_positions_of_the_cluster_event_stream() -> None:
    """The SSE ids of /api/cluster/.../events are the event log's ``n`` (see test 1)."""
    assert resume_after("17", 3) == 17  # after event 17, whichever control plane gave the id
    assert resume_after(" 17 ", None) == 17
    assert resume_after("garbage", 3) == 3  # ignored: the after parameter holds
    assert resume_after("a1b2c3d4-17", None) is None  # the ids before the durable log: ignored
    assert resume_after("١٧", None) is None  # digits, but not ASCII ones
    assert resume_after("9" * 5000, 3) == 3  # no number an event has (nor one int() takes)
