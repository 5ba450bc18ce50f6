"""edge/ runs on a Pi with only the device extra: it must never import converters, torch, onnx or TF.

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


def test_only_the_session_builder_imports_onnxruntime():
    """One place imports onnxruntime on the device, so its telemetry is turned off before any session."""
    files = sorted(EDGE.rglob("*.py"))
    importers = sorted(str(f.relative_to(EDGE.parent)) for f in files if "onnxruntime" in _imports(f))
    assert importers == ["edge/runtime/ort_session.py"]
