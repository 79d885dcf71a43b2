"""cohort quotas: a Cohort's own quota per flavor and resource (hierarchical cohorts in the ledger's
quota check)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 20:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from queueing.ledger.types import ExactAmount

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cohort_quotas",
        sa.Column("cohort", sa.String(length=253), nullable=False),
        sa.Column("flavor", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("nominal", ExactAmount(), nullable=False),
        sa.Column("borrowing_limit", ExactAmount(), nullable=True),
        sa.Column("lending_limit", ExactAmount(), nullable=True),
        sa.ForeignKeyConstraint(["cohort"], ["cohorts.name"], name=op.f("fk_cohort_quotas_cohort_cohorts")),
        sa.PrimaryKeyConstraint("cohort", "flavor", "resource", name=op.f("pk_cohort_quotas")),
    )


def downgrade() -> None:
    op.drop_table("cohort_quotas")
