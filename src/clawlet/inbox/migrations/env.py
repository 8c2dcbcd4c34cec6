"""Alembic environment: runs migrations on the connection ``clawlet.inbox.db.migrate`` passes in."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table=context.config.get_main_option("version_table") or "alembic_version",
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
