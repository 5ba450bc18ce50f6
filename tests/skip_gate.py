"""A pytest plugin (loaded by tests/conftest.py): under ``CI`` a skipped, xfailed or xpassed test fails the
session, and the summary names each with its reason. A skip in CI means a check did not run: a broken wheel or
a missing tool must not leave CI green."""

from __future__ import annotations

import os

import pytest

#: Values of ``CI`` that mean "not in CI" (CI services set it to "true").
_NOT_CI = frozenset({"", "0", "false", "no"})

Report = pytest.CollectReport | pytest.TestReport


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in _NOT_CI


def not_run(report: Report) -> str | None:
    """``"SKIPPED node: reason"`` (or XFAILED, XPASSED) for a report of a test that did not run as written."""
    if hasattr(report, "wasxfail"):
        outcome, reason = ("XFAILED" if report.skipped else "XPASSED"), report.wasxfail or "no reason given"
    elif report.skipped:
        outcome, reason = "SKIPPED", str(report.longrepr)
        if isinstance(report.longrepr, tuple):  # (path, line, "Skipped: reason")
            _, line, text = report.longrepr
            reason = f"{text.removeprefix('Skipped: ')} (line {line})"
    else:
        return None
    return f"{outcome} {report.nodeid}: {reason}"


class SkipGate:
    """Collects the tests that did not run; fails a session that would otherwise pass."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _see(self, report: Report) -> None:
        line = not_run(report)
        if line is not None:
            self.lines.append(line)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._see(report)  # a module skipped at import (importorskip, skip(allow_module_level=True))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._see(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.lines and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.lines:
            return
        terminalreporter.section("tests that did not run: CI fails on any skip or xfail", red=True)
        for line in self.lines:
            terminalreporter.line(line)
        terminalreporter.line(f"CI is set: the session fails, {len(self.lines)} test(s) did not run as written")


def pytest_configure(config: pytest.Config) -> None:
    if in_ci():
        config.pluginmanager.register(SkipGate(), "skip-gate")
