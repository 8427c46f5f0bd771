"""Liveness in the store: a running revision's lease (owner + heartbeat) and the jobs
the dispatcher accepted, so a lost worker or a lost queue message is found and named.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("revisions") as batch:
        batch.add_column(sa.Column("owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("requeues", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], ondelete="CASCADE",
                                name="fk_jobs_run_id_runs"),
        sa.PrimaryKeyConstraint("job_id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_index("ix_jobs_run_id_revision", "jobs", ["run_id", "revision"])


def downgrade() -> None:
    op.drop_index("ix_jobs_run_id_revision", table_name="jobs")
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_table("jobs")
    with op.batch_alter_table("revisions") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("owner")
