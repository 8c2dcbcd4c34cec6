"""The ``clawlet`` command: ``init``, ``serve``, ``chat``, and cluster mode's ``exec-plane``,
``control-plane`` and ``cluster``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import uuid
from collections.abc import Iterable, Sequence

from clawlet import __version__, aio
from clawlet.config import Settings
from clawlet.event_stream import EventStream
from clawlet.events import (
    ApprovalRequested,
    NewSegment,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.home import init_home
from clawlet.secret_env import move_secrets_to_memory, receive_secrets

DEMO_TOKEN_DELAY = 0.02


def cmd_init(settings: Settings) -> int:
    created = init_home(settings.paths)
    print(f"clawlet home: {settings.paths.root}")
    for path in created:
        print(f"  created {path.relative_to(settings.paths.root)}")
    if not created:
        print("  (everything was already there; nothing overwritten)")
    return 0


def cmd_serve(settings: Settings) -> int:
    """Serve the home. Before it answers ``/health/ready`` the server imports only what the app and its
    routes need: LangChain, LangGraph, the model SDKs, numpy, jsonschema and httpx (about a second
    and 40 MB) are imported by the first request that uses them (a workspace's engine is built on
    first use, :class:`clawlet.runtime.engine_adapter.EngineHandle`; ``tests/test_startup_imports.py``
    guards it)."""
    import uvicorn

    from clawlet.api.app import create_app
    from clawlet.llm.providers import ProviderConfigError, describe_model
    from clawlet.logs import configure_logging
    from clawlet.serving import GRACEFUL_SHUTDOWN_SECONDS, uvicorn_options
    from clawlet.tools.sandbox import sandbox_status, startup_warning

    if settings.listens_beyond_loopback and not settings.accepted_tokens:
        print(
            f"error: refusing to listen on {settings.host} without a token. Set CLAWLET_API_TOKEN "
            "(clients then send 'Authorization: Bearer <token>') or listen on 127.0.0.1.",
            file=sys.stderr,
        )
        return 2
    # (the gateway needs no check of its own: without a token it is refused here, and with an API
    # token the gateway accepts that token when CLAWLET_GATEWAY_TOKEN is not set)
    try:
        info = describe_model(settings)
    except ProviderConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    init_home(settings.paths)
    sandbox = sandbox_status(settings.sandbox)
    print(
        f"clawlet {__version__} · home {settings.paths.root} · model {info.label}"
        f" · sandbox {sandbox.describe()}"
        + (f" · {settings.engine_workers} engine workers" if settings.engine_workers else "")
    )
    if warning := startup_warning(sandbox):
        print(warning, file=sys.stderr)
    print(f"listening on http://{settings.host}:{settings.port}  (Ctrl+C to stop)")
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    gateway_urls = [f"ws://{host}:{settings.port}/gateway"]
    if settings.gateway_port:
        gateway_urls.append(f"ws://{host}:{settings.gateway_port}/gateway")
    print(f"OpenClaw gateway (protocol v3/v4) at {'  and  '.join(gateway_urls)}")
    app = create_app(settings, demo_token_delay=DEMO_TOKEN_DELAY)
    # Everything loaded so far (LangChain, pydantic models, ...) lives as long as the process: move
    # it out of the collector's reach, so full collections only walk objects made while serving
    # (with 1,000 SSE clients they took ~300 ms each before; see bench/sse_fanout.py).
    gc.collect()
    gc.freeze()
    configure_logging(settings.log_format, settings.log_level)
    if settings.gateway_port:  # both servers in one event loop, sharing the app's services
        from clawlet.api.gateway_ws import serve_with_gateway_port

        serve_with_gateway_port(app, settings, GRACEFUL_SHUTDOWN_SECONDS)
        return 0
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        **uvicorn_options(),
    )
    return 0


class TerminalStream(EventStream[None]):
    """A chat turn printed as it happens: the answer, tool calls and their output, the end."""

    def on_retrieval(self, event: Retrieval) -> Iterable[None]:
        print(f"  🔎 memory: {len(event.results)} passage(s) retrieved", flush=True)
        return ()

    def on_text(self, event: TextDelta) -> Iterable[None]:
        print(event.text, end="", flush=True)
        return ()

    def on_tool_start(self, event: ToolStart) -> Iterable[None]:
        print(f"\n  ⚙ {event.tool}: {event.input}", flush=True)
        return ()

    def on_tool_end(self, event: ToolEnd) -> Iterable[None]:
        shown = event.output if len(event.output) <= 600 else event.output[:600] + " …"
        marker = "✗" if event.is_error else "→"
        print("  " + f"{marker} " + shown.replace("\n", "\n    "), flush=True)
        return ()

    def on_new_segment(self, event: NewSegment) -> Iterable[None]:
        print()
        return ()

    def on_finished(self, event: RunFinished) -> Iterable[None]:
        print()
        return ()

    def on_cancelled(self, event: RunCancelled) -> Iterable[None]:
        print("\n[cancelled]")
        return ()

    def on_failed(self, event: RunFailed) -> Iterable[None]:
        print(f"\n[error] {event.error}", file=sys.stderr)
        return ()

    def on_title(self, event: Title) -> Iterable[None]:
        print(f"[title: {event.title}]")
        return ()

    def on_run_started(self, event: RunStarted) -> Iterable[None]:
        return ()

    def on_thinking(self, event: Thinking) -> Iterable[None]:
        return ()

    def on_usage(self, event: Usage) -> Iterable[None]:
        return ()

    def on_approval(self, event: ApprovalRequested) -> Iterable[None]:
        return ()

    def on_question(self, event: QuestionAsked) -> Iterable[None]:
        return ()

    def on_waiting(self, event: RunWaiting) -> Iterable[None]:
        return ()


async def _chat_turn(services: object, session_id: str, text: str) -> None:
    from clawlet.services import Services

    assert isinstance(services, Services)
    run = await services.sessions.start_turn(session_id, text)
    await TerminalStream().consume(run.events())


async def _chat(settings: Settings, session_id: str, messages: Sequence[str]) -> int:
    from clawlet.llm.providers import describe_model
    from clawlet.services import build_services

    init_home(settings.paths)
    services = build_services(settings, demo_token_delay=DEMO_TOKEN_DELAY)
    print(f"clawlet chat · model {describe_model(settings).label} · session {session_id}")
    try:
        if messages:
            for text in messages:
                print(f"> {text}")
                await _chat_turn(services, session_id, text)
            return 0
        print("Type a message; /exit or Ctrl+D quits.")
        while True:
            try:
                text = await asyncio.to_thread(input, "> ")
            except EOFError:
                print()
                return 0
            if text.strip() in ("/exit", "/quit"):
                return 0
            if text.strip():
                try:
                    await _chat_turn(services, session_id, text)
                except KeyboardInterrupt:
                    await services.sessions.cancel(session_id)
    finally:
        await services.sessions.shutdown()


def cmd_exec_plane(settings: Settings, state_dir: str | None) -> int:
    """The execution-plane daemon (cluster mode), configured by its environment (``VM_TOKEN`` and
    ``VM_TICKET`` are held in memory: see :mod:`clawlet.secret_env`)."""
    from pathlib import Path

    from clawlet.execplane.client import (
        ENV_CONTROL_PLANE_WS,
        ENV_USER_ID,
        ENV_VM_TICKET,
        ENV_VM_TOKEN,
        safe_url,
    )
    from clawlet.execplane.daemon import run_exec_plane
    from clawlet.logs import configure_logging
    from clawlet.secret_env import ENVIRON_WITH_SECRETS as environ

    names = (ENV_USER_ID, ENV_VM_TOKEN, ENV_VM_TICKET, ENV_CONTROL_PLANE_WS)
    missing = [name for name in names if name != ENV_VM_TICKET and not environ.get(name, "").strip()]
    if missing:
        print(
            f"error: clawlet exec-plane is configured by the environment variables {', '.join(names)}; "
            f"missing: {', '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    if not environ.get(ENV_VM_TICKET, "").strip():
        print(
            f"note: {ENV_VM_TICKET} is not set: connecting with the VM token alone"
            " (as a restarted daemon does)",
            file=sys.stderr,
        )
    state = Path(state_dir).expanduser() if state_dir else settings.home.expanduser() / "exec-plane"
    print(
        f"clawlet {__version__} exec-plane · user {environ[ENV_USER_ID].strip()} · control plane "
        f"{safe_url(environ[ENV_CONTROL_PLANE_WS].strip())} · state {state}",
        flush=True,
    )
    configure_logging(settings.log_format, settings.log_level)
    try:
        return aio.run(run_exec_plane(state, settings, environ=environ, demo_token_delay=DEMO_TOKEN_DELAY))
    except ValueError as exc:  # e.g. CONTROL_PLANE_WS is not a ws:// or wss:// URL
        print(f"error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clawlet", description="A transparent, file-driven AI agent.")
    parser.add_argument("--version", action="version", version=f"clawlet {__version__}")
    parser.add_argument("--home", help="clawlet home directory (default: $CLAWLET_HOME or ~/.clawlet)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the clawlet home with its default files")
    serve = sub.add_parser("serve", help="run the local server (API + UI)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8002)")
    serve.add_argument(
        "--gateway-port",
        type=int,
        help="also serve the OpenClaw gateway protocol on this port (like OpenClaw's 18789)",
    )
    chat = sub.add_parser("chat", help="chat in the terminal")
    chat.add_argument("--session", default=None, help="session id to continue (default: a new one)")
    chat.add_argument(
        "-m", "--message", action="append", default=[], help="send this message and exit (repeatable)"
    )
    exec_plane = sub.add_parser(
        "exec-plane",
        help="run the execution-plane daemon of a user machine (cluster mode; configured by "
        "USER_ID, VM_TOKEN, VM_TICKET, CONTROL_PLANE_WS)",
    )
    exec_plane.add_argument(
        "--state-dir",
        default=None,
        help="where sessions, memory and caches live (default: <home>/exec-plane)",
    )
    from clawlet.cluster import local_cluster
    from clawlet.controlplane import cli as cp_cli

    cp_cli.add_parser(sub)
    local_cluster.add_parser(sub)
    return parser


def runs_tools_or_serves(args: argparse.Namespace) -> bool:
    """Whether the command runs for long, agent tools next to it or below it: its secrets must leave
    its environment (see :mod:`clawlet.secret_env`)."""
    if args.command == "control-plane":
        return bool(args.action == "serve")
    return args.command in ("serve", "chat", "exec-plane", "cluster")


def main(argv: Sequence[str] | None = None) -> int:
    receive_secrets()
    args = build_parser().parse_args(argv)
    if argv is None and runs_tools_or_serves(args):  # the real command line, not a call from code
        move_secrets_to_memory()  # returns only when there is nothing to move (or it cannot)
    overrides: dict[str, object] = {}
    if args.home:
        overrides["home"] = args.home
    if getattr(args, "host", None):
        overrides["host"] = args.host
    if getattr(args, "port", None):
        overrides["port"] = args.port
    if getattr(args, "gateway_port", None):
        overrides["gateway_port"] = args.gateway_port
    settings = Settings(**overrides)  # type: ignore[arg-type]
    try:
        aio.loop_name()
    except ValueError as exc:  # CLAWLET_EVENT_LOOP names no loop this machine has
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "init":
        return cmd_init(settings)
    if args.command == "serve":
        return cmd_serve(settings)
    if args.command == "exec-plane":
        return cmd_exec_plane(settings, args.state_dir)
    if args.command == "control-plane":
        from clawlet.controlplane import cli as cp_cli

        return cp_cli.run(args, settings)
    if args.command == "cluster":
        from clawlet.cluster import local_cluster

        return local_cluster.run(args, settings)
    session_id = args.session or uuid.uuid4().hex
    return aio.run(_chat(settings, session_id, args.message))


if __name__ == "__main__":
    raise SystemExit(main())
