"""User API tokens (the HTTP API of cluster mode) and the runtime-type defaults of users and
organisations (seed 001: session > agent > user > organisation > ``semigraph``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_tokens",
        sa.Column("digest", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_user_tokens_user", "user_tokens", ["user_id"])
    op.create_table(
        "orgs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("runtime_type", sa.Text, nullable=True),
    )
    op.add_column("users", sa.Column("runtime_type", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("runtime_type")
    op.drop_table("orgs")
    op.drop_table("user_tokens")
