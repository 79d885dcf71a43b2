"""The ledger schema as the database reports it (SQLAlchemy's inspector), in a comparable form; and the
ways to migrate a database from tests: the ``alembic`` command on the checkout's ``alembic.ini``, and
``queueing migrate`` (in this interpreter or an installed copy)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from queueing.ledger.engine import create_engine

REPO = Path(__file__).resolve().parents[2]
ALEMBIC_INI = REPO / "alembic.ini"


def _sorted(items: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(d.items(), key=lambda kv: kv[0])) for d in items)


def _reflect(conn: Connection) -> dict[str, Any]:
    insp = inspect(conn)
    schema: dict[str, Any] = {}
    for table in sorted(insp.get_table_names()):
        columns = [
            {
                "name": c["name"],
                "type": str(c["type"]),
                "nullable": c["nullable"],
                "default": c.get("default"),
            }
            for c in insp.get_columns(table)
        ]
        schema[f"table {table}"] = {
            "columns": columns,  # in table order
            "primary key": insp.get_pk_constraint(table)["constrained_columns"],
            "foreign keys": _sorted(
                [
                    {k: fk.get(k) for k in ("constrained_columns", "referred_table", "referred_columns")}
                    for fk in insp.get_foreign_keys(table)
                ]
            ),
            "indexes": _sorted(
                [
                    {
                        "name": ix["name"],
                        "columns": ix["column_names"],
                        "unique": bool(ix["unique"]),
                        "where": {k: str(v) for k, v in (ix.get("dialect_options") or {}).items()},
                    }
                    for ix in insp.get_indexes(table)
                ]
            ),
            "unique": _sorted(
                [
                    {"name": u["name"], "columns": u["column_names"]}
                    for u in insp.get_unique_constraints(table)
                ]
            ),
            "checks": _sorted([{"sqltext": str(c["sqltext"])} for c in insp.get_check_constraints(table)]),
        }
    for view in sorted(insp.get_view_names()):
        schema[f"view {view}"] = " ".join(str(insp.get_view_definition(view)).split())
    return schema


def reflected_schema(url: str) -> dict[str, Any]:
    """Every table (columns, keys, indexes, constraints) and view (its SQL) of the database at ``url``."""

    async def go() -> dict[str, Any]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(_reflect)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def clean_env(url: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without the ledger settings and ``PYTHONPATH`` (and no ``.pyc``
    written to the checkout), plus ``QUEUEING_DATABASE_URL=url`` if given."""
    dropped = ("QUEUEING_DATABASE_URL", "QUEUEING_CONFIG", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if url is not None:
        env["QUEUEING_DATABASE_URL"] = url
    env.update(extra)
    return env


def alembic_command() -> list[str]:
    """The ``alembic`` console script of this interpreter's environment (``python -m alembic`` if absent)."""
    script = Path(sys.executable).with_name("alembic")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "alembic"]


def alembic(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``alembic -c <checkout>/alembic.ini ARGS`` as an admin runs it (a separate process)."""
    return subprocess.run(
        [*alembic_command(), "-c", str(ALEMBIC_INI), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
