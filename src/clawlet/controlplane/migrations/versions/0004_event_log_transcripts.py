"""The durable event log of sessions (``session_events``, numbered per session by
``session_event_counters``) and the latest transcript of each session (``session_transcripts``),
kept for the control plane to replay events from and to answer from while an execution plane is
offline (:mod:`clawlet.controlplane.event_log`).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_event_counters",
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("last_n", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )
    op.create_index("idx_session_event_counters_updated", "session_event_counters", ["updated_at"])
    op.create_table(
        "session_events",
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("n", sa.BigInteger, primary_key=True),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False, server_default=""),
        sa.Column("seq", sa.BigInteger, nullable=True),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("session_id", "stream", "seq", name="uq_session_events_stream_seq"),
    )
    op.create_table(
        "session_transcripts",
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("workspace", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("record_id", sa.Text, nullable=False),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("message_count", sa.Integer, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("ts", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_transcripts")
    op.drop_table("session_events")
    op.drop_index("idx_session_event_counters_updated", "session_event_counters")
    op.drop_table("session_event_counters")
