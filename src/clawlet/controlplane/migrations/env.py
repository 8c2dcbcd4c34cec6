"""Alembic environment: runs the migrations on the connection ``clawlet.sql.migrate`` passes in."""

from clawlet.sql import run_alembic_env

run_alembic_env()
