"""The benchmarks' one entry point; run it from the repository root.

    python -m benchmarks list                  # every benchmark: name, what it measures, the sections it writes
    python -m benchmarks run NAME --help       # its own flags
    python -m benchmarks run arm_cost --write  # run one; its own flags follow NAME

A benchmark is a module of this folder that declares ``NAME``, ``SUMMARY``, ``SECTIONS`` (the docs/benchmarks.md
sections it writes) and ``main(argv)``. ``list`` reads the declarations without importing the modules.
"""

from __future__ import annotations

import ast
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
USAGE = "usage: python -m benchmarks list | run NAME [ITS FLAGS ...]  (run NAME --help lists a benchmark's flags)"
DECLARED = ("NAME", "SUMMARY", "SECTIONS")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's declaration: its name (the module's), a line on what it measures, the sections it writes."""

    name: str
    summary: str
    sections: tuple[str, ...]


def _declarations(path: Path) -> dict[str, object]:
    """The literal top-level ``NAME``, ``SUMMARY`` and ``SECTIONS`` assignments of ``path``."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in DECLARED:
            found[target.id] = ast.literal_eval(node.value)
    return found


def registry() -> dict[str, Benchmark]:
    """Every module of benchmarks/ that declares ``NAME``, by name.

    Raises:
        ValueError: a module declares ``NAME`` but not as its own module name, or without a summary or sections.
    """
    found: dict[str, Benchmark] = {}
    for path in sorted(HERE.glob("*.py")):
        decl = _declarations(path)
        if "NAME" not in decl:
            continue
        summary, sections = decl.get("SUMMARY"), decl.get("SECTIONS")
        if decl["NAME"] != path.stem or not isinstance(summary, str) or not isinstance(sections, tuple):
            raise ValueError(
                f"{path.relative_to(HERE.parent)}: NAME = {decl['NAME']!r}; expected NAME = {path.stem!r}, "
                "SUMMARY a string and SECTIONS a tuple of docs/benchmarks.md section names"
            )
        found[path.stem] = Benchmark(path.stem, summary, sections)
    return found


def list_lines(benchmarks: dict[str, Benchmark]) -> list[str]:
    """One line a benchmark: name, summary and the sections it writes."""
    width = max(len(name) for name in benchmarks)
    lines = []
    for b in benchmarks.values():
        writes = f"  [{', '.join(b.sections)}]" if b.sections else "  [prints]"
        lines.append(f"{b.name:<{width}}  {b.summary}{writes}")
    return lines


def run(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` with its own flags ``argv``; its argparse names it ``python -m benchmarks run NAME``."""
    module = importlib.import_module(f"benchmarks.{name}")
    saved = sys.argv
    sys.argv = [f"python -m benchmarks run {name}", *argv]
    try:
        return int(module.main(argv) or 0)
    finally:
        sys.argv = saved


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["list"]:
        print("\n".join(list_lines(registry())))
        return 0
    if len(args) >= 2 and args[0] == "run":
        known = registry()
        if args[1] not in known:
            print(f"Error: no benchmark named {args[1]!r}; `python -m benchmarks list` names them", file=sys.stderr)
            return 2
        return run(args[1], args[2:])
    help_asked = args in ([], ["-h"], ["--help"])
    print(__doc__ if help_asked else USAGE, file=sys.stdout if help_asked else sys.stderr)
    return 0 if help_asked else 2


if __name__ == "__main__":
    sys.exit(main())
