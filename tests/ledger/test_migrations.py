"""Alembic: empty database -> head, schema equals the models (autogenerate finds no diff), -> base.
On both databases; plus ``queueing migrate`` from another directory, and from the installed wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
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
    MIGRATIONS_DIR,
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


REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def test_the_wheel_carries_the_migrations_and_migrate_finds_them_installed(tmp_path: Path) -> None:
    """Build the wheel (from a copy of the sources, so nothing is written to the checkout), check every
    migration script is inside it, install it into a bare directory and run ``queueing migrate`` from
    there, in another working directory: upgrade to head, current, downgrade to base."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "queueing", src / "queueing", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    # build isolation fetches the build backend named in pyproject.toml (setuptools>=68) from the index
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(src)])
    if built.returncode != 0:
        offline = ("No matching distribution", "Could not find a version", "NewConnectionError", "Network")
        if any(w in built.stdout + built.stderr for w in offline):
            pytest.skip(f"cannot fetch the build backend (no package index?): {built.stderr[-300:]}")
        raise AssertionError(f"pip wheel failed:\n{built.stdout}\n{built.stderr}")
    (wheel,) = dist.glob("queueing-*.whl")

    expected = {
        "queueing/ledger/migrations/" + p.relative_to(MIGRATIONS_DIR).as_posix()
        for p in MIGRATIONS_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert "queueing/ledger/migrations/env.py" in expected
    assert any(n.startswith(f"queueing/ledger/migrations/versions/{head_revision()}_") for n in expected)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert expected <= names, f"missing from {wheel.name}: {sorted(expected - names)}"
    assert "queueing/py.typed" in names

    site = tmp_path / "site"
    installed = _run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)]
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    url = f"sqlite:///{tmp_path / 'installed.db'}"
    script = (
        "import sys, queueing.ledger.migrate as m; from queueing.cli import main\n"
        "print(m.MIGRATIONS_DIR)\n"
        "for args in (['upgrade'], ['current'], ['downgrade', 'base'], ['current']):\n"
        "    rc = main(['migrate', *args, '--url', sys.argv[1]])\n"
        "    assert rc == 0, (args, rc)\n"
    )
    # the installed copy first on the path (the dependencies come from this interpreter's site-packages)
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = _run([sys.executable, "-c", script, url], cwd=elsewhere, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert Path(lines[0]) == site / "queueing" / "ledger" / "migrations", lines[0]
    head = head_revision()
    assert lines[1:] == [
        f"upgraded to {head}",
        f"{head} (head)",
        "downgraded to base",
        "none (empty database)",
    ]
    assert os.listdir(elsewhere) == []
