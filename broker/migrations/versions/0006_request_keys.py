"""Request keys: a random token per run (idempotency keys name the request, never only
the user-chosen run id), the attempts' paid-payload index (an uncertain or in-flight
attempt counts as paid for the ledger), each attempt's dispatch record (when the
request was sent, when its answer was recorded), and how often a parked job resumed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("token", sa.String(64), nullable=True))
    conn = op.get_bind()
    runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("token", sa.String))
    for (run_id,) in conn.execute(sa.select(runs.c.run_id)).all():
        conn.execute(sa.update(runs).where(runs.c.run_id == run_id)
                     .values(token=secrets.token_hex(16)))
    op.create_index("ix_attempts_run_id_capability_digest", "attempts",
                    ["run_id", "capability", "digest"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("resumes", sa.Integer(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resumes")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("answered_at")
        batch.drop_column("sent_at")
    op.drop_index("ix_attempts_run_id_capability_digest", table_name="attempts")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("token")
