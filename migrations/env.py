"""Alembic environment of the ledger (async engines: asyncpg, aiosqlite; batch mode on SQLite).

Two ways in, the same scripts:

* ``alembic -c alembic.ini ...`` from a checkout: the ``Config`` comes from ``alembic.ini``, which
  names no database; the URL comes from the ledger's setting, as for ``queueing migrate``.
* ``queueing migrate ...`` (and the controller, the simulator, tests): :mod:`queueing.ledger.migrate`
  builds the ``Config`` in code (no ``alembic.ini``), puts the URL in ``config.attributes["url"]`` or,
  from async code, a live connection in ``config.attributes["connection"]``.

Either way the URL is resolved by :func:`queueing.ledger.engine.database_url`: an explicit URL
(``--url``, or ``sqlalchemy.url`` if someone sets it), else ``$QUEUEING_DATABASE_URL``, else
``databaseURL`` / ``databaseURLFile`` in the file named by ``$QUEUEING_CONFIG``, else the embedded
SQLite default.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from queueing.ledger.engine import create_engine, database_url
from queueing.ledger.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None:  # the alembic command: its logging sections
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    explicit = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return database_url(explicit or None)


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
        url=_url(),
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
    asyncio.run(_run_async(_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
