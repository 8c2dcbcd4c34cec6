"""The model settings of users and organisations (``{model, provider, base_url}``), beside their
runtime type: a session's model follows the same precedence (session > agent > user > organisation),
and with none of them the execution plane's own ``CLAWLET_LLM_*`` settings.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("model_settings", sa.JSON, nullable=True))
    op.add_column("orgs", sa.Column("model_settings", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("orgs") as batch:
        batch.drop_column("model_settings")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("model_settings")
