"""benchmarks/ never imports tests/, and testsupport/ (what both share) imports neither.

Read with ast, lazy imports inside functions included (the reader of test_imports.py)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_imports import _imports

REPO = Path(__file__).resolve().parents[2]


def _offenders(folder: str, forbidden: set[str]) -> dict[str, list[str]]:
    files = sorted((REPO / folder).rglob("*.py"))
    assert len(files) >= 3, folder
    found = {str(f.relative_to(REPO)): sorted(_imports(f) & forbidden) for f in files}
    return {k: v for k, v in found.items() if v}


def test_benchmarks_never_import_tests():
    assert _offenders("benchmarks", {"tests"}) == {}


def test_testsupport_imports_neither_tests_nor_benchmarks():
    assert _offenders("testsupport", {"tests", "benchmarks"}) == {}
