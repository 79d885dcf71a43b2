"""The functional core never imports the imperative shell, reads the clock, or does I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "queueing"
CORES = ("api", "dra", "scheduling", "cache")
SHELL = ("ledger", "kube", "controller", "simulate", "commands", "cli", "testing")
# what each core may import from our own package
ALLOWED = {
    "api": {"api"},
    "dra": {"api", "dra"},
    "scheduling": {"api", "dra", "scheduling"},
    "cache": {"api", "dra", "scheduling", "cache"},
}
# stdlib / third-party modules that mean I/O, clocks or global state
FORBIDDEN_MODULES = {
    "os",
    "sys",
    "io",
    "socket",
    "subprocess",
    "asyncio",
    "threading",
    "time",
    "datetime",
    "random",
    "pathlib",
    "shutil",
    "tempfile",
    "sqlalchemy",
    "aiohttp",
    "kubernetes_asyncio",
    "requests",
    "apscheduler",
    "prometheus_client",
    "logging",
}
FORBIDDEN_CALLS = {"open", "print", "input"}


def _core_files() -> list[Path]:
    return sorted(p for c in CORES for p in (ROOT / c).rglob("*.py"))


def _violations(path: Path) -> list[str]:
    core = path.relative_to(ROOT).parts[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against the package
                pkg = path.relative_to(ROOT).parts[:-1]
                base = list(pkg[: len(pkg) - (node.level - 1)])
                mods = [".".join(["queueing", *base, *(node.module.split(".") if node.module else [])])]
            else:
                mods = [node.module or ""]
        for m in mods:
            top = m.split(".")[0]
            if top == "queueing":
                sub = m.split(".")[1] if "." in m else ""
                if sub and sub not in ALLOWED[core]:
                    out.append(f"{path}:{node.lineno}: core '{core}' imports queueing.{sub}")
            elif top in FORBIDDEN_MODULES:
                out.append(f"{path}:{node.lineno}: core '{core}' imports {m} (I/O, clock or global state)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            out.append(f"{path}:{node.lineno}: core '{core}' calls {node.func.id}()")
    return out


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_keeps_the_layering(path: Path) -> None:
    assert _violations(path) == []


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    fake_root = tmp_path / "queueing"
    (fake_root / "dra").mkdir(parents=True)
    bad = fake_root / "dra" / "bad.py"
    bad.write_text("import time\nfrom queueing.ledger import x\nfrom ..kube import y\nopen('f')\n")
    globals()["ROOT"], saved = fake_root, ROOT
    try:
        found = _violations(bad)
    finally:
        globals()["ROOT"] = saved
    assert len(found) == 4, found
