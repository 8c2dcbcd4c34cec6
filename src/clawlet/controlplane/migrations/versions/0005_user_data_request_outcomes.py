"""Per-user long-term memory (``user_memories``) and remote MCP servers (``user_mcp_servers``), and
the outcomes of the execution planes' requests (``request_outcomes``): state every control-plane
instance must see, so it lives in the database rather than in one instance's files or memory.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_memories",
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("digest", sa.Text, primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "user_mcp_servers",
        sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
    )
    op.create_table(
        "request_outcomes",
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("request_id", sa.Text, primary_key=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("instance_id", sa.Text, nullable=False),
        sa.Column("outcome", sa.JSON, nullable=True),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_request_outcomes_expires", "request_outcomes", ["expires_at"])
    op.create_index("idx_request_outcomes_instance", "request_outcomes", ["instance_id"])


def downgrade() -> None:
    op.drop_index("idx_request_outcomes_instance", "request_outcomes")
    op.drop_index("idx_request_outcomes_expires", "request_outcomes")
    op.drop_table("request_outcomes")
    op.drop_table("user_mcp_servers")
    op.drop_table("user_memories")
