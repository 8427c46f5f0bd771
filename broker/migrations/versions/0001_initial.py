"""Initial run store schema (mirrors broker/models.py).

Revision ID: 0001
Revises:
Create Date: 2024-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _identity_columns() -> list[sa.Column]:
    return [
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("site", sa.String(500), nullable=False),
        sa.Column("path", sa.String(200), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("revisions", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_table(
        "revisions",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("source_text", sa.Text(), nullable=False),
        sa.Column("source_digest", sa.String(128), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=True),
        _ts("created_at"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], ondelete="CASCADE",
                                name="fk_revisions_run_id_runs"),
        sa.PrimaryKeyConstraint("run_id", "revision", name="pk_revisions"),
    )
    op.create_table(
        "slots",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_identity_columns(),
        sa.Column("capability", sa.String(200), nullable=False),
        sa.Column("digest", sa.String(128), nullable=False),
        sa.Column("fingerprint", sa.String(128), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        _ts("committed_at"),
        sa.PrimaryKeyConstraint("id", name="pk_slots"),
        sa.UniqueConstraint("run_id", "site", "path", "occurrence",
                            name="uq_slots_run_id_site_path_occurrence"),
    )
    op.create_index("ix_slots_run_id_site_path", "slots", ["run_id", "site", "path"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_identity_columns(),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("capability", sa.String(200), nullable=False),
        sa.Column("digest", sa.String(128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        _ts("created_at"),
        _ts("heartbeat_at"),
        sa.Column("resolved_by", sa.String(200), nullable=True),
        sa.Column("resolved_reason", sa.Text(), nullable=True),
        _ts("resolved_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.UniqueConstraint("run_id", "site", "path", "occurrence", "number",
                            name="uq_attempts_run_id_site_path_occurrence_number"),
    )
    op.create_index("ix_attempts_status", "attempts", ["status"])
    op.create_table(
        "certificates",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("digest", sa.String(128), nullable=False),
        sa.Column("entries", sa.JSON(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("run_id", "revision", name="pk_certificates"),
    )
    op.create_table(
        "orphans",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("identity", sa.String(800), nullable=False),
        sa.Column("policy", sa.String(20), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_orphans"),
        sa.UniqueConstraint("run_id", "revision", "identity",
                            name="uq_orphans_run_id_revision_identity"),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("identity", sa.String(800), nullable=True),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_events_run_id", table_name="events")
    op.drop_table("events")
    op.drop_table("orphans")
    op.drop_table("certificates")
    op.drop_index("ix_attempts_status", table_name="attempts")
    op.drop_table("attempts")
    op.drop_index("ix_slots_run_id_site_path", table_name="slots")
    op.drop_table("slots")
    op.drop_table("revisions")
    op.drop_table("runs")
