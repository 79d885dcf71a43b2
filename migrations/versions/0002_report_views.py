"""report views

Creates one view per admin report (``report_usage``, ``report_device_hours``, ...) so admins can query
them with psql or a BI tool. Created on PostgreSQL and on SQLite (same columns on both).

The view bodies come from :mod:`queueing.ledger.reports`; a later change to a report's SQL ships with a
new migration that drops and recreates the views (see docs/ledger.md).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from queueing.ledger.reports import all_reports, view_sql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for report in all_reports():
        op.execute(f"CREATE VIEW {report.view} AS\n{view_sql(report, dialect)}")


def downgrade() -> None:
    for report in reversed(list(all_reports())):
        op.execute(f"DROP VIEW IF EXISTS {report.view}")
