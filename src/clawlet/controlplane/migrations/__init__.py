"""Alembic migrations of the control plane database (applied by ``clawlet.controlplane.db.migrate``)."""
