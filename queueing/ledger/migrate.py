"""Alembic, driven from the package: the ``Config`` is built here, so migrations run from any directory.

The migration scripts have one source, the top-level ``migrations/`` folder of the checkout (``env.py``,
``script.py.mako``, ``versions/``), which admins also use with ``alembic -c alembic.ini``. The build
maps that folder into the wheel as ``queueing/ledger/_migrations/`` (``[tool.setuptools.package-dir]``
in ``pyproject.toml``), so an installed copy finds them next to this module, and a checkout (editable
install) finds the top-level folder.

Sync entry points (``upgrade``, ``downgrade``, ``current``) run their own event loop (the CLI);
async ones (``upgrade_async`` ...) run on a caller's engine inside a running loop (tests, controller).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from queueing.ledger.engine import database_url

INSTALLED_DIR = Path(__file__).resolve().parent / "_migrations"  # in the wheel (mapped from migrations/)
CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "migrations"  # the top-level folder of a checkout
MIGRATIONS_DIR = next((d for d in (INSTALLED_DIR, CHECKOUT_DIR) if (d / "env.py").is_file()), INSTALLED_DIR)


def alembic_config(url: str | None = None, *, stdout: Any = None) -> Config:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise FileNotFoundError(
            f"the Alembic migrations are neither at {INSTALLED_DIR} (installed package) "
            f"nor at {CHECKOUT_DIR} (checkout)"
        )
    cfg = Config(stdout=stdout or io.StringIO())
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        resolved = database_url(url)
        cfg.attributes["url"] = resolved
        cfg.set_main_option("sqlalchemy.url", resolved.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


# ---------------------------------------------------------------- sync (CLI)
def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url or database_url()), revision)


def downgrade(url: str | None = None, revision: str = "-1") -> None:
    command.downgrade(alembic_config(url or database_url()), revision)


def current(url: str | None = None) -> str | None:
    import asyncio

    from queueing.ledger.engine import create_engine

    async def _go() -> str | None:
        engine = create_engine(url)
        try:
            return await current_async(engine)
        finally:
            await engine.dispose()

    return asyncio.run(_go())


# ---------------------------------------------------------------- async (in a running loop)
async def _with_connection(engine: AsyncEngine, fn: Callable[[Config], None]) -> None:
    def _run(conn: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        fn(cfg)

    async with engine.begin() as conn:
        await conn.run_sync(_run)


async def upgrade_async(engine: AsyncEngine, revision: str = "head") -> None:
    await _with_connection(engine, lambda cfg: command.upgrade(cfg, revision))


async def downgrade_async(engine: AsyncEngine, revision: str = "base") -> None:
    await _with_connection(engine, lambda cfg: command.downgrade(cfg, revision))


async def current_async(engine: AsyncEngine) -> str | None:
    def _cur(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(_cur)
