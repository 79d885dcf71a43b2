"""The wheel carries the migrations (mapped from the top-level ``migrations/``), and ``queueing migrate``
works from an installed copy with no checkout: the wheel is built from a copy of the build inputs (the
same files the image's build context holds, see ``.dockerignore``), installed into a fresh virtualenv
outside the checkout (``--no-deps``; the dependencies come from this interpreter's site-packages, so no
package index is needed), and its ``queueing`` command migrates SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from queueing.cli import main
from queueing.ledger.migrate import head_revision

from .conftest import BACKENDS, PgServer
from .schema import REPO, clean_env, reflected_schema

# the files the wheel is built from; the image's build context (.dockerignore) lets in exactly these
BUILD_INPUTS = ("pyproject.toml", "README.md", "queueing", "migrations")


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site_packages: Path

    @property
    def queueing(self) -> Path:
        return self.venv / "bin" / "queueing"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / name, src / name, ignore=ignore)
        else:
            shutil.copy(REPO / name, src / name)
    dist = root / "dist"
    # the build backend (setuptools>=68, wheel) is in the test extra: no build isolation, so no index is
    # needed and no backend is installed anew for each run
    wheel_args = ["--no-deps", "--no-build-isolation", "--quiet", "-w", str(dist), str(src)]
    built = _run([sys.executable, "-m", "pip", "wheel", *wheel_args])
    if built.returncode != 0:
        offline = ("No matching distribution", "Could not find a version", "NewConnectionError", "Network")
        if any(w in built.stdout + built.stderr for w in offline):
            pytest.skip(f"cannot fetch the build backend (no package index?): {built.stderr[-300:]}")
        raise AssertionError(f"pip wheel failed:\n{built.stdout}\n{built.stderr}")
    (wheel,) = dist.glob("queueing-*.whl")

    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    pip_install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index"]
    done = _run([*pip_install, "--quiet", str(wheel)])
    assert done.returncode == 0, done.stdout + done.stderr
    purelib = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # the dependencies: this interpreter's site-packages, after the venv's own (a path in a .pth file is
    # appended to sys.path; the .pth files inside it, e.g. the checkout's editable hook, are not run)
    ours = dict.fromkeys(
        [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    )
    (purelib / "_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    return Installed(wheel=wheel, venv=venv, site_packages=purelib)


def test_pyproject_lists_every_package() -> None:
    """The packages are listed in pyproject.toml (find cannot add the mapped migrations folder): every
    folder of queueing/ with Python modules is there, and the migrations come from migrations/."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "queueing").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    mapped = {"queueing.ledger._migrations", "queueing.ledger._migrations.versions"}
    testing = {f for f in folders if f == "queueing.testing" or f.startswith("queueing.testing.")}
    assert testing  # the testing support stays out of the wheel (the emulator, the crash switch)
    assert set(setuptools["packages"]) == (folders - testing) | mapped, (
        "add the new package to [tool.setuptools] packages"
    )
    assert setuptools["package-dir"] == {"queueing.ledger._migrations": "migrations"}


def test_the_wheel_carries_every_module_and_every_migration(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as z:
        names = set(z.namelist())
    migrations = {
        "queueing/ledger/_migrations/" + p.relative_to(REPO / "migrations").as_posix()
        for p in (REPO / "migrations").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert {"queueing/ledger/_migrations/env.py", "queueing/ledger/_migrations/script.py.mako"} <= migrations
    assert any(n.startswith(f"queueing/ledger/_migrations/versions/{head_revision()}_") for n in migrations)
    modules = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "queueing").rglob("*.py")
        if "__pycache__" not in p.parts and "testing" not in p.relative_to(REPO).parts
    }
    expected = migrations | modules | {"queueing/py.typed"}
    assert expected <= names, f"missing from {installed.wheel.name}: {sorted(expected - names)}"
    # production carries neither the emulator nor the crash switch (queueing/testing/)
    assert not [n for n in names if n.startswith("queueing/testing/")]
    # one source: nothing of the migrations outside the package, no copy under another name
    assert not [n for n in names if n.startswith("migrations/") or "/ledger/migrations/" in n]


def test_the_installed_copy_finds_its_migrations_without_the_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    where = _run(
        [str(installed.venv / "bin" / "python"), "-c",
         "import queueing.ledger.migrate as m; print(m.__file__); print(m.MIGRATIONS_DIR)"],
        cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    module, migrations = (Path(line) for line in where.stdout.splitlines())
    assert module.is_relative_to(installed.site_packages), module  # the installed copy, not the checkout
    assert migrations == installed.site_packages / "queueing" / "ledger" / "_migrations"


def test_the_installed_copy_has_no_testing_support_and_no_crash_switch(
    installed: Installed, tmp_path: Path
) -> None:
    """Production carries neither the emulator nor the crash switch: ``queueing.testing`` is not there,
    and a fault point with ``QUEUEING_CRASH_AT`` set does nothing."""
    code = (
        "import importlib.util as u, queueing.faults as f; f.fault_point('admission.after_ledger'); "
        "print(u.find_spec('queueing.testing') is None)"
    )
    env = {**clean_env(), "QUEUEING_CRASH_AT": "admission.after_ledger"}
    ran = _run([str(installed.venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=env)
    assert (ran.returncode, ran.stdout) == (0, "True\n"), ran.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_queueing_migrate_from_the_installed_wheel(
    installed: Installed, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url, checkout_url = (f"sqlite:///{tmp_path / name}" for name in ("installed.db", "checkout.db"))
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        url, checkout_url = server.create("wheel"), server.create("wheel_checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = clean_env()

    head = head_revision()
    # the installed ``queueing`` command once on its own, then the whole sequence in one interpreter of the
    # installed copy (its console entry point, called once per command: one start-up, not five)
    ran = _run([str(installed.queueing), "migrate", "current", "--url", url], cwd=elsewhere, env=env)
    assert (ran.returncode, ran.stdout.strip()) == (0, "none (empty database)"), (ran.stdout, ran.stderr)
    sequence = [["upgrade", "head"], ["current"], ["downgrade", "base"], ["upgrade", "head"], ["check"]]
    script = (
        "import contextlib, io, json, sys\n"
        "from importlib.metadata import entry_points\n"
        "main = entry_points(group='console_scripts')['queueing'].load()\n"
        "done = []\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        code = main(['migrate', *args, '--url', sys.argv[2]])\n"
        "    done.append([code, out.getvalue().strip()])\n"
        "print(json.dumps(done))\n"
    )
    python = str(installed.venv / "bin" / "python")
    ran = _run([python, "-c", script, json.dumps(sequence), url], cwd=elsewhere, env=env)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    done = json.loads(ran.stdout.strip().splitlines()[-1])
    assert [code for code, _ in done] == [0] * len(sequence), (done, ran.stderr)
    outputs = [text for _, text in done]
    assert outputs == [
        f"upgraded to {head}",
        f"{head} (head)",
        "downgraded to base",
        f"upgraded to {head}",
        f"no drift: the schema at {head} matches the models",
    ]
    assert os.listdir(elsewhere) == []

    # the same schema as the checkout's migrations build
    assert main(["migrate", "upgrade", "head", "--url", checkout_url]) == 0
    assert reflected_schema(url) == reflected_schema(checkout_url)


def test_the_image_is_built_from_the_same_inputs() -> None:
    """The Dockerfile copies its build context (``COPY . ./``) and installs it; the context is the
    allow-list in ``.dockerignore``, which must be exactly the wheel's build inputs above."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*", "the .dockerignore starts by leaving everything out"
    assert {r.removeprefix("!").rstrip("/") for r in rules if r.startswith("!")} == set(BUILD_INPUTS)
    dockerfile = [ln.split() for ln in (REPO / "Dockerfile").read_text().splitlines()]
    copies = [words[1:] for words in dockerfile if words and words[0] == "COPY" and "--from" not in words[1]]
    assert copies == [[".", "./"]], copies
