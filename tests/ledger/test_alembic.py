"""The checkout's ``alembic.ini`` + ``migrations/``, driven by the ``alembic`` command as an admin runs it:
the same scripts as ``queueing migrate``, the URL from the same setting, upgrade/downgrade/upgrade
round trip to the same schema, and ``alembic check`` / ``queueing migrate check`` (models vs
migrations) on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text

from queueing.cli import main
from queueing.ledger.engine import create_engine
from queueing.ledger.migrate import MIGRATIONS_DIR, alembic_config, head_revision
from queueing.ledger.models import Base
from queueing.ledger.reports import REPORTS

from .conftest import BACKENDS, PgServer, run_async
from .schema import ALEMBIC_INI, REPO, alembic, clean_env, reflected_schema


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest, name: str) -> str:
    """A fresh, empty database; the plain ``postgresql://`` / ``sqlite:///`` spelling an admin writes
    (the ledger runs it with asyncpg / aiosqlite)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / f'{name}.db'}"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.create(name).replace("postgresql+asyncpg://", "postgresql://")


def _ok(result: object) -> str:
    rc, out, err = (getattr(result, k) for k in ("returncode", "stdout", "stderr"))
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return f"{out}{err}"


def test_one_set_of_scripts_for_alembic_ini_and_queueing_migrate() -> None:
    from_ini = ScriptDirectory.from_config(Config(str(ALEMBIC_INI)))
    from_package = ScriptDirectory.from_config(alembic_config())
    assert Path(from_ini.dir) == Path(from_package.dir) == MIGRATIONS_DIR == REPO / "migrations"
    assert [r.revision for r in from_ini.walk_revisions()] == [
        r.revision for r in from_package.walk_revisions()
    ]
    assert from_ini.get_current_head() == head_revision()
    # the single source: no Alembic environment or revision inside the package's source folder
    assert not list((REPO / "queueing").rglob("env.py"))
    assert not list((REPO / "queueing").rglob("*.mako"))
    old = REPO / "queueing" / "ledger" / "migrations"
    stray = sorted(p.name for p in old.rglob("*.py")) if old.exists() else []
    assert not stray, f"revisions in the old place {old}: move them to migrations/versions/: {stray}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_alembic_upgrade_downgrade_upgrade_gives_the_same_schema(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _url(backend, tmp_path, request, "alembic_cli")
    env = clean_env(url)
    head = head_revision()

    out = _ok(alembic("upgrade", "head", env=env, cwd=tmp_path))
    assert f"-> {head}" in out  # Alembic's log: "Running upgrade 0002 -> 0003, ..."
    first = reflected_schema(url)
    assert {k for k in first if k.startswith("table ")} == {
        f"table {t}" for t in [*Base.metadata.tables, "alembic_version"]
    }
    assert {k for k in first if k.startswith("view ")} == {f"view {r.view}" for r in REPORTS.values()}
    assert f"{head} (head)" in _ok(alembic("current", env=env, cwd=tmp_path))

    _ok(alembic("downgrade", "base", env=env, cwd=tmp_path))
    assert set(reflected_schema(url)) <= {"table alembic_version"}
    assert "(head)" not in _ok(alembic("current", env=env, cwd=tmp_path))

    _ok(alembic("upgrade", "head", env=env, cwd=tmp_path))
    assert reflected_schema(url) == first

    # `queueing migrate` on another empty database builds exactly the same schema
    other = _url(backend, tmp_path, request, "queueing_migrate")
    assert main(["migrate", "upgrade", "head", "--url", other]) == 0
    assert reflected_schema(other) == first


@pytest.mark.parametrize("backend", BACKENDS)
def test_alembic_check_reports_no_drift_and_catches_one(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(backend, tmp_path, request, "alembic_check")
    env = clean_env(url)
    _ok(alembic("upgrade", "head", env=env, cwd=tmp_path))
    assert "No new upgrade operations detected" in _ok(alembic("check", env=env, cwd=tmp_path))
    assert main(["migrate", "check", "--url", url]) == 0  # the same check, from the package
    assert capsys.readouterr().out.strip() == f"no drift: the schema at {head_revision()} matches the models"

    # a table no model knows: the check must see it (it compares the database with the models)
    async def add_table() -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("CREATE TABLE drift_probe (id INTEGER PRIMARY KEY)"))
        finally:
            await engine.dispose()

    run_async(add_table())
    drift = alembic("check", env=env, cwd=tmp_path)
    assert drift.returncode != 0
    assert "New upgrade operations detected" in drift.stderr and "drift_probe" in drift.stderr, drift.stderr
    assert main(["migrate", "check", "--url", url]) == 1
    err = capsys.readouterr().err
    assert "New upgrade operations detected" in err and "drift_probe" in err, err

    # a database behind head is not checked: upgrade it first
    _ok(alembic("downgrade", "-1", env=env, cwd=tmp_path))
    assert main(["migrate", "check", "--url", url]) == 2
    assert "not up to date" in capsys.readouterr().err


def test_alembic_takes_the_url_from_the_same_settings_as_queueing_migrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the configuration file ($QUEUEING_CONFIG, databaseURL), as the controller and `queueing migrate`
    db = tmp_path / "from-config.db"
    config = tmp_path / "config.yaml"
    config.write_text(f"databaseURL: sqlite:///{db}\n")
    env = clean_env(QUEUEING_CONFIG=str(config))
    _ok(alembic("upgrade", "head", env=env, cwd=tmp_path))
    assert main(["migrate", "current", "--url", f"sqlite:///{db}"]) == 0
    assert capsys.readouterr().out.strip() == f"{head_revision()} (head)"

    # nothing set: the embedded default, sqlite+aiosqlite:///queueing.db in the working directory
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    _ok(alembic("upgrade", "0001", env=clean_env(), cwd=workdir))
    assert main(["migrate", "current", "--url", f"sqlite:///{workdir / 'queueing.db'}"]) == 0
    assert capsys.readouterr().out.strip() == "0001"

    # a URL the ledger does not support: the same clear error
    bad = alembic("upgrade", "head", env=clean_env("mysql://u@h/db"), cwd=tmp_path)
    assert bad.returncode != 0 and "unsupported backend 'mysql'" in bad.stderr, bad.stderr
