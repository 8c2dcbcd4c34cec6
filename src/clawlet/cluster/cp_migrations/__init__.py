"""Alembic migrations of the control plane database (applied by ``clawlet.cluster.cp_db.migrate``)."""
