"""Async engines from a database URL, and where the URL comes from.

* ``postgresql+asyncpg://user@host:5432/db`` (production); ``postgresql://`` is accepted and upgraded.
* ``sqlite+aiosqlite:///path/ledger.db`` (embedded default); ``sqlite:///`` is accepted and upgraded.

SQLite connections start every transaction with ``BEGIN IMMEDIATE`` (writers serialise; no lost update
between the quota check and the write), enforce foreign keys and wait up to 30 s for a busy database.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

ENV_URL = "QUEUEING_DATABASE_URL"
DEFAULT_URL = "sqlite+aiosqlite:///queueing.db"  # the same default as queueing.config


class LedgerConfigError(ValueError):
    """The database URL is missing or not one the ledger supports."""


def database_url(explicit: str | None = None) -> str:
    """``--url`` if given, else the configuration (``$QUEUEING_DATABASE_URL``, ``databaseURL`` /
    ``databaseURLFile`` in the file named by ``$QUEUEING_CONFIG``), else the embedded SQLite default."""
    if explicit:
        return normalize_url(explicit)
    if os.environ.get(ENV_URL):
        return normalize_url(os.environ[ENV_URL])
    try:
        from queueing.config import ConfigError, load_config
    except ImportError:  # pragma: no cover - the configuration module is optional for the ledger
        return normalize_url(DEFAULT_URL)
    try:
        return normalize_url(load_config(None, dict(os.environ)).resolved_database_url())
    except ConfigError as e:
        raise LedgerConfigError(f"configuration: {e}") from None


def normalize_url(url: str) -> str:
    try:
        u = make_url(url)
    except Exception as e:  # sqlalchemy raises ArgumentError with a terse message
        raise LedgerConfigError(f"database URL {url!r} is not valid: {e}") from None
    backend = u.get_backend_name()
    if backend == "postgresql":
        if u.drivername != "postgresql+asyncpg":
            u = u.set(drivername="postgresql+asyncpg")
    elif backend == "sqlite":
        if u.drivername != "sqlite+aiosqlite":
            u = u.set(drivername="sqlite+aiosqlite")
    else:
        raise LedgerConfigError(
            f"database URL {url!r}: unsupported backend {backend!r} "
            "(use postgresql+asyncpg://... or sqlite+aiosqlite:///file.db)"
        )
    return u.render_as_string(hide_password=False)


def create_engine(url: str | None = None, **kwargs: Any) -> AsyncEngine:
    """An async engine for the ledger, configured for the backend."""
    url = database_url(url)
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        kwargs.setdefault("connect_args", {"timeout": 30})
        engine = create_async_engine(url, **kwargs)
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(url, **kwargs)


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        if engine.url.database not in (None, "", ":memory:"):
            cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def is_postgres(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "postgresql"
