"""``python -m benchmarks``: ``list`` names every benchmark module, ``run NAME --help`` parses for each, every
section of docs/benchmarks.md has the one benchmark that writes it, and no benchmark edits ``sys.path``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from benchmarks.__main__ import main, registry

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def _top_level_modules() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_list_names_every_module_of_the_folder(capsys):
    """Every module directly in benchmarks/ is a benchmark (the helpers live in benchmarks/harness/)."""
    assert main(["list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == _top_level_modules()
    assert len(listed) >= 30


def test_every_doc_section_is_written_by_exactly_one_benchmark():
    doc = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    in_doc = re.findall(r"<!-- begin:([a-z0-9-]+) -->", doc)
    declared = [s for b in registry().values() for s in b.sections]
    assert sorted(declared) == sorted(set(declared))
    assert sorted(in_doc) == sorted(declared)


@pytest.mark.parametrize("name", sorted(registry()))
def test_run_name_help_parses(name, capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m benchmarks run {name} ")


def test_an_unknown_name_is_refused(capsys):
    assert main(["run", "align_a94bba3"]) == 2
    err = "Error: no benchmark named 'align_a94bba3'; `python -m benchmarks list` names them\n"
    assert capsys.readouterr().err == err


def _path_edits(path: Path) -> list[int]:
    """Lines where ``path`` changes ``sys.path`` (a call on it, or an assignment to it)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if isinstance(node, ast.Assign | ast.AugAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Attribute) and target.attr == "path" and getattr(target.value, "id", "") == "sys":
            lines.append(node.lineno)
    return sorted(lines)


def test_no_benchmark_edits_sys_path(tmp_path):
    offenders = {str(p.relative_to(REPO)): _path_edits(p) for p in sorted(BENCH.rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}
    probe = tmp_path / "m.py"
    probe.write_text("import sys\nsys.path.insert(0, 'x')\nsys.path = []\nsys.path += ['y']\n")
    assert _path_edits(probe) == [2, 3, 4]


#: Private names a benchmark still takes from converters/ (being reshaped into model families: make them public
#: there, then drop them from this list).
KNOWN_PRIVATE = {("benchmarks/browser_vs_native.py", "converters.face.build._export")}
PROJECT = ("edge", "converters", "fleet", "edge_deploy", "benchmarks", "testsupport")


def _imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from PROJECT_MODULE import name`` in ``path``, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in PROJECT:
            found += [(node.module or "", a.name) for a in node.names]
    return found


def test_benchmarks_import_public_names_that_exist():
    """A lazy import inside a benchmark runs only in a real run: check here that each name exists, and that no
    benchmark reaches for another package's private name."""
    missing, private = [], []
    for path in sorted(BENCH.rglob("*.py")):
        where = str(path.relative_to(REPO))
        for module, name in _imported_names(path):
            mod = importlib.import_module(module)
            submodule = hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None
            if not hasattr(mod, name) and not submodule:
                missing.append(f"{where}: {module}.{name}")
            if name.startswith("_") and (where, f"{module}.{name}") not in KNOWN_PRIVATE:
                private.append(f"{where}: {module}.{name}")
    assert (missing, private) == ([], [])


def test_benchmarks_share_code_only_through_the_harness():
    """A benchmark imports no other benchmark, and the harness none at all: what two share lives in harness/."""
    names = set(_top_level_modules())
    offenders = []
    for path in sorted(BENCH.rglob("*.py")):
        for module, name in _imported_names(path):
            target = (
                module.split(".")[1] if module.startswith("benchmarks.") else name if module == "benchmarks" else ""
            )
            if target in names and not (path.parent == BENCH and path.stem == "__main__"):
                offenders.append(f"{path.relative_to(REPO)}: {module}.{name}")
    assert offenders == []
