"""The inbox database: SQLAlchemy 2 Core tables and their Alembic migrations.

SQLite by default, in ``<home>/data/agent_channel_v2.db``, or PostgreSQL when
``CLAWLET_DATABASE_URL`` names one (see :mod:`clawlet.sql`, which opens and migrates every
database). Schema changes are numbered Alembic revisions in ``migrations/versions/``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from clawlet import sql
from clawlet.sql import create_db_engine

__all__ = [
    "VERSION_TABLE",
    "create_db_engine",
    "current_revision",
    "messages",
    "metadata",
    "migrate",
    "tasks",
]

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


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the inbox schema up to ``revision`` (every numbered migration not yet applied)."""
    sql.migrate(engine, "clawlet.inbox", "migrations", VERSION_TABLE, revision)


def current_revision(engine: Engine) -> str | None:
    return sql.current_revision(engine, VERSION_TABLE)
