"""The inbox database: SQLAlchemy 2 Core tables, the engine, and Alembic migrations.

SQLite (WAL, foreign keys on, a busy timeout) is the default, in ``<home>/data/agent_channel_v2.db``;
the same code runs on PostgreSQL when ``CLAWLET_DATABASE_URL`` names one (``postgresql://`` or
``postgresql+psycopg://``, ``postgres://`` accepted too; the ``psycopg`` driver is then the
deployer's to install). Schema changes are numbered Alembic revisions in
``migrations/versions/`` and are applied on start; an applied revision is never edited.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url

SQLITE_BUSY_TIMEOUT_MS = 5_000
VERSION_TABLE = "inbox_schema_version"

metadata = sa.MetaData()

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("agent_id", sa.Text, nullable=False, server_default="main"),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("title_locked", sa.Integer, nullable=False, server_default="0"),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("completed_at", sa.BigInteger, nullable=True),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    sa.Column("sender_type", sa.Text, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("timestamp", sa.BigInteger, nullable=False),
)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get their directory, WAL, foreign keys and a busy timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    backend, plus, driver = parsed.drivername.partition("+")
    if backend == "postgres":  # the ``postgres://`` of hosted DATABASE_URLs; SQLAlchemy wants postgresql
        parsed = parsed.set(drivername=f"postgresql{plus}{driver}")
    return sa.create_engine(parsed, pool_pre_ping=True)


def _alembic_config() -> Config:
    config = Config()
    location = resources.files("clawlet.inbox") / "migrations"
    config.set_main_option("script_location", str(location))
    config.set_main_option("version_table", VERSION_TABLE)
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (every numbered migration not yet applied)."""
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()
