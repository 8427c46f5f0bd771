"""Artifacts in the run store's database: one row per content id, the bytes in chunks.

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(71), nullable=False),
        sa.Column("media_type", sa.String(200), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_artifacts"),
    )
    op.create_table(
        "artifact_chunks",
        sa.Column("artifact_id", sa.String(71), nullable=False),
        sa.Column("number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["artifact_id"], ["artifacts.id"], ondelete="CASCADE",
                                name="fk_artifact_chunks_artifact_id_artifacts"),
        sa.PrimaryKeyConstraint("artifact_id", "number", name="pk_artifact_chunks"),
    )


def downgrade() -> None:
    op.drop_table("artifact_chunks")
    op.drop_table("artifacts")
