"""Acceptance (issue #20): fresh clone → `make install` → `queueing dev` → `kubectl apply -f
examples/jobs/` → every Job Finished, timed; and every command of README.md and of docs/quickstart.md,
docs/install.md and docs/operations.md runs as written, against that one `queueing dev`.

The commands are every line of the pages' fenced shell blocks (``tests.test_docs_commands``'s
extraction: continuation lines joined, comments dropped), quickstart first (it clones and installs),
then README, install and operations, each in page order, in one shell-like sequence: ``cd DIR`` moves
the next commands there, ``export NAME=VALUE`` sets their environment, the command that starts
``queueing dev`` runs as a process until the end (then Ctrl-C stops it), any other command must exit 0.
A command added to one of these pages is run too, unless one of the rules below names it.

What the test puts where the pages name what only a real cluster or release has:

- ``git clone URL-OF-THIS-REPOSITORY queueing``: the checkout under test, cloned (its committed files:
  a file that is not in git is missing here too, as for a newcomer), with its uncommitted changes to
  tracked files applied on top; then ``make install`` there, unchanged (uv's cache makes it cheap);
- ``kubectl -n NS exec TARGET -- COMMAND``: the emulator runs no containers, so COMMAND runs here, in
  the environment TARGET's container has (``_exec_env``: the controller's configuration, or the
  PostgreSQL pod's variables); a TARGET it does not know fails the test, naming it;
- the database ``postgresql://queueing:PASSWORD@db.example.com:5432/queueing``: a throwaway database on
  the test PostgreSQL server holding a migrated ledger; ``pg_restore`` restores into a second, empty one
  (the page restores "into an empty database");
- commands that tear the cluster down (``TEARDOWN``) run last, after every page's other commands and
  the checks of what the quickstart shows (a preemption's Event, the dashboard, the restored ledger);
- ``BESIDE``: commands that need no cluster run in a second process while the cluster's run;
- ``SKIP``: commands that cannot run here at all, each with the reason.

The timings (clone, install, first admitted Job, every example Job Finished; then each command) go to
the test report (``record_property("timings", ...)``), which ``make test`` prints in its summary.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from queueing.ledger import migrate
from tests.ledger.conftest import PgServer, _migrate, run_async
from tests.test_docs_commands import _blocks, _shell_lines

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "quickstart.md", ROOT / "README.md", ROOT / "docs" / "install.md",
         ROOT / "docs" / "operations.md"]  # fmt: skip
CLONE = "git clone URL-OF-THIS-REPOSITORY "
SKIP = {
    "docker ": "no Docker daemon or image registry here: a release builds and pushes the image",
    "cd deploy/base && kustomize edit ": "the kustomize CLI, and it rewrites the image of deploy/base for a registry",
    "make test": "the whole suite, which this test is part of",
}
BESIDE = ("make demo",)
TEARDOWN = ("kubectl delete -k ",)
EXEC_RE = re.compile(r"kubectl -n (?P<ns>\S+) exec (?P<target>\S+) -- (?P<command>.+)")
DATABASE = re.compile(r"postgresql(\+asyncpg)?://queueing:PASSWORD@db\.example\.com:5432/queueing")
# a word in capitals that is no variable ($NAME) and sets none (NAME=): NAME, FILE, REV in a command
PLACEHOLDER = re.compile(r"(?<![$\w])[A-Z][A-Z_]+\b(?!=)")
# the markers of the acceptance timings, in docs/quickstart.md
ADMITTED = "wait --for=jsonpath='{.spec.suspend}'=false job/finetune-llama-8b"
FINISHED = "wait --for=condition=Finished workloads"


def _examples_jobs() -> set[tuple[str, str]]:
    """(namespace, name) of every Job in examples/jobs/."""
    return {
        (d["metadata"].get("namespace", "default"), d["metadata"]["name"])
        for p in sorted((ROOT / "examples" / "jobs").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d.get("kind") == "Job"
    }


class Dev:
    """`queueing dev` as a process: its stdout read by a thread (a full pipe never blocks it)."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, stderr=open(log, "w"),  # noqa: SIM115
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def until(self, prefix: str, timeout: float) -> list[str]:
        """Its output up to the line starting with ``prefix`` (fails with its log when it exits or
        says nothing for ``timeout`` seconds)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"queueing dev printed no {prefix!r} in {timeout}s:\n{self.tail()}"
                ) from None
            if line is None:
                raise AssertionError(
                    f"queueing dev exited ({self.proc.poll()}):\n{''.join(self.out)}{self.tail()}"
                )
            self.out.append(line)
            if line.startswith(prefix):
                return self.out

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


def _database_urls(pg: PgServer) -> tuple[str, str]:
    """The migrated ledger the pages' database stands for, and the empty database a restore goes to."""
    ledger = pg.create("ledger")
    run_async(_migrate(ledger))
    return ledger, pg.create("restored")


@pytest.mark.postgres
def test_fresh_clone_to_every_job_finished_and_every_command_of_the_pages(
    tmp_path: Path, record_property: Any
) -> None:
    pg = PgServer()
    ledger, restored = _database_urls(pg)
    pg_host, pg_port = re.match(r".*@([^:/]+):(\d+)/", ledger).groups()  # type: ignore[union-attr]
    commands = [(p.name, n, c) for p in PAGES for n, c in _shell_lines(p)]
    assert commands[0][2].startswith(CLONE), commands[0]
    assert any(c == "kubectl apply -f examples/jobs/" for _, _, c in commands)
    assert all(any(c.startswith(s) for _, _, c in commands) for s in SKIP), "a SKIP rule no page needs"

    # a newcomer's shell: none of this checkout's or of the test run's settings
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QUEUEING_", "KUBECONFIG", "VIRTUAL_ENV", "PYTHONPATH", "MAKE", "MFLAGS", "PYTEST"))}  # fmt: skip
    env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig-before-the-export")
    env["KUBECACHEDIR"] = str(tmp_path / "kube-cache")
    cwd = tmp_path
    dev: Dev | None = None
    beside: list[tuple[str, subprocess.Popen[bytes], IO[str]]] = []
    dashboard = ""
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    log: list[str] = []

    def run(page: str, line: int, command: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(["bash", "-c", command], cwd=cwd, env={**env, **kw}, capture_output=True,
                           text=True, timeout=400)  # fmt: skip
        hint = PLACEHOLDER.findall(command)
        assert r.returncode == 0, (
            f"{page}:{line}: {command}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n"
            + (f"(is {', '.join(hint)} a placeholder? this test runs the command as written, against queueing "
               "dev's example cluster: write it so, or add a rule to tests/dev/test_fresh_clone.py)\n" if hint else "")
            + (dev.tail() if dev else "")
        )  # fmt: skip
        return r

    def step(page: str, line: int, command: str) -> None:
        nonlocal cwd, dev, dashboard
        started = time.monotonic()
        if any(command.startswith(s) for s in SKIP):
            why = next(r for s, r in SKIP.items() if command.startswith(s))
            log.append(f"{'':>17}  skipped: {command}  ({why})")
            return
        if command.startswith(CLONE):
            target = command.removeprefix(CLONE).strip()
            run(page, line, f"git clone --quiet {ROOT} {target}")
            patch = subprocess.run(["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], capture_output=True,
                                   check=True).stdout  # fmt: skip
            if patch:  # the uncommitted changes of the checkout under test
                subprocess.run(["git", "-C", str(cwd / target), "apply", "--binary", "-"], input=patch,
                               check=True)  # fmt: skip
            marks["clone"] = time.monotonic()
        elif command.startswith("cd ") and " " not in command[3:].strip():
            cwd = (cwd / command[3:].strip()).resolve()
        elif command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            env[name] = run(page, line, f'printf %s "{value}"').stdout
        elif " dev " in f" {command} ":
            dev = Dev(command, cwd, env, tmp_path / "dev.log")
            seen = dev.until("Stop with Ctrl-C", timeout=180)
            marks["dev ready"] = time.monotonic()
            # what the page shows it prints (ports, paths and counts aside)
            shown = next(
                b for lang, _, b in _blocks(PAGES[0].read_text()) if not lang and "Stop with Ctrl-C." in b
            )
            assert [_shape(s) for s in seen] == [_shape(s) for s in shown], seen
            # what to try next: the kubeconfig and the example Jobs (a path typed from here)
            assert any(s.strip() == f"export KUBECONFIG={cwd / '.dev' / 'kubeconfig'}" for s in seen), seen
            assert any(s.strip().startswith("kubectl apply -f ") and "examples/jobs/" in s for s in seen)
            dashboard = next(
                s.split(": ", 1)[1].strip() for s in seen if s.startswith("dashboard (read-only): ")
            )
        elif command.startswith(BESIDE):
            out = open(tmp_path / f"beside-{len(beside)}.log", "w+")  # noqa: SIM115
            proc = subprocess.Popen(
                ["bash", "-c", command], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
            )
            beside.append((f"{page}:{line}: {command}", proc, out))
        elif m := EXEC_RE.fullmatch(command):
            container = _exec_env(m["ns"], m["target"], cwd, ledger, pg_host, pg_port)
            run(page, line, _databases(m["command"], ledger, restored), **container)
        else:
            run(page, line, _databases(command, ledger, restored))
        if command == "make install":
            marks["install"] = time.monotonic()
        log.append(f"{time.monotonic() - t0:6.1f}s (+{time.monotonic() - started:5.1f}s)  {command}")
        if ADMITTED in command and "admitted" not in marks:
            marks["admitted"] = time.monotonic()
        if FINISHED in command and "finished" not in marks:
            marks["finished"] = time.monotonic()
            _every_example_job_complete(run, page, line)

    try:
        for page, line, command in commands:
            if not command.startswith(TEARDOWN):  # those run last
                step(page, line, command)
        assert dev is not None, "the quickstart never starts queueing dev"
        assert {"clone", "install", "admitted", "finished"} <= marks.keys(), marks
        # before the teardown: the quickstart's preemption happened (not just both Jobs finishing one
        # after the other) ...
        events = json.loads(run("test", 0, "kubectl -n team-a get events -o json").stdout)["items"]
        preempted = [e for e in events
                     if e["reason"] == "Preempted" and e["involvedObject"]["name"] == "job-hyperparameter-sweep"]  # fmt: skip
        assert preempted and "job-release-eval" in preempted[-1]["message"], events[-5:]
        # ... the dashboard queueing dev serves shows the example cluster's queues (issue #23) ...
        with urllib.request.urlopen(f"{dashboard}api/queues", timeout=30) as resp:
            assert resp.status == 200 and "team-a" in resp.read().decode()
        # ... and operations.md's restore put the backed-up ledger into the empty database
        assert migrate.current(restored) == migrate.head_revision()
        for page, line, command in commands:
            if command.startswith(TEARDOWN):
                step(page, line, command)
        for what, proc, out in beside:
            assert proc.wait(400) == 0, f"{what}\n{Path(out.name).read_text()[-3000:]}"
            log.append(f"{time.monotonic() - t0:6.1f}s  done beside: {what}")
        dev.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert dev.proc.wait(60) == 0, dev.tail()
        dev.until("queueing dev: stopped", timeout=10)
        log.append(f"{time.monotonic() - t0:6.1f}s  stopped by Ctrl-C")
    finally:
        summary = _summary(t0, marks) + log
        record_property("timings", "\n".join(summary))
        print("\n".join(summary))
        for _, proc, _ in beside:
            if proc.poll() is None:
                proc.kill()
        if dev is not None and dev.proc.poll() is None:
            dev.proc.kill()
            dev.proc.wait(10)
        pg.drop_all()


def _shape(line: str) -> str:
    return re.sub(r"\d+", "N", re.sub(r"\S*/queueing/", ".../queueing/", line.strip()))


def _summary(t0: float, marks: dict[str, float]) -> list[str]:
    def since(a: str, b: str) -> str:
        return f"{marks[b] - marks[a]:6.1f}s" if a in marks and b in marks else "   n/a"

    marks = {"start": t0, **marks}
    return [
        f"git clone:                               {since('start', 'clone')}",
        f"clone -> make install done:              {since('clone', 'install')}",
        f"make install -> queueing dev ready:      {since('install', 'dev ready')}",
        f"make install -> first Job admitted:      {since('install', 'admitted')}",
        f"clone -> first Job admitted:             {since('start', 'admitted')}  (target: under 120 s)",
        f"clone -> every example Job Finished:     {since('start', 'finished')}",
        "each command (since the clone started, and its own time):",
    ]


def _every_example_job_complete(run: Any, page: str, line: int) -> None:
    """Every Job of examples/jobs/ exists and is Complete, and its Workload is Finished."""
    jobs = json.loads(run(page, line, "kubectl get jobs -A -o json").stdout)["items"]
    complete = {
        (j["metadata"]["namespace"], j["metadata"]["name"])
        for j in jobs
        if any(c["type"] == "Complete" and c["status"] == "True" for c in (j.get("status") or {}).get("conditions") or [])
    }  # fmt: skip
    assert _examples_jobs() <= complete, sorted(_examples_jobs() - complete)
    workloads = json.loads(run(page, line, "kubectl get workloads -A -o json").stdout)["items"]
    finished = {
        (w["metadata"]["namespace"], ref["name"])
        for w in workloads
        for ref in w["metadata"].get("ownerReferences") or []
        if ref["kind"] == "Job"
        and any(c["type"] == "Finished" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or [])
    }  # fmt: skip
    assert _examples_jobs() <= finished, sorted(_examples_jobs() - finished)


def _databases(command: str, ledger: str, restored: str) -> str:
    """The pages' database URL as the throwaway one (the restore's: the empty one)."""
    url = restored if command.startswith("pg_restore ") else ledger
    return DATABASE.sub(lambda m: url if m[1] else url.replace("+asyncpg", ""), command)


def _exec_env(ns: str, target: str, cwd: Path, ledger: str, host: str, port: str) -> dict[str, str]:
    """The environment of the container ``kubectl -n ns exec target`` would run in."""
    if (ns, target) == ("queueing-system", "deploy/queueing-controller"):
        # deploy/base/deployment.yaml: $QUEUEING_CONFIG names the configuration; queueing dev's is .dev/
        config = cwd / ".dev" / "config.yaml"
        assert config.is_file(), f"no {config}: queueing dev writes the controller's configuration there"
        return {"QUEUEING_CONFIG": str(config)}
    if (ns, target) == ("queueing-system", "queueing-postgres-0"):
        # deploy/overlays/postgres: the server's $POSTGRES_USER and $POSTGRES_DB, on the test server
        return {"POSTGRES_USER": "postgres", "POSTGRES_DB": ledger.rsplit("/", 1)[1], "PGHOST": host,
                "PGPORT": port}  # fmt: skip
    raise AssertionError(
        f"no stand-in for `kubectl -n {ns} exec {target}`: add it to _exec_env, or a SKIP rule"
    )
