"""Alembic: empty database -> head, schema equals the models (autogenerate finds no diff), -> base.
On both databases; plus ``queueing migrate`` from another directory. The ``alembic`` command on the
checkout's ``alembic.ini``: test_alembic.py; ``queueing migrate`` from the installed wheel: test_wheel.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from queueing.cli import main
from queueing.ledger.engine import LedgerConfigError, create_engine, database_url, normalize_url
from queueing.ledger.migrate import (
    current_async,
    downgrade_async,
    head_revision,
    upgrade_async,
)
from queueing.ledger.models import Base
from queueing.ledger.reports import REPORTS

from .conftest import BACKENDS, PgServer


def _diff(conn: Connection) -> list[Any]:
    ctx = MigrationContext.configure(conn, opts={"compare_type": True, "target_metadata": Base.metadata})
    return list(compare_metadata(ctx, Base.metadata))


def _tables_and_views(conn: Connection) -> tuple[set[str], set[str]]:
    insp = inspect(conn)
    return set(insp.get_table_names()), set(insp.get_view_names())


@pytest.mark.parametrize("backend", BACKENDS)
async def test_upgrade_compare_downgrade(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        url = server.create("migrations")
    engine = create_engine(url)
    try:
        assert await current_async(engine) is None
        await upgrade_async(engine)
        assert await current_async(engine) == head_revision()
        async with engine.connect() as c:
            assert await c.run_sync(_diff) == []
            tables, views = await c.run_sync(_tables_and_views)
        assert tables == set(Base.metadata.tables) | {"alembic_version"}
        assert views == {r.view for r in REPORTS.values()}
        await downgrade_async(engine, "base")
        assert await current_async(engine) is None
        async with engine.connect() as c:
            tables, views = await c.run_sync(_tables_and_views)
        assert tables <= {"alembic_version"} and views == set()
    finally:
        await engine.dispose()


def test_migrate_command_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["migrate", "current", "--url", url]) == 0
    assert capsys.readouterr().out.strip() == "none (empty database)"
    assert main(["migrate", "upgrade", "--url", url]) == 0
    assert main(["migrate", "current", "--url", url]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{head_revision()} (head)")
    assert main(["migrate", "downgrade", "0001", "--url", url]) == 0
    assert main(["migrate", "current", "--url", url]) == 0
    assert capsys.readouterr().out.strip().endswith("0001")
    # URL from the environment
    monkeypatch.setenv("QUEUEING_DATABASE_URL", url)
    assert main(["migrate", "upgrade"]) == 0
    assert main(["migrate", "current"]) == 0
    assert capsys.readouterr().out.strip().endswith("(head)")
    assert main(["migrate", "downgrade", "base"]) == 0
    assert os.listdir(elsewhere) == []  # nothing written to the working directory


def test_migrate_command_errors(capsys) -> None:
    assert main(["migrate", "upgrade", "--url", "mysql://u@h/db"]) == 2
    assert "unsupported backend 'mysql'" in capsys.readouterr().err
    assert main(["migrate", "upgrade", "nosuchrev", "--url", "sqlite://"]) == 2
    assert "nosuchrev" in capsys.readouterr().err
    assert main(["migrate", "check", "head", "--url", "sqlite://"]) == 2
    assert "check takes no revision" in capsys.readouterr().err


def test_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    assert normalize_url("postgresql://u@h:5432/db") == "postgresql+asyncpg://u@h:5432/db"
    assert normalize_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    monkeypatch.delenv("QUEUEING_DATABASE_URL", raising=False)
    assert database_url(None) == "sqlite+aiosqlite:///queueing.db"
    monkeypatch.setenv("QUEUEING_DATABASE_URL", "postgresql+asyncpg://a@b/c")
    assert database_url(None) == "postgresql+asyncpg://a@b/c"
    assert database_url("sqlite:///y.db") == "sqlite+aiosqlite:///y.db"
    with pytest.raises(LedgerConfigError, match="not valid"):
        normalize_url("::not a url::")


def test_url_from_the_configuration_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("queueing.config")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("databaseURL: postgresql://ledger@db:5432/queueing\n")
    monkeypatch.delenv("QUEUEING_DATABASE_URL", raising=False)
    monkeypatch.setenv("QUEUEING_CONFIG", str(cfg))
    assert database_url(None) == "postgresql+asyncpg://ledger@db:5432/queueing"
    assert database_url("sqlite:///explicit.db") == "sqlite+aiosqlite:///explicit.db"  # --url wins
