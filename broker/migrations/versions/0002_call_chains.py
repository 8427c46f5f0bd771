"""Sites are call chains; slots keep the chain fingerprint and the committed line;
an index serves the run-wide paid-payload ledger.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WIDER = (("slots", "site", 500, 2000), ("attempts", "site", 500, 2000),
          ("orphans", "identity", 800, 2400), ("events", "identity", 800, 2400))


def upgrade() -> None:
    with op.batch_alter_table("slots") as batch:
        batch.add_column(sa.Column("chain_fingerprint", sa.String(128), nullable=True))
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))
    op.create_index("ix_slots_run_id_capability_digest", "slots",
                    ["run_id", "capability", "digest"])
    for table, column, old, new in _WIDER:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(column, type_=sa.String(new), existing_type=sa.String(old),
                               existing_nullable=table in ("events",))


def downgrade() -> None:
    for table, column, old, new in _WIDER:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(column, type_=sa.String(old), existing_type=sa.String(new),
                               existing_nullable=table in ("events",))
    op.drop_index("ix_slots_run_id_capability_digest", table_name="slots")
    with op.batch_alter_table("slots") as batch:
        batch.drop_column("line")
        batch.drop_column("chain_fingerprint")
