"""``clawlet control-plane``: serve the control plane, and administer its users.

=====================================================  ==============================================
``clawlet control-plane serve``                        the control plane: ``/ws/vm`` for execution
                                                       planes, every user's HTTP API and the UIs
``clawlet control-plane add-user ID``                  a user, and their first API token (printed);
                                                       ``--runtime-type``, ``--model``, ``--base-url``:
                                                       their default runtime and model
``clawlet control-plane set-runtime ID``               change the user's default runtime
                                                       (``--runtime-type``) and model (``--model``,
                                                       ``--base-url``); ``""`` clears one
``clawlet control-plane token ID``                     another API token for the user
``clawlet control-plane vm-credentials ID``            ``USER_ID``/``VM_TOKEN``/``VM_TICKET``/
                                                       ``CONTROL_PLANE_WS`` for ``clawlet exec-plane``
                                                       (the ticket is valid for 30 s, once)
``clawlet control-plane users``                        the users and whether their machine is online
``clawlet control-plane add-memory ID TEXT``            an entry of the user's long-term memory
``clawlet control-plane set-mcp ID FILE``               the user's remote MCP servers (JSON
                                                       ``{name: {command, args}}``)
``clawlet control-plane add-skill ID VERSION DIR``      publish a skill package (``--user``: that
                                                       user's own); sessions get it in their index
=====================================================  ==============================================

Everything lives in the data directory (``--data-dir``, default ``<clawlet home>/control-plane``):
the database (``controlplane.db``, or ``CLAWLET_CP_DATABASE_URL``), the VM-token signing secret
(``jwt_secret``, made on first use with mode 0600, or ``CLAWLET_CP_JWT_SECRET``), this instance's
caches (``cache/<id>/``: the index of each user's long-term memory, which lives in the database with
their MCP servers) and ``server.json``, where ``serve`` records the URL execution planes reach it at
(so ``vm-credentials`` hands out the right ``CONTROL_PLANE_WS``). ``serve`` keeps the secret, the
database URL and the Redis URL (``CLAWLET_REDIS_URL``: the broker of several instances, see
:mod:`clawlet.controlplane.broker`) in memory only, out of its environment (see :mod:`clawlet.secret_env`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from clawlet.config import Settings
from clawlet.controlplane.broker import ENV_REDIS_URL, check_redis_url
from clawlet.secret_env import ENVIRON_WITH_SECRETS
from clawlet.storage import atomic_write_json, atomic_write_text

if TYPE_CHECKING:  # the control plane's modules load on use: `clawlet --help` stays quick
    from clawlet.controlplane.db import UserRecord
    from clawlet.controlplane.server import ControlPlane, ControlPlaneConfig

DEFAULT_PORT: Final = 8100
ENV_JWT_SECRET: Final = "CLAWLET_CP_JWT_SECRET"  # noqa: S105 (a variable name)
ENV_DATABASE_URL: Final = "CLAWLET_CP_DATABASE_URL"
ENV_EVENT_LOG_MAX_EVENTS: Final = "CLAWLET_CP_EVENT_LOG_MAX_EVENTS"
ENV_EVENT_LOG_MAX_AGE_DAYS: Final = "CLAWLET_CP_EVENT_LOG_MAX_AGE_DAYS"
SECRET_FILE: Final = "jwt_secret"  # noqa: S105 (a file name)
SERVER_FILE: Final = "server.json"


def default_data_dir(settings: Settings) -> Path:
    return settings.home.expanduser() / "control-plane"


def jwt_secret(data_dir: Path) -> str:
    """``CLAWLET_CP_JWT_SECRET``, else the data directory's secret (created on first use, 0600)."""
    from_env = ENVIRON_WITH_SECRETS.get(ENV_JWT_SECRET, "").strip()
    if from_env:
        return from_env
    from clawlet.controlplane.server import new_jwt_secret

    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, new_jwt_secret() + "\n")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def recorded_public_url(data_dir: Path) -> str | None:
    try:
        data = json.loads((data_dir / SERVER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = data.get("public_url") if isinstance(data, dict) else None
    return url if isinstance(url, str) and url else None


def build_config(data_dir: Path, public_url: str | None = None) -> ControlPlaneConfig:
    """The control plane's config for ``data_dir`` (``public_url``: else the one ``serve`` recorded)."""
    from clawlet.controlplane.server import ControlPlaneConfig

    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = public_url or recorded_public_url(data_dir) or f"http://127.0.0.1:{DEFAULT_PORT}"
    retention: dict[str, Any] = {}
    max_events = positive_env(ENV_EVENT_LOG_MAX_EVENTS)
    if max_events is not None:
        retention["event_log_max_events"] = max(1, int(max_events))
    max_age_days = positive_env(ENV_EVENT_LOG_MAX_AGE_DAYS)
    if max_age_days is not None:
        retention["event_log_max_age"] = max_age_days * 24 * 3600
    return ControlPlaneConfig(
        data_dir=data_dir,
        jwt_secret=jwt_secret(data_dir),
        database_url=ENVIRON_WITH_SECRETS.get(ENV_DATABASE_URL, "").strip() or None,
        redis_url=ENVIRON_WITH_SECRETS.get(ENV_REDIS_URL, "").strip() or None,
        public_url=url,
        **retention,
    )


def positive_env(name: str) -> float | None:
    """The positive number in the environment variable ``name`` (``None`` when unset or blank);
    ``SystemExit`` saying so for anything else."""
    raw = ENVIRON_WITH_SECRETS.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise SystemExit(f"error: {name} must be a positive number (got {raw!r})")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("control-plane", help="cluster mode: run the control plane or manage its users")
    parser.add_argument(
        "--data-dir", default=None, help="the control plane's data (default: <home>/control-plane)"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    serve = actions.add_parser("serve", help="serve /ws/vm, every user's API and the UIs")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument(
        "--public-url",
        default=None,
        help="the URL execution planes reach this server at (default http://<host>:<port>)",
    )
    add_user = actions.add_parser("add-user", help="create a user and print their first API token")
    add_user.add_argument("user_id")
    add_user.add_argument("--name", default="")
    add_user.add_argument("--org", default=None, help="organisation id")
    add_user.add_argument("--runtime-type", default=None, help="the user's default runtime (e.g. openclaw)")
    _model_arguments(add_user)
    add_user.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="PROVIDER=KEY",
        help="an LLM API key sent to the user's execution plane in init (repeatable)",
    )
    runtime = actions.add_parser(
        "set-runtime", help="change a user's default runtime and model (for the sessions they start next)"
    )
    runtime.add_argument("user_id")
    runtime.add_argument(
        "--runtime-type", default=None, help='the default runtime (e.g. openclaw; "" clears)'
    )
    _model_arguments(runtime)
    token = actions.add_parser("token", help="print a new API token for a user")
    token.add_argument("user_id")
    token.add_argument("--label", default="")
    creds = actions.add_parser("vm-credentials", help="print the environment for `clawlet exec-plane`")
    creds.add_argument("user_id")
    creds.add_argument("--vm-id", default=None)
    creds.add_argument("--export", action="store_true", help="as `export NAME=value` lines for a shell")
    actions.add_parser("users", help="list the users")
    memory = actions.add_parser("add-memory", help="add an entry to a user's long-term memory")
    memory.add_argument("user_id")
    memory.add_argument("text")
    skill = actions.add_parser(
        "add-skill", help="publish a skill directory (with its SKILL.md) as a version of a skill package"
    )
    skill.add_argument("skill_id")
    skill.add_argument("version")
    skill.add_argument("directory")
    skill.add_argument("--user", default=None, help="the user's own package (default: global)")
    mcp = actions.add_parser(
        "set-mcp", help="set a user's remote MCP servers from a JSON file {name: {command, args}}"
    )
    mcp.add_argument("user_id")
    mcp.add_argument("file")


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help='the default model, as provider/model (e.g. openai/gpt-4o-mini; "" clears; default: the'
        " execution plane's own CLAWLET_LLM_MODEL)",
    )
    parser.add_argument(
        "--base-url", default=None, help="the model's OpenAI-compatible endpoint (with --model)"
    )


def model_settings_argument(args: argparse.Namespace) -> dict[str, str] | None:
    """The model settings ``--model``/``--base-url`` ask for (``{}``: clear; ``None``: unchanged)."""
    if args.model is None:
        if args.base_url is not None:
            raise ValueError("--base-url goes with --model")
        return None
    from clawlet.controlplane.server import check_model_settings

    return check_model_settings({"model": args.model, "base_url": args.base_url or ""})


def run(args: argparse.Namespace, settings: Settings) -> int:
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir(settings)
    if args.action == "serve":
        return serve(settings, data_dir, args.host, args.port, args.public_url)
    from clawlet.controlplane.db import UnknownUser, UserExists
    from clawlet.controlplane.server import ControlPlane
    from clawlet.controlplane.userdata import InvalidUserId

    plane = ControlPlane(build_config(data_dir))
    try:
        return _admin(plane, args)
    except (UnknownUser, UserExists, InvalidUserId, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        plane.close()


def _admin(plane: ControlPlane, args: argparse.Namespace) -> int:
    from clawlet.controlplane.db import UnknownUser

    if args.action == "add-user":
        keys: dict[str, str] = {}
        for item in args.api_key:
            provider, sep, key = item.partition("=")
            if not sep or not provider.strip() or not key.strip():
                raise ValueError(f"--api-key wants PROVIDER=KEY (got {item!r})")
            keys[provider.strip()] = key.strip()
        model = model_settings_argument(args)  # checked before the user is created
        plane.create_user(args.user_id, args.name, keys, org_id=args.org)
        if args.runtime_type or model:
            plane.update_user(args.user_id, runtime_type=args.runtime_type or None, model_settings=model)
        print(plane.issue_user_token(args.user_id, "add-user"))
        return 0
    if args.action == "set-runtime":
        model = model_settings_argument(args)
        if args.runtime_type is None and model is None:
            raise ValueError("set-runtime needs --runtime-type and/or --model")
        user = plane.update_user(args.user_id, runtime_type=args.runtime_type, model_settings=model)
        print(f"{user.id}\t{_runtime_summary(user)}")
        return 0
    if args.action == "token":
        if plane.get_user(args.user_id) is None:
            raise UnknownUser(f"no user {args.user_id!r}")
        print(plane.issue_user_token(args.user_id, args.label))
        return 0
    if args.action == "vm-credentials":
        credentials = plane.issue_vm_credentials(args.user_id, args.vm_id)
        for name, value in credentials.env().items():
            print(f"export {name}={value}" if args.export else f"{name}={value}")
        return 0
    if args.action == "add-memory":
        plane.add_memory(args.user_id, args.text)
        return 0
    if args.action == "add-skill":
        files = package_files(Path(args.directory))
        plane.add_skill_package(args.skill_id, args.version, files, user_id=args.user)
        print(f"published {args.skill_id} {args.version} ({len(files)} files)")
        return 0
    if args.action == "set-mcp":
        try:
            servers = json.loads(Path(args.file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {args.file}: {exc}") from None
        if not isinstance(servers, dict):
            raise ValueError(f"{args.file} must hold a JSON object {{name: {{command, args}}}}")
        plane.set_mcp_servers(args.user_id, servers.get("mcpServers", servers))
        return 0
    for user in plane.store.list_users():
        vms = plane.store.list_vms(user.id)
        online = any(vm.connected for vm in vms)
        state = "disabled" if user.disabled else ("online" if online else "offline")
        print(f"{user.id}\t{user.name}\t{state}\t{_runtime_summary(user)}")
    return 0


def _runtime_summary(user: UserRecord) -> str:
    model = user.model_settings or {}
    shown = model.get("model", "-") + (f" at {model['base_url']}" if "base_url" in model else "")
    return f"runtime={user.runtime_type or '-'}\tmodel={shown}"


def package_files(directory: Path) -> list[dict[str, str]]:
    """The files under ``directory`` as a skill package: text as is, anything else as base64."""
    import base64

    if not (directory / "SKILL.md").is_file():
        raise ValueError(f"{directory} has no SKILL.md")
    files: list[dict[str, str]] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory).as_posix()
        data = path.read_bytes()
        try:
            files.append({"path": relative, "content": data.decode("utf-8")})
        except UnicodeDecodeError:
            files.append({"path": relative, "content": base64.b64encode(data).decode(), "encoding": "base64"})
    return files


def serve(settings: Settings, data_dir: Path, host: str, port: int, public_url: str | None) -> int:
    import uvicorn

    from clawlet import __version__
    from clawlet.controlplane.frontend import create_cluster_app
    from clawlet.controlplane.server import install_ticket_redaction, server_config
    from clawlet.logs import configure_logging
    from clawlet.serving import GRACEFUL_SHUTDOWN_SECONDS

    shown_host = f"[{host}]" if ":" in host else host
    url = public_url or f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown_host}:{port}"
    config = build_config(data_dir, url)
    try:
        check_redis_url(config.redis_url)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_json(config.data_dir / SERVER_FILE, {"public_url": url})
    # the Host check (clawlet.api.origin_guard) answers to the address it listens on
    app = create_cluster_app(config, settings.model_copy(update={"host": host}))
    print(f"clawlet {__version__} control plane · data {config.data_dir}")
    print(f"listening on http://{shown_host}:{port}  (execution planes: {config.ws_url})", flush=True)
    configure_logging(settings.log_format, settings.log_level)
    install_ticket_redaction()
    options = {"log_config": None, "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS}
    uvicorn.Server(server_config(app, host, port, **options)).run()
    return 0
