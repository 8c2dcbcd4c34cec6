"""The one way clawlet opens SQL databases and migrates them (the inbox, the control plane).

SQLite (WAL, foreign keys on, a busy timeout, its directory created) is the default; the same code
runs on PostgreSQL (``postgresql://`` or ``postgresql+psycopg://``; the ``postgres://`` of hosted
``DATABASE_URL``s is accepted too; the ``psycopg`` driver is the deployer's to install). Each
schema is a package of numbered Alembic revisions with a version table of its own, so several
schemas can share one database; revisions are applied on start and never edited once applied.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url

SQLITE_BUSY_TIMEOUT_MS = 5_000


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


_WRITER_LOCKS: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()
_WRITER_LOCKS_GUARD = threading.Lock()


def writer_lock(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    """What a busy writer of ``engine`` holds around its transaction. SQLite: one lock per engine,
    so this process's writers take turns here rather than in SQLite's busy handler (which lets one
    of many concurrent writers starve past its timeout on a loaded machine, and sleeps between
    tries); other databases lock rows, not the database: no lock."""
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    with _WRITER_LOCKS_GUARD:
        return _WRITER_LOCKS.setdefault(engine, threading.Lock())


def migrate(engine: Engine, package: str, folder: str, version_table: str, revision: str = "head") -> None:
    """Apply the revisions in ``<package>/<folder>`` not yet recorded in ``version_table``."""
    config = Config()
    config.set_main_option("script_location", str(resources.files(package) / folder))
    config.set_main_option("version_table", version_table)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine, version_table: str) -> str | None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": version_table})
        return context.get_current_revision()


def run_alembic_env() -> None:
    """The body of every migrations package's ``env.py``: run the revisions on the connection
    :func:`migrate` passed in, in its version table (SQLite alters tables by copying them)."""
    from alembic import context

    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        version_table=context.config.get_main_option("version_table") or "alembic_version",
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()
