"""Tasks and messages (the inbox seed's two tables and their indexes).

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
        "tasks",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("agent_id", sa.Text, nullable=False, server_default="main"),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("title_locked", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("completed_at", sa.BigInteger, nullable=True),
    )
    op.create_index("idx_tasks_updated", "tasks", [sa.text("updated_at DESC")])
    op.create_index("idx_tasks_status", "tasks", ["status"])
    op.create_index("idx_tasks_agent", "tasks", ["agent_id", sa.text("updated_at DESC")])
    op.create_table(
        "messages",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("sender_type", sa.Text, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("timestamp", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_messages_task", "messages", ["task_id", "timestamp"])


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("tasks")
