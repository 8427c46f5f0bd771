"""Claimed calls carry what their execution needs: the side that asks decides and claims
a call in one transaction, and a broker worker executes it from the store alone (never
from a queue message), so the attempt row holds the call's take (to read its payload
blob back) and the slot's call-expression facts (fingerprint, chain, line).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("take", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("fingerprint", sa.String(128), nullable=True))
        batch.add_column(sa.Column("chain_fingerprint", sa.String(128), nullable=True))
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("line")
        batch.drop_column("chain_fingerprint")
        batch.drop_column("fingerprint")
        batch.drop_column("take")
