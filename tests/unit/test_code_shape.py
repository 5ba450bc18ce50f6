"""Every function outside tests is at most 60 lines of code (STYLE.md: "functions under ~60 lines").

Read with ast. A function's size is the number of lines its body spans that hold code: its docstring, blank
lines and comment-only lines do not count; its signature does not either. A nested function counts towards
the function that holds it (it is part of reading it). On failure the test lists every offender.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("edge", "converters", "edge_deploy", "fleet", "benchmarks", "scripts")
MAX_LINES = 60


def _docstring_lines(node: ast.AST) -> set[int]:
    """Lines of the docstring of ``node`` and of every function or class inside it."""
    lines: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module) and sub.body:
            first = sub.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _code_lines(source: str) -> set[int]:
    """Lines that hold a token other than a comment or a line break."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def function_sizes(path: Path) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, lines of code)`` for every function in ``path``."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    code = _code_lines(source)
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first, last = child.body[0].lineno, child.body[-1].end_lineno or child.body[-1].lineno
                size = len((set(range(first, last + 1)) & code) - _docstring_lines(child))
                out.append((prefix + child.name, child.lineno, size))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def offenders(root: Path = REPO, dirs: tuple[str, ...] = CHECKED, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` for every function over ``limit`` lines of code under ``dirs``."""
    found = []
    for d in dirs:
        for path in sorted((root / d).rglob("*.py")):
            for name, line, size in function_sizes(path):
                if size > limit:
                    found.append(f"{path.relative_to(root)}:{line} {name} ({size} lines)")
    return found


def test_no_function_is_over_60_lines_of_code():
    found = offenders()
    assert not found, f"{len(found)} function(s) over {MAX_LINES} lines of code:\n" + "\n".join(found)


def test_the_count_leaves_out_docstrings_comments_and_blank_lines(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(3))
    (tmp_path / "m.py").write_text(
        "def f(\n    a,\n):\n"
        '    """Doc.\n\n    More doc.\n    """\n'
        f"{body}\n\n    # a comment\n"
        "    def inner():\n        '''Inner doc.'''\n        return (\n            1\n        )\n"
        "    return inner\n"
    )
    assert function_sizes(tmp_path / "m.py") == [("f", 1, 8), ("f.inner", 13, 3)]


@pytest.mark.parametrize(("lines", "listed"), [(60, False), (61, True)])
def test_the_limit_is_60(tmp_path, lines, listed):
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(lines - 1))
    (tmp_path / "pkg" / "m.py").write_text(f"class C:\n    def big(self):\n{body.replace('    ', '        ')}\n        return 0\n")
    expected = [f"pkg/m.py:2 C.big ({lines} lines)"] if listed else []
    assert offenders(tmp_path, ("pkg",)) == expected
