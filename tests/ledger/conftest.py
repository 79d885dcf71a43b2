"""Ledger fixtures: every shared test runs on SQLite (a file in tmp_path) and on real PostgreSQL
(a throwaway database ``queueing_test_<random>`` created for the session and dropped at its end)."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from queueing.ledger.engine import create_engine
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger

T = TypeVar("T")
PG_HOST = os.environ.get("QUEUEING_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432")
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion in a fresh loop on another thread (works inside a running loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_HOST.replace("+asyncpg", "") + "/postgres", timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


class PgServer:
    """Creates and drops throwaway databases on the test server."""

    def __init__(self) -> None:
        self.prefix = f"queueing_test_{secrets.token_hex(4)}"
        self.created: list[str] = []
        self.error: str | None = None

    def create(self, suffix: str) -> str:
        if self.error:
            pytest.skip(f"PostgreSQL at {PG_HOST} is not available: {self.error}")
        name = f"{self.prefix}_{suffix}"
        try:
            run_async(_admin(f'CREATE DATABASE "{name}"'))
        except Exception as e:  # server down: the postgres-marked tests are skipped with the reason
            self.error = f"{type(e).__name__}: {e}"
            pytest.skip(f"PostgreSQL at {PG_HOST} is not available: {self.error}")
        self.created.append(name)
        return f"{PG_HOST}/{name}"

    def drop_all(self) -> None:
        for name in self.created:
            run_async(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    yield server
    server.drop_all()


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await upgrade_async(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def pg_url(pg_server: PgServer) -> str:
    """One migrated database for the session; each test empties it first."""
    url = pg_server.create("main")
    run_async(_migrate(url))
    return url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger") / "template.db"
    run_async(_migrate(f"sqlite+aiosqlite:///{path}"))
    return path


def backend_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        db = tmp_path / "ledger.db"
        shutil.copy(template, db)
        return f"sqlite+aiosqlite:///{db}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture(params=BACKENDS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    url = backend_url(request.param, request, tmp_path)
    led = Ledger.from_url(url)
    if request.param == "postgresql":
        await led.delete_everything()
    try:
        yield led
    finally:
        await led.close()
