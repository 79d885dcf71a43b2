"""A private, throwaway PostgreSQL server for tests that stop and start the server itself.

``initdb`` into a temporary directory and ``pg_ctl`` on a free port of 127.0.0.1, so that stopping it
never touches the shared server on 127.0.0.1:5432 that the other tests use. PostgreSQL refuses to run
as root: as root, the cluster belongs to the ``postgres`` user and the commands run through
``runuser -u postgres --``. Durability is switched off (``fsync=off``): the tests stop the server
with ``pg_ctl stop -m fast`` (a clean shutdown), not a power cut.

    with PrivatePostgres.create() as pg:      # pytest.skip() when initdb is not installed
        url = pg.create_database("queueing")  # postgresql+asyncpg://postgres@127.0.0.1:PORT/queueing
        pg.stop()
        pg.start()
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import pytest

from tests.controller.test_process import free_port


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` with ``initdb`` (Debian's layout), else ``initdb`` on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3].split(".")[0])
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


class PrivatePostgres:
    def __init__(self, bindir: Path, root: Path, run_as: list[str]) -> None:
        self.bindir, self.root, self.run_as = bindir, root, run_as
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self.running = False

    @classmethod
    def create(cls) -> PrivatePostgres:
        bindir = find_bindir()
        if bindir is None:
            pytest.skip(
                "initdb not found (/usr/lib/postgresql/*/bin/initdb or on PATH): PostgreSQL not installed"
            )
        run_as: list[str] = []
        root = Path(tempfile.mkdtemp(prefix="queueing-pg-"))
        if os.geteuid() == 0:  # initdb and postgres refuse root
            runuser = shutil.which("runuser")
            if runuser is None:
                shutil.rmtree(root)
                pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
            run_as = [runuser, "-u", "postgres", "--"]
            shutil.chown(root, "postgres", "postgres")
        pg = cls(bindir, root, run_as)
        try:
            pg._run("initdb", "-D", str(pg.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            pg.start()
        except BaseException:
            pg.close()
            raise
        return pg

    def _run(self, tool: str, *args: str) -> str:
        done = subprocess.run(
            [*self.run_as, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}\n{log}")
        return done.stdout

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server (the same port and data each time) and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "30", "start"
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``fast``: every session is disconnected, open transactions roll back, then the server exits."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")
        self.running = False

    def create_database(self, name: str) -> str:
        sql = f'CREATE DATABASE "{name}"'
        self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-c", sql)
        return self.url(name)

    def close(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
