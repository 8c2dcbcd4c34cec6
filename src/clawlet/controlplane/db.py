"""The control plane's database: SQLAlchemy 2 Core tables, Alembic migrations, and the store.

Opened and migrated by :mod:`clawlet.sql`, like the inbox's: SQLite (WAL, foreign keys, a busy
timeout) by default, in ``<data_dir>/controlplane.db``; the same code runs on PostgreSQL (``postgresql+psycopg://…``).
Schema changes are numbered Alembic revisions in ``migrations/versions/``, applied on start and
never edited once applied. The version table is ``controlplane_schema_version``, so the control
plane can share a database with the inbox (whose tables are ``tasks`` and ``messages``).

Tables (times are epoch milliseconds unless said otherwise):

* ``users`` — ``id``, ``name``, ``org_id``, ``api_keys`` (JSON ``{provider: key}``; the execution
  plane gets them in ``init`` and keeps them in memory only), ``disabled``, ``created_at``,
  ``runtime_type`` (the user's default runtime), ``model_settings`` (JSON ``{model, provider,
  base_url}``: the user's default model, for any runtime).
* ``user_tokens`` — the bearer tokens of the HTTP API by SHA-256 ``digest`` → ``user_id``.
* ``orgs`` — ``id`` → ``runtime_type`` and ``model_settings``, the organisation's defaults.
* ``vms`` — one row per execution plane: ``id``, ``user_id``, ``connected``, ``last_seen``.
* ``sessions`` — which user owns which session (``id``, ``user_id``, ``status``), so the isolation
  of sessions survives a restart of the control plane.
* ``usage``, ``audit``, ``evolution_submissions`` — fire-and-forget records, primary key
  ``(user_id, id)``: a record the execution plane sends again (it delivers at least once) is
  stored once, and no user can collide with another's ids. ``ts`` is when the record was made.
* ``snapshots`` — the latest snapshot per ``(user_id, session_id)`` (an upsert that never lets an
  older snapshot replace a newer one).
* ``skill_packages`` — ``(skill_id, version, user_id)`` → files (JSON ``[{path, content,
  encoding}]``); ``user_id`` NULL is a global package. Uniqueness is two partial unique indexes
  (NULLs are distinct in a plain unique key).
* ``session_events``, ``session_event_counters``, ``session_transcripts`` — the durable event log
  of sessions and their latest transcripts (defined and used by :mod:`clawlet.controlplane.event_log`).
* ``user_memories`` — each user's long-term memory, one row per entry: ``(user_id, digest)`` (the
  entry's SHA-256, so adding the same text twice stores it once) → ``text``, ``created_at``.
* ``user_mcp_servers`` — each user's remote MCP servers: ``(user_id, name)`` → ``spec`` (JSON
  ``{command, args?, env?}``). Both are read by :mod:`clawlet.controlplane.userdata`.
* ``request_outcomes`` — the execution planes' requests (``memory_search``, ``mcp_call``, …) by
  ``(user_id, request_id)``: ``status`` ``running`` (on ``instance_id``), ``completed`` (``outcome``:
  the ``resume_response`` result) or ``lost`` (a ``resume`` said so before anyone ran it), until
  ``expires_at``; so a ``resume`` on any instance finds it, and no instance runs a request another
  has (see :mod:`clawlet.controlplane.server`).
* ``tickets`` — connect tickets by SHA-256 digest (:class:`SqlTicketBackend`, times in epoch
  seconds as :mod:`clawlet.controlplane.auth` uses them); the claim is one conditional ``UPDATE``.

:class:`ControlPlaneStore` is synchronous (call it from a thread in async code).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from clawlet import sql
from clawlet.controlplane.auth import Claim, TicketRecord
from clawlet.sql import create_db_engine, writer_lock

VERSION_TABLE: Final = "controlplane_schema_version"
_IN_CHUNK: Final = 500
"""Values per ``IN (…)`` list (SQLite limits the parameters of a statement)."""
DB_FILE: Final = "controlplane.db"

metadata = sa.MetaData()

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False, server_default=""),
    sa.Column("org_id", sa.Text, nullable=True),
    sa.Column("api_keys", sa.JSON, nullable=False),
    sa.Column("disabled", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("runtime_type", sa.Text, nullable=True),
    sa.Column("model_settings", sa.JSON, nullable=True),
)

user_tokens = sa.Table(
    "user_tokens",
    metadata,
    sa.Column("digest", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("label", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

orgs = sa.Table(
    "orgs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("runtime_type", sa.Text, nullable=True),
    sa.Column("model_settings", sa.JSON, nullable=True),
)

vms = sa.Table(
    "vms",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("connected", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_seen", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="running"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

usage = sa.Table(
    "usage",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=True),
    sa.Column("tokens_in", sa.BigInteger, nullable=True),
    sa.Column("tokens_out", sa.BigInteger, nullable=True),
    sa.Column("extra", sa.JSON, nullable=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("details", sa.JSON, nullable=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
)

evolution_submissions = sa.Table(
    "evolution_submissions",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
)

snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

skill_packages = sa.Table(
    "skill_packages",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("skill_id", sa.Text, nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
    sa.Column("files", sa.JSON, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

user_memories = sa.Table(
    "user_memories",
    metadata,
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("digest", sa.Text, primary_key=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

user_mcp_servers = sa.Table(
    "user_mcp_servers",
    metadata,
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
)

request_outcomes = sa.Table(
    "request_outcomes",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("request_id", sa.Text, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("instance_id", sa.Text, nullable=False),
    sa.Column("outcome", sa.JSON, nullable=True),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
)

tickets = sa.Table(
    "tickets",
    metadata,
    sa.Column("digest", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("vm_id", sa.Text, nullable=True),
    sa.Column("issued_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("used_at", sa.Double, nullable=True),
)


# -- engine and migrations -----------------------------------------------------------------------


def default_database_url(data_dir: Path) -> str:
    return f"sqlite:///{Path(data_dir).expanduser() / DB_FILE}"


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the control plane's schema up to ``revision``."""
    sql.migrate(engine, "clawlet.controlplane", "migrations", VERSION_TABLE, revision)


def current_revision(engine: Engine) -> str | None:
    return sql.current_revision(engine, VERSION_TABLE)


def open_engine(url: str) -> Engine:
    """An engine for ``url`` with the schema migrated to the newest revision."""
    engine = create_db_engine(url)
    migrate(engine)
    return engine


# -- helpers -------------------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_ts(value: Any, default: int) -> int:
    """An ISO 8601 ``ts`` (or epoch seconds) as epoch milliseconds; ``default`` if unreadable."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float):
        return int(value * 1000)
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return default
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return default


def insert_ignoring_duplicates(
    connection: Connection, table: sa.Table, values: Mapping[str, Any], keys: Sequence[str]
) -> bool:
    """``INSERT … ON CONFLICT DO NOTHING``; ``True`` if a row was added."""
    dialect = connection.dialect.name
    statement: Any
    if dialect == "postgresql":
        statement = postgresql.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
    elif dialect == "sqlite":
        statement = sqlite.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
    else:  # any other backend: insert and treat a key violation as "already there"
        try:
            with connection.begin_nested():
                connection.execute(table.insert().values(**values))
        except sa.exc.IntegrityError:
            return False
        return True
    return _added(connection, statement, table)


def _added(connection: Connection, statement: Any, table: sa.Table) -> bool:
    """Run an insert/upsert with ``RETURNING`` its key: ``True`` if it wrote a row (``rowcount``
    is not reliable for ``ON CONFLICT`` statements on every driver)."""
    key = next(iter(table.primary_key.columns))
    return connection.execute(statement.returning(key)).first() is not None


def upsert_where(
    connection: Connection,
    table: sa.Table,
    values: Mapping[str, Any],
    keys: Sequence[str],
    condition: Callable[[Any], sa.ColumnElement[bool]],
) -> bool:
    """Insert ``values``, or replace the row with the same ``keys`` when ``condition(new)`` holds
    (``new.<column>``: the value offered, against the table's columns); ``True`` if it wrote."""
    dialect = connection.dialect.name
    if dialect in ("postgresql", "sqlite"):
        module: Any = postgresql if dialect == "postgresql" else sqlite
        statement = module.insert(table).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=list(keys),
            set_={name: statement.excluded[name] for name in values if name not in keys},
            where=condition(statement.excluded),
        )
        return _added(connection, statement, table)
    offered = SimpleNamespace(**{name: sa.literal(value) for name, value in values.items()})
    key = sa.and_(*(table.c[name] == values[name] for name in keys))
    changed = connection.execute(sa.update(table).where(key, condition(offered)).values(**values)).rowcount
    if changed:
        return True
    return insert_ignoring_duplicates(connection, table, values, keys)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it, else its JSON round trip with unknown objects as strings."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


# -- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserRecord:
    id: str
    name: str
    org_id: str | None
    api_keys: dict[str, str]
    disabled: bool
    created_at: int
    runtime_type: str | None = None
    """The user's default runtime type (below a session's and an agent's, above the organisation's)."""
    model_settings: dict[str, str] | None = None
    """The user's default model (``{model, provider, base_url}``; same precedence as the runtime)."""


@dataclass(frozen=True)
class VmRecord:
    id: str
    user_id: str
    connected: bool
    last_seen: int | None
    created_at: int


@dataclass(frozen=True)
class SessionRecord:
    id: str
    user_id: str
    status: str
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class SkillPackageRecord:
    skill_id: str
    version: str
    user_id: str | None
    """``None``: a global package."""
    files: list[dict[str, Any]]
    created_at: int


@dataclass(frozen=True)
class RequestOutcome:
    """A row of ``request_outcomes``."""

    status: Literal["running", "completed", "lost"]
    """``lost``: a ``resume`` answered so before any instance ran it (it never will)."""
    instance_id: str
    """The instance that runs (or ran) the request."""
    outcome: dict[str, Any] | None
    """A completed request's ``resume_response`` result."""


SessionStatus = Literal["running", "stopped"]


class UserExists(ValueError):
    """A user with that id exists already."""


class UnknownUser(LookupError):
    """No user with that id."""


class SkillPackageExists(ValueError):
    """That version of the skill is published already (for that user, or globally)."""


def _user(row: sa.Row[Any]) -> UserRecord:
    keys = row.api_keys if isinstance(row.api_keys, dict) else {}
    return UserRecord(
        id=row.id,
        name=row.name,
        org_id=row.org_id,
        api_keys={str(k): str(v) for k, v in keys.items()},
        disabled=bool(row.disabled),
        created_at=int(row.created_at),
        runtime_type=row.runtime_type,
        model_settings=_model_settings(row.model_settings),
    )


def _model_settings(value: Any) -> dict[str, str] | None:
    """A stored ``model_settings`` (``None``: none, or not an object)."""
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str) and v} or None


def _vm(row: sa.Row[Any]) -> VmRecord:
    return VmRecord(
        id=row.id,
        user_id=row.user_id,
        connected=bool(row.connected),
        last_seen=None if row.last_seen is None else int(row.last_seen),
        created_at=int(row.created_at),
    )


def _session(row: sa.Row[Any]) -> SessionRecord:
    return SessionRecord(row.id, row.user_id, row.status, int(row.created_at), int(row.updated_at))


def _package(row: sa.Row[Any]) -> SkillPackageRecord:
    files = row.files if isinstance(row.files, list) else []
    return SkillPackageRecord(row.skill_id, row.version, row.user_id, files, int(row.created_at))


# -- the store -----------------------------------------------------------------------------------


class ControlPlaneStore:
    """Every read and write of the control plane's tables (synchronous; thread-safe)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str) -> ControlPlaneStore:
        """Connect to ``url`` and migrate the schema."""
        return cls(open_engine(url))

    def close(self) -> None:
        self.engine.dispose()

    # users

    def create_user(
        self, user_id: str, name: str, api_keys: Mapping[str, str], *, org_id: str | None = None
    ) -> UserRecord:
        values = {
            "id": user_id,
            "name": name,
            "org_id": org_id,
            "api_keys": {str(k): str(v) for k, v in api_keys.items()},
            "disabled": 0,
            "created_at": now_ms(),
        }
        with self.engine.begin() as db:
            if not insert_ignoring_duplicates(db, users, values, ["id"]):
                raise UserExists(f"user {user_id!r} exists already")
        user = self.get_user(user_id)
        assert user is not None
        return user

    def get_user(self, user_id: str) -> UserRecord | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(users).where(users.c.id == user_id)).first()
        return None if row is None else _user(row)

    def update_user(
        self,
        user_id: str,
        *,
        name: str | None = None,
        api_keys: Mapping[str, str] | None = None,
        org_id: str | None = None,
        disabled: bool | None = None,
        runtime_type: str | None = None,
        model_settings: Mapping[str, str] | None = None,
    ) -> UserRecord:
        """Change the given fields (``runtime_type=""`` and ``model_settings={}`` clear the user's
        defaults)."""
        changes: dict[str, Any] = {}
        if runtime_type is not None:
            changes["runtime_type"] = runtime_type or None
        if model_settings is not None:
            changes["model_settings"] = _model_settings(dict(model_settings))
        if name is not None:
            changes["name"] = name
        if api_keys is not None:
            changes["api_keys"] = {str(k): str(v) for k, v in api_keys.items()}
        if org_id is not None:
            changes["org_id"] = org_id
        if disabled is not None:
            changes["disabled"] = int(disabled)
        with self.engine.begin() as db:
            if changes:
                result = db.execute(sa.update(users).where(users.c.id == user_id).values(**changes))
                if not result.rowcount:
                    raise UnknownUser(f"no user {user_id!r}")
        user = self.get_user(user_id)
        if user is None:
            raise UnknownUser(f"no user {user_id!r}")
        return user

    def list_users(self) -> list[UserRecord]:
        with self.engine.connect() as db:
            return [_user(row) for row in db.execute(sa.select(users).order_by(users.c.id))]

    # user API tokens (only their SHA-256 digests are stored)

    def add_user_token(self, user_id: str, digest: str, label: str = "") -> None:
        if self.get_user(user_id) is None:
            raise UnknownUser(f"no user {user_id!r}")
        values = {"digest": digest, "user_id": user_id, "label": label, "created_at": now_ms()}
        with self.engine.begin() as db:
            db.execute(user_tokens.insert().values(**values))

    def user_for_token_digest(self, digest: str) -> UserRecord | None:
        """The user a token digest belongs to (``None``: unknown digest)."""
        query = sa.select(users).join(user_tokens, user_tokens.c.user_id == users.c.id)
        with self.engine.connect() as db:
            row = db.execute(query.where(user_tokens.c.digest == digest)).first()
        return None if row is None else _user(row)

    def revoke_user_tokens(self, user_id: str) -> int:
        """Remove every API token of the user; how many there were."""
        with self.engine.begin() as db:
            return db.execute(sa.delete(user_tokens).where(user_tokens.c.user_id == user_id)).rowcount

    # organisations

    def set_org_runtime_type(self, org_id: str, runtime_type: str | None) -> None:
        self._set_org(org_id, runtime_type=runtime_type)

    def set_org_model_settings(self, org_id: str, model_settings: Mapping[str, str] | None) -> None:
        """The organisation's default model (``None`` or ``{}`` clears it)."""
        self._set_org(org_id, model_settings=_model_settings(dict(model_settings or {})))

    def _set_org(self, org_id: str, **values: Any) -> None:
        with self.engine.begin() as db:
            updated = db.execute(sa.update(orgs).where(orgs.c.id == org_id).values(**values)).rowcount
            if not updated:
                db.execute(orgs.insert().values(id=org_id, **values))

    def org_defaults(self, org_id: str) -> tuple[str | None, dict[str, str] | None]:
        """The organisation's default runtime type and model settings."""
        query = sa.select(orgs.c.runtime_type, orgs.c.model_settings).where(orgs.c.id == org_id)
        with self.engine.connect() as db:
            row = db.execute(query).first()
        if row is None:
            return None, None
        runtime = row.runtime_type if isinstance(row.runtime_type, str) and row.runtime_type else None
        return runtime, _model_settings(row.model_settings)

    # execution planes

    def register_vm(self, vm_id: str, user_id: str) -> None:
        values = {"id": vm_id, "user_id": user_id, "connected": 0, "created_at": now_ms()}
        with self.engine.begin() as db:
            insert_ignoring_duplicates(db, vms, values, ["id"])

    def set_vm_connected(self, vm_id: str, user_id: str, connected: bool) -> None:
        """Record a connect or a disconnect (the row is created when the VM is new)."""
        now = now_ms()
        with self.engine.begin() as db:
            insert_ignoring_duplicates(
                db, vms, {"id": vm_id, "user_id": user_id, "connected": 0, "created_at": now}, ["id"]
            )
            db.execute(
                sa.update(vms)
                .where(vms.c.id == vm_id, vms.c.user_id == user_id)
                .values(connected=int(connected), last_seen=now)
            )

    def touch_vm(self, vm_id: str) -> None:
        with self.engine.begin() as db:
            db.execute(sa.update(vms).where(vms.c.id == vm_id).values(last_seen=now_ms()))

    def get_vm(self, vm_id: str) -> VmRecord | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(vms).where(vms.c.id == vm_id)).first()
        return None if row is None else _vm(row)

    def list_vms(self, user_id: str) -> list[VmRecord]:
        with self.engine.connect() as db:
            rows = db.execute(sa.select(vms).where(vms.c.user_id == user_id).order_by(vms.c.created_at))
            return [_vm(row) for row in rows]

    def mark_all_vms_disconnected(self) -> None:
        """At start-up: no execution plane is connected to a process that just started."""
        with self.engine.begin() as db:
            db.execute(sa.update(vms).where(vms.c.connected != 0).values(connected=0))

    # sessions

    def claim_session(self, session_id: str, user_id: str) -> SessionRecord:
        """The session, created for ``user_id`` if new; whoever owns it is in the returned record."""
        now = now_ms()
        values = {
            "id": session_id,
            "user_id": user_id,
            "status": "running",
            "created_at": now,
            "updated_at": now,
        }
        with self.engine.begin() as db:
            insert_ignoring_duplicates(db, sessions, values, ["id"])
            row = db.execute(sa.select(sessions).where(sessions.c.id == session_id)).one()
        return _session(row)

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(sessions).where(sessions.c.id == session_id)).first()
        return None if row is None else _session(row)

    def set_session_status(self, session_id: str, user_id: str, status: SessionStatus) -> None:
        with self.engine.begin() as db:
            db.execute(
                sa.update(sessions)
                .where(sessions.c.id == session_id, sessions.c.user_id == user_id)
                .values(status=status, updated_at=now_ms())
            )

    def list_sessions(self, user_id: str) -> list[SessionRecord]:
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(sessions).where(sessions.c.user_id == user_id).order_by(sessions.c.created_at)
            )
            return [_session(row) for row in rows]

    # fire-and-forget records (each insert is idempotent by (user_id, id))

    def add_usage(
        self, user_id: str, record_id: str, session_id: str, params: Mapping[str, Any], ts: Any
    ) -> bool:
        received = now_ms()
        extra = {k: v for k, v in params.items() if k not in ("model", "tokens_in", "tokens_out")}
        model = params.get("model")
        values = {
            "user_id": user_id,
            "id": record_id,
            "session_id": session_id,
            "model": model if isinstance(model, str) else None,
            "tokens_in": _int_or_none(params.get("tokens_in")),
            "tokens_out": _int_or_none(params.get("tokens_out")),
            "extra": _jsonable(extra) if extra else None,
            "ts": parse_ts(ts, received),
            "received_at": received,
        }
        with self.engine.begin() as db:
            return insert_ignoring_duplicates(db, usage, values, ["user_id", "id"])

    def add_audit(
        self, user_id: str, record_id: str, session_id: str, params: Mapping[str, Any], ts: Any
    ) -> bool:
        received = now_ms()
        event = params.get("event")
        details = params.get("details")
        values = {
            "user_id": user_id,
            "id": record_id,
            "session_id": session_id,
            "event": event if isinstance(event, str) and event else "unknown",
            "details": _jsonable(details) if details is not None else None,
            "ts": parse_ts(ts, received),
            "received_at": received,
        }
        with self.engine.begin() as db:
            return insert_ignoring_duplicates(db, audit, values, ["user_id", "id"])

    def add_evolution(
        self, user_id: str, record_id: str, session_id: str, params: Mapping[str, Any], ts: Any
    ) -> bool:
        received = now_ms()
        values = {
            "user_id": user_id,
            "id": record_id,
            "session_id": session_id,
            "data": _jsonable(dict(params)),
            "ts": parse_ts(ts, received),
            "received_at": received,
        }
        with self.engine.begin() as db:
            return insert_ignoring_duplicates(db, evolution_submissions, values, ["user_id", "id"])

    def upsert_snapshot(self, user_id: str, session_id: str, data: Mapping[str, Any], ts: Any) -> bool:
        """Store the session's snapshot unless a newer one is stored; ``True`` if it was stored."""
        now = now_ms()
        values = {
            "user_id": user_id,
            "session_id": session_id,
            "data": _jsonable(dict(data)),
            "ts": parse_ts(ts, now),
            "updated_at": now,
        }
        with self.engine.begin() as db:
            return upsert_where(
                db, snapshots, values, ["user_id", "session_id"], lambda new: new.ts >= snapshots.c.ts
            )

    def get_snapshot(self, user_id: str, session_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as db:
            row = db.execute(
                sa.select(snapshots.c.data).where(
                    snapshots.c.user_id == user_id, snapshots.c.session_id == session_id
                )
            ).first()
        return None if row is None else dict(row.data)

    def list_usage(self, user_id: str) -> list[dict[str, Any]]:
        return self._rows(usage, user_id)

    def list_audit(self, user_id: str) -> list[dict[str, Any]]:
        return self._rows(audit, user_id)

    def list_evolution(self, user_id: str) -> list[dict[str, Any]]:
        return self._rows(evolution_submissions, user_id)

    def _rows(self, table: sa.Table, user_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(table).where(table.c.user_id == user_id).order_by(table.c.ts, table.c.id)
            )
            return [dict(row._mapping) for row in rows]

    # skill packages

    def add_skill_package(
        self, skill_id: str, version: str, files: list[dict[str, Any]], user_id: str | None = None
    ) -> SkillPackageRecord:
        created = now_ms()
        values = {
            "skill_id": skill_id,
            "version": version,
            "user_id": user_id,
            "files": files,
            "created_at": created,
        }
        where = "user_id IS NULL" if user_id is None else "user_id IS NOT NULL"
        keys = ["skill_id", "version"] if user_id is None else ["skill_id", "version", "user_id"]
        with self.engine.begin() as db:
            dialect = db.dialect.name
            if dialect in ("postgresql", "sqlite"):
                module: Any = postgresql if dialect == "postgresql" else sqlite
                statement = (
                    module.insert(skill_packages)
                    .values(**values)
                    .on_conflict_do_nothing(index_elements=keys, index_where=sa.text(where))
                )
                added = _added(db, statement, skill_packages)
            else:
                try:
                    with db.begin_nested():
                        db.execute(skill_packages.insert().values(**values))
                    added = True
                except sa.exc.IntegrityError:
                    added = False
        if not added:
            owner = "globally" if user_id is None else f"for user {user_id!r}"
            raise SkillPackageExists(f"skill {skill_id!r} version {version!r} is published {owner} already")
        return SkillPackageRecord(skill_id, version, user_id, files, created)

    def find_skill_package(self, user_id: str, skill_id: str, version: str) -> SkillPackageRecord | None:
        """The user's own package first, then a global one; ``latest`` is the newest published."""
        for owner in (user_id, None):
            owner_clause = (
                skill_packages.c.user_id.is_(None) if owner is None else skill_packages.c.user_id == owner
            )
            query = sa.select(skill_packages).where(skill_packages.c.skill_id == skill_id, owner_clause)
            if version != "latest":
                query = query.where(skill_packages.c.version == version)
            query = query.order_by(skill_packages.c.created_at.desc(), skill_packages.c.id.desc()).limit(1)
            with self.engine.connect() as db:
                row = db.execute(query).first()
            if row is not None:
                return _package(row)
        return None

    def newest_skill_packages(self, user_id: str) -> list[SkillPackageRecord]:
        """The newest version of every skill ``user_id`` sees: their own package of a skill wins
        over a global one."""
        owner_clause = skill_packages.c.user_id.is_(None) | (skill_packages.c.user_id == user_id)
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(skill_packages)
                .where(owner_clause)
                .order_by(skill_packages.c.created_at, skill_packages.c.id)
            ).all()
        own: dict[str, SkillPackageRecord] = {}
        shared: dict[str, SkillPackageRecord] = {}
        for row in rows:  # oldest first: later rows replace earlier ones
            record = _package(row)
            (own if record.user_id is not None else shared)[record.skill_id] = record
        return [{**shared, **own}[key] for key in sorted({*shared, *own})]

    def list_skill_versions(self, user_id: str | None, skill_id: str) -> list[str]:
        """Versions of ``skill_id`` visible to ``user_id`` (own and global; ``None``: global only)."""
        owner_clause: sa.ColumnElement[bool] = skill_packages.c.user_id.is_(None)
        if user_id is not None:
            owner_clause = owner_clause | (skill_packages.c.user_id == user_id)
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(skill_packages.c.version)
                .where(skill_packages.c.skill_id == skill_id, owner_clause)
                .order_by(skill_packages.c.created_at, skill_packages.c.id)
            )
            return list(dict.fromkeys(row.version for row in rows))

    # long-term memory and remote MCP servers

    def add_memory(self, user_id: str, digest: str, text: str) -> bool:
        """Store one memory entry (``digest``: its SHA-256); ``False`` if the user has it already."""
        values = {"user_id": user_id, "digest": digest, "text": text, "created_at": now_ms()}
        with self.engine.begin() as db:
            return insert_ignoring_duplicates(db, user_memories, values, ["user_id", "digest"])

    def memory_digests(self, user_id: str) -> list[str]:
        """The digests of the user's memory entries, oldest first."""
        query = (
            sa.select(user_memories.c.digest)
            .where(user_memories.c.user_id == user_id)
            .order_by(user_memories.c.created_at, user_memories.c.digest)
        )
        with self.engine.connect() as db:
            return [row.digest for row in db.execute(query)]

    def memory_texts(self, user_id: str, digests: Sequence[str]) -> dict[str, str]:
        """``{digest: text}`` of those of the user's entries (unknown digests are left out)."""
        texts: dict[str, str] = {}
        with self.engine.connect() as db:
            for start in range(0, len(digests), _IN_CHUNK):
                query = sa.select(user_memories.c.digest, user_memories.c.text).where(
                    user_memories.c.user_id == user_id,
                    user_memories.c.digest.in_(digests[start : start + _IN_CHUNK]),
                )
                texts.update((row.digest, row.text) for row in db.execute(query))
        return texts

    def set_mcp_servers(self, user_id: str, servers: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the user's remote MCP servers (one transaction)."""
        with self.engine.begin() as db:
            db.execute(sa.delete(user_mcp_servers).where(user_mcp_servers.c.user_id == user_id))
            if servers:
                db.execute(
                    user_mcp_servers.insert(),
                    [
                        {"user_id": user_id, "name": str(name), "spec": _jsonable(dict(spec))}
                        for name, spec in servers.items()
                    ],
                )

    def mcp_servers(self, user_id: str) -> dict[str, dict[str, Any]]:
        """``{name: spec}`` of the user's remote MCP servers."""
        query = sa.select(user_mcp_servers).where(user_mcp_servers.c.user_id == user_id)
        with self.engine.connect() as db:
            rows = db.execute(query.order_by(user_mcp_servers.c.name))
            return {row.name: dict(row.spec) for row in rows if isinstance(row.spec, dict)}

    # outcomes of the execution planes' requests

    def claim_request(
        self,
        user_id: str,
        request_id: str,
        instance_id: str,
        expires_at: int,
        status: Literal["running", "lost"] = "running",
    ) -> RequestOutcome | None:
        """Record that ``instance_id`` runs the request (``None``), unless a row of it that has not
        expired is there: then that row (the request runs elsewhere, finished, or was answered
        ``lost``). ``status="lost"`` records instead that a ``resume`` answered ``lost`` for it, so
        that no instance runs it after all."""
        now = now_ms()
        values = {
            "user_id": user_id,
            "request_id": request_id,
            "status": status,
            "instance_id": instance_id,
            "outcome": None,
            "expires_at": expires_at,
        }
        keys = ["user_id", "request_id"]
        with writer_lock(self.engine), self.engine.begin() as db:
            if upsert_where(
                db, request_outcomes, values, keys, lambda _new: request_outcomes.c.expires_at <= now
            ):
                return None
        return self.request_outcomes(user_id, [request_id]).get(request_id)

    def finish_request(
        self, user_id: str, request_id: str, instance_id: str, outcome: Mapping[str, Any], expires_at: int
    ) -> None:
        """Store the request's outcome (kept until ``expires_at``)."""
        values = {
            "user_id": user_id,
            "request_id": request_id,
            "status": "completed",
            "instance_id": instance_id,
            "outcome": _jsonable(dict(outcome)),
            "expires_at": expires_at,
        }
        with writer_lock(self.engine), self.engine.begin() as db:
            upsert_where(db, request_outcomes, values, ["user_id", "request_id"], lambda _new: sa.true())

    def request_outcomes(self, user_id: str, request_ids: Sequence[str]) -> dict[str, RequestOutcome]:
        """The rows of those of the user's requests that have not expired."""
        now = now_ms()
        found: dict[str, RequestOutcome] = {}
        with self.engine.connect() as db:
            for start in range(0, len(request_ids), _IN_CHUNK):
                query = sa.select(request_outcomes).where(
                    request_outcomes.c.user_id == user_id,
                    request_outcomes.c.request_id.in_(request_ids[start : start + _IN_CHUNK]),
                    request_outcomes.c.expires_at > now,
                )
                for row in db.execute(query):
                    outcome = row.outcome if isinstance(row.outcome, dict) else None
                    status: Literal["running", "completed", "lost"] = (
                        "running"
                        if row.status == "running"
                        else "completed"
                        if row.status == "completed"
                        else "lost"
                    )
                    found[row.request_id] = RequestOutcome(status, row.instance_id, outcome)
        return found

    def drop_running_requests(self, instance_id: str) -> int:
        """Forget the requests ``instance_id`` was running (it stopped them: a ``resume`` says ``lost``)."""
        with writer_lock(self.engine), self.engine.begin() as db:
            return int(
                db.execute(
                    sa.delete(request_outcomes).where(
                        request_outcomes.c.instance_id == instance_id, request_outcomes.c.status == "running"
                    )
                ).rowcount
            )

    def prune_request_outcomes(self) -> int:
        """Delete the expired rows of ``request_outcomes``; how many."""
        with writer_lock(self.engine), self.engine.begin() as db:
            return int(
                db.execute(
                    sa.delete(request_outcomes).where(request_outcomes.c.expires_at <= now_ms())
                ).rowcount
            )


# -- tickets -------------------------------------------------------------------------------------


class SqlTicketBackend:
    """:class:`clawlet.controlplane.auth.TicketBackend` in the ``tickets`` table.

    ``claim`` is a single ``UPDATE … SET used_at = now WHERE digest = … AND used_at IS NULL``: of
    any number of concurrent claims (threads, processes, control-plane replicas on one PostgreSQL)
    exactly one changes the row and is ``first``. Expiry is judged by :class:`TicketStore`.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, key: str, record: TicketRecord) -> None:
        with self.engine.begin() as db:
            db.execute(
                tickets.insert().values(
                    digest=key,
                    user_id=record.user_id,
                    vm_id=record.vm_id,
                    issued_at=record.issued_at,
                    expires_at=record.expires_at,
                    used_at=record.redeemed_at,
                )
            )

    def claim(self, key: str, now: float) -> Claim | None:
        with self.engine.begin() as db:
            first = bool(
                db.execute(
                    sa.update(tickets)
                    .where(tickets.c.digest == key, tickets.c.used_at.is_(None))
                    .values(used_at=now)
                ).rowcount
            )
            row = db.execute(sa.select(tickets).where(tickets.c.digest == key)).first()
        if row is None:
            return None
        record = TicketRecord(
            user_id=row.user_id,
            vm_id=row.vm_id,
            issued_at=float(row.issued_at),
            expires_at=float(row.expires_at),
            redeemed_at=None if first else float(row.used_at),
        )
        return Claim(record, first=first)

    def purge(self, before: float) -> int:
        with self.engine.begin() as db:
            return int(db.execute(sa.delete(tickets).where(tickets.c.expires_at < before)).rowcount)
