"""admission status and workload owner: the Workload's ``status.admission`` as written with each
admission (recovery rewrites a diverged status from it), and the UID of the object that owns a
workload (its Job: a Workload deleted and recreated for the same Job keeps the admission)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 04:10:00.000000
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
    # plain ADD/DROP COLUMN (no batch copy: SQLite keeps the report views on these tables)
    op.add_column("admissions", sa.Column("status_json", sa.Text(), nullable=True))
    op.add_column("workloads", sa.Column("owner_uid", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("workloads", "owner_uid")
    op.drop_column("admissions", "status_json")
