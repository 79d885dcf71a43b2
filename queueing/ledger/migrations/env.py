"""Alembic environment of the ledger (async engines; batch mode on SQLite).

Driven by :mod:`queueing.ledger.migrate`, which builds the Alembic ``Config`` from the package (so
``queueing migrate`` works from any directory) and, when called from async code, hands a live
connection in ``config.attributes["connection"]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from queueing.ledger.engine import create_engine
from queueing.ledger.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=False,
        user_module_prefix="queueing.ledger.types.",
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run_sync)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection: Any = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
        return
    asyncio.run(_run_async(config.attributes.get("url") or config.get_main_option("sqlalchemy.url") or ""))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
