"""tests/skip_gate.py: under ``CI`` a session with a skipped, xfailed or xpassed test fails and names each one;
without ``CI`` nothing changes. Run on throwaway test files with pytest's own ``pytester``."""

from __future__ import annotations

import pytest

NOT_RUN = """
import pytest

no_module = pytest.importorskip("no_such_module_for_the_skip_gate")
"""

MIXED = """
import pytest

@pytest.fixture
def frobnicator():
    pytest.skip("no frobnicator in fixture")

def test_passes():
    pass

def test_skips():
    pytest.skip("no frobnicator here")

def test_skips_in_setup(frobnicator):
    pass

@pytest.mark.skipif(True, reason="marked off")
def test_marked():
    pass

@pytest.mark.xfail(reason="known bad")
def test_xfails():
    assert False

@pytest.mark.xfail(reason="thought bad")
def test_xpasses():
    pass
"""

SECTION = "*= tests that did not run: CI fails on any skip or xfail =*"


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None) -> pytest.RunResult:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # hypothesis, anyio...: seconds a run, not needed
    return pytester.runpytest("-p", "tests.skip_gate", "-p", "no:cacheprovider")


def test_under_ci_every_test_that_did_not_run_fails_the_session_by_name(pytester, monkeypatch) -> None:
    pytester.makepyfile(test_mixed=MIXED, test_not_run=NOT_RUN)
    result = _run(pytester, monkeypatch, "true")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1, xpassed=1)  # the module's skip counted apart
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            SECTION,
            "SKIPPED test_not_run.py: could not import 'no_such_module_for_the_skip_gate': "
            "No module named 'no_such_module_for_the_skip_gate' (line 3)",
            "SKIPPED test_mixed.py::test_skips: no frobnicator here (line 11)",
            "SKIPPED test_mixed.py::test_skips_in_setup: no frobnicator in fixture (line 13)",
            "SKIPPED test_mixed.py::test_marked: marked off (line 16)",
            "XFAILED test_mixed.py::test_xfails: known bad",
            "XPASSED test_mixed.py::test_xpasses: thought bad",
            "CI is set: the session fails, 6 test(s) did not run as written",
        ],
        consecutive=True,
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_ci_a_skip_passes_as_before(pytester, monkeypatch, ci) -> None:
    pytester.makepyfile(test_mixed=MIXED)
    result = _run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1, xpassed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line(SECTION)


def test_under_ci_a_session_where_everything_ran_passes(pytester, monkeypatch) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = _run(pytester, monkeypatch, "true")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line(SECTION)


def test_under_ci_a_failed_session_keeps_its_own_exit_code(pytester, monkeypatch) -> None:
    pytester.makepyfile(test_bad="import pytest\n\ndef test_bad():\n    pytest.skip('x')\n\ndef test_broken(:\n")
    result = _run(pytester, monkeypatch, "true")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # the collection error, not TESTS_FAILED
