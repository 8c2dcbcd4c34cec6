"""Alembic migrations of the inbox database (applied by ``clawlet.inbox.db.migrate``)."""
