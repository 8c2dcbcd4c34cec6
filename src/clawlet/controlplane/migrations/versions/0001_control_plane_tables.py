"""The control plane's tables: users, vms, sessions, usage, audit, evolution submissions, snapshots,
skill packages and connect tickets.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("org_id", sa.Text, nullable=True),
        sa.Column("api_keys", sa.JSON, nullable=False),
        sa.Column("disabled", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "vms",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("connected", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_seen", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_vms_user", "vms", ["user_id"])
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="running"),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_sessions_user", "sessions", ["user_id", "created_at"])
    op.create_table(
        "usage",
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
    op.create_index("idx_usage_user_ts", "usage", ["user_id", "ts"])
    op.create_table(
        "audit",
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("details", sa.JSON, nullable=True),
        sa.Column("ts", sa.BigInteger, nullable=False),
        sa.Column("received_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_audit_user_ts", "audit", ["user_id", "ts"])
    op.create_table(
        "evolution_submissions",
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("ts", sa.BigInteger, nullable=False),
        sa.Column("received_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_evolution_user_ts", "evolution_submissions", ["user_id", "ts"])
    op.create_table(
        "snapshots",
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("ts", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "skill_packages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("skill_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("files", sa.JSON, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    # NULLs are distinct in a plain unique key: one partial unique index per kind of owner
    op.create_index(
        "uq_skill_packages_global",
        "skill_packages",
        ["skill_id", "version"],
        unique=True,
        sqlite_where=sa.text("user_id IS NULL"),
        postgresql_where=sa.text("user_id IS NULL"),
    )
    op.create_index(
        "uq_skill_packages_user",
        "skill_packages",
        ["skill_id", "version", "user_id"],
        unique=True,
        sqlite_where=sa.text("user_id IS NOT NULL"),
        postgresql_where=sa.text("user_id IS NOT NULL"),
    )
    op.create_table(
        "tickets",
        sa.Column("digest", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("vm_id", sa.Text, nullable=True),
        sa.Column("issued_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("used_at", sa.Double, nullable=True),
    )
    op.create_index("idx_tickets_expires", "tickets", ["expires_at"])


def downgrade() -> None:
    for table in (
        "tickets",
        "skill_packages",
        "snapshots",
        "evolution_submissions",
        "audit",
        "usage",
        "sessions",
        "vms",
        "users",
    ):
        op.drop_table(table)
