"""A revision keeps the run's inputs: args and envelope by digest, their bytes (and the
payloads that reached the broker) in a content-addressed ``blobs`` table per run.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], ondelete="CASCADE",
                                name="fk_blobs_run_id_runs"),
        sa.PrimaryKeyConstraint("run_id", "digest", name="pk_blobs"),
    )
    with op.batch_alter_table("revisions") as batch:
        batch.add_column(sa.Column("args_digest", sa.String(64), nullable=True))
        batch.add_column(sa.Column("envelope_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("revisions") as batch:
        batch.drop_column("envelope_digest")
        batch.drop_column("args_digest")
    op.drop_table("blobs")
