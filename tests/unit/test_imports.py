"""edge/ runs on a Pi with only the device extra: it must never import converters, the fleet server, torch, onnx or TF.

Reads every module's imports with ast (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {
    "converters",
    "torch",
    "onnx",
    "onnxscript",
    "tensorflow",
    "tf_keras",
    "transformers",
    "dlib",
    "face_recognition",
    "skimage",
    "edge_deploy",
    "fleet",
    "psycopg",
}

EDGE = Path(__file__).resolve().parents[2] / "edge"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__", "require")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value).split(".")[0])
    return names


def test_edge_imports_nothing_from_the_host_side():
    files = sorted(EDGE.rglob("*.py"))
    assert len(files) >= 3
    offenders = {str(f.relative_to(EDGE.parent)): sorted(_imports(f) & FORBIDDEN) for f in files}
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}


def test_the_checker_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import torch.nn\n    from converters import face\n")
    assert _imports(f) >= {"torch", "converters"}


CONVERTERS = EDGE.parent / "converters"


def _converters_imports(path: Path, modules: set[str]) -> set[str]:
    """The converters modules ``path`` imports at run time (lazy ones too; ``if TYPE_CHECKING:`` aside)."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text(), filename=str(path))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("converters."):
            found.update(
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            )
        todo.extend(ast.iter_child_nodes(node))
    return found & modules


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> imported modules), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return []


def test_converters_modules_import_each_other_without_cycles():
    files = {".".join(p.relative_to(EDGE.parent).with_suffix("").parts): p for p in CONVERTERS.rglob("*.py")}
    files = {name.removesuffix(".__init__"): path for name, path in files.items()}
    graph = {name: _converters_imports(path, set(files)) - {name} for name, path in files.items()}
    assert len(graph) > 40
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_only_the_session_builder_imports_onnxruntime():
    """One place imports onnxruntime on the device, so its telemetry is turned off before any session."""
    files = sorted(EDGE.rglob("*.py"))
    importers = sorted(str(f.relative_to(EDGE.parent)) for f in files if "onnxruntime" in _imports(f))
    assert importers == ["edge/runtime/ort_session.py"]
