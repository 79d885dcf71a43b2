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
