"""Suite-wide: the timings a test records (``record_property("timings", text)``, e.g. the fresh-clone
acceptance test's clone → install → first admitted Job → every Job Finished) are printed in the
terminal summary of every run, with or without ``-rA`` and under pytest-xdist."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    recorded = [
        (report.nodeid, value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "timings"
    ]
    for nodeid, text in recorded:
        terminalreporter.section(f"timings: {nodeid}", sep="-")
        for line in str(text).splitlines():
            terminalreporter.write_line(line)


# pytest-xdist (``make test`` runs ``-n 2 --dist loadscope``): a module is one unit of work, except that
# tests/controller is one unit, so test_zz_rbac_coverage.py (last in it) sees every end-to-end test of the
# directory on its worker; and the longest units go first, so neither worker is left with one at the end
HEAVY_FIRST = (
    "tests/controller/",
    "tests/dev/test_fresh_clone.py",
    "tests/reliability/test_crash.py",
    "tests/reliability/test_ledger_outage_log.py",
    "tests/ledger/test_wheel.py",
)


def _heavy_rank(nodeid: str) -> int:
    return next((i for i, p in enumerate(HEAVY_FIRST) if nodeid.startswith(p)), len(HEAVY_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _heavy_rank(item.nodeid))  # stable: the order within a unit is kept


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order above (xdist sorts by test count)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return (
                "tests/controller/"
                if nodeid.startswith("tests/controller/")
                else super()._split_scope(nodeid)
            )

    if config.getvalue("dist") != "loadscope":
        return None
    return Scheduling(config, log)
