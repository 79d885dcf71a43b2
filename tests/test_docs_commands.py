"""The `queueing ...` and `alembic ...` commands shown in README.md and docs/*.md run as written.

Every command line in a ``sh``/``console``/``text`` block (``$ `` prompts stripped) that names a real
subcommand and has no placeholders (FILE, NAME, ``...``, ``[...]``, ``a|b``) is run in order, in a
scratch directory where ``examples/`` is visible, against a throwaway SQLite ledger: any ``--url``
value and ``QUEUEING_DATABASE_URL`` point there, so commands that need a cluster (run, explain) are
the only ones left out. ``alembic`` runs there too, on the checkout's ``alembic.ini`` and
``migrations/`` (its commands that only read or migrate the database; never ``revision``, which writes
files). A command that exits non-zero fails the test with its output.

Every shell command of README.md, docs/quickstart.md, docs/install.md and docs/operations.md (those
that need a cluster too) runs in order in a fresh clone against ``queueing dev``, with real kubectl:
``tests/dev/test_fresh_clone.py``, which uses ``_shell_lines`` below.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OFFLINE = {
    "queueing": {"simulate", "allocate", "crds", "migrate", "report"},
    "alembic": {"upgrade", "downgrade", "current", "history", "heads", "check", "show"},
}
RUNNER = {"queueing": [sys.executable, "-m", "queueing"], "alembic": [sys.executable, "-m", "alembic"]}
PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b|\.\.\.|\[|\||<|\$\{?\w")


def _blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, first line number, lines) of every fenced code block."""
    blocks: list[tuple[str, int, list[str]]] = []
    current: tuple[str, int, list[str]] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if current is None:
                current = (line.strip()[3:].strip(), n + 1, [])
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current[2].append(line)
    return blocks


def _commands(page: Path) -> list[tuple[int, list[str]]]:
    out = []
    for lang, first, lines in _blocks(page.read_text()):
        if lang not in ("", "sh", "bash", "console", "shell", "text"):
            continue
        for i, raw in enumerate(lines):
            line = raw.strip().removeprefix("$ ").split("  #")[0].strip()
            if line.split(" ")[0] not in OFFLINE:
                continue
            line = line.split(" > ")[0]  # output redirection: the test keeps the output itself
            words = shlex.split(line)
            # a database URL is replaced by the test's ledger anyway: `--url ...` is runnable
            words = [
                w if not (w == "..." and k and words[k - 1] in ("--url", "--ledger")) else "URL"
                for k, w in enumerate(words)
            ]
            checked = [w for k, w in enumerate(words) if not (k and words[k - 1] in ("--url", "--ledger"))]
            if (
                len(words) < 2
                or words[1] not in OFFLINE[words[0]]
                or PLACEHOLDER.search(" ".join(checked[1:]))
            ):
                continue
            out.append((first + i, words))
    return out


CASES = [(p, c) for p in PAGES if (c := _commands(p))]


def test_the_docs_show_runnable_commands() -> None:
    assert sum(len(c) for _, c in CASES) >= 10, [(p.name, len(c)) for p, c in CASES]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with data, so that reports have something to show: seeded once, copied per page."""
    db = tmp_path_factory.mktemp("seed") / "ledger.db"
    env = {k: v for k, v in os.environ.items() if k != "QUEUEING_CONFIG"}
    seed = [sys.executable, "-m", "queueing", "simulate", "-f", str(ROOT / "examples" / "simulate"),
            "--ledger", f"sqlite+aiosqlite:///{db}"]  # fmt: skip
    subprocess.run(seed, cwd=db.parent, env=env, check=True, capture_output=True, timeout=120)
    return db


@pytest.mark.parametrize(("page", "commands"), CASES, ids=[str(p.relative_to(ROOT)) for p, _ in CASES])
def test_doc_commands_run(
    page: Path, commands: list[tuple[int, list[str]]], tmp_path: Path, seeded: Path
) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "crds").symlink_to(ROOT / "crds")
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    (tmp_path / "alembic.ini").symlink_to(ROOT / "alembic.ini")
    (tmp_path / "migrations").symlink_to(ROOT / "migrations")
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    env = {**os.environ, "QUEUEING_DATABASE_URL": url}
    env.pop("QUEUEING_CONFIG", None)
    shutil.copyfile(seeded, tmp_path / "ledger.db")
    for line, words in commands:
        args = list(words[1:])
        for i, a in enumerate(args):
            if a in ("--url", "--ledger") and i + 1 < len(args):
                args[i + 1] = url
        if words[0] == "queueing" and args[0] == "crds" and "--check" not in args:
            args.append("--check")  # never rewrite the committed files
        r = subprocess.run(
            [*RUNNER[words[0]], *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, (
            f"{page.name}:{line}: {' '.join(words)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        )


# ------------------------------------------------------- the shell commands, for the pages run in queueing dev


def _shell_lines(page: Path) -> list[tuple[int, str]]:
    """Every command of the page's shell blocks (``sh``, ``bash``, ``shell``), in order, continuation
    lines joined, comment lines dropped."""
    out: list[tuple[int, str]] = []
    for lang, first, lines in _blocks(page.read_text()):
        if lang not in ("sh", "bash", "shell"):
            continue
        pending = ""
        for i, raw in enumerate(lines):
            line = raw.rstrip()
            if pending:
                pending += " " + line.strip()
            elif line.strip() and not line.lstrip().startswith("#"):
                pending, start = line.strip(), first + i
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            if pending:
                out.append((start, pending))
                pending = ""
    return out
