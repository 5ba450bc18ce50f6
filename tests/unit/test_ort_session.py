"""edge.runtime.ort_session: the one onnxruntime session builder (options, errors) and telemetry kept off.

Real onnxruntime on a small real ONNX model; the telemetry checks run a child process with a fresh HOME.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.errors import InferenceError, MissingDependencyError
from edge.runtime import ort_session
from edge.runtime.ort_session import Optimization, build_session, import_onnxruntime
from tests.unit.runtime_models import conv_relu_reference, write_conv_relu, write_unknown_op

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def conv(tmp_path_factory) -> Path:
    return write_conv_relu(tmp_path_factory.mktemp("ort-session") / "conv.onnx")


def test_a_session_gets_the_threads_one_inter_op_thread_and_full_optimisation(conv):
    ort = import_onnxruntime()
    session = build_session(conv, 3)
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert session.get_providers() == ["CPUExecutionProvider"]
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(session.run(["y"], {"x": x})[0], conv_relu_reference(x), atol=1e-5)


def test_a_lower_optimisation_level_is_passed_on(conv):
    ort = import_onnxruntime()
    options = build_session(conv, 1, optimization=Optimization.BASIC).get_session_options()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_a_file_onnxruntime_refuses_is_named_in_the_error(tmp_path):
    bad = write_unknown_op(tmp_path / "unknown_op.onnx")
    with pytest.raises(InferenceError) as err:
        build_session(bad, 1, what="this MTCNN model")
    assert str(err.value).startswith(f"{bad}: onnxruntime cannot load this MTCNN model (")
    assert "NoSuchOperator" in str(err.value)


def test_a_bad_thread_count_is_refused_before_loading(conv):
    with pytest.raises(InferenceError) as err:
        build_session(conv, 0)
    assert str(err.value) == "threads = 0; expected a whole number >= 1"


def test_a_missing_onnxruntime_names_the_purpose_and_the_extra(monkeypatch):
    monkeypatch.setattr(ort_session, "_state", {})
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError) as err:
        import_onnxruntime("Face embedding")
    assert str(err.value) == (
        "Face embedding needs the Python module 'onnxruntime' (import of onnxruntime halted; None in sys.modules); "
        "install it with: pip install 'edge-deploy[device]'"
    )


_CHILD = """
import sys
from pathlib import Path
import numpy as np
model = Path(sys.argv[2])
if sys.argv[1] == "edge":
    from edge.face.embed import FaceEmbedder  # the device path: the face pipeline's imports, then a session
    from edge.runtime.ort_session import build_session
    session = build_session(model, 1)
else:
    import onnxruntime
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
session.run(None, {"x": np.zeros((1, 3, 16, 16), np.float32)})
"""


def _run_child(way: str, model: Path, home: Path) -> list[str]:
    """Build and run a session in a child process whose HOME is ``home``; list what it wrote under .cache."""
    # onnxruntime's telemetry switches itself off when CI is set, as it is in CI: the child must not see it,
    # or neither check below could fail there.
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", "CI")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", _CHILD, way, str(model)], env=env, check=True, timeout=120, cwd=home)
    return sorted(str(p.relative_to(home)) for p in (home / ".cache").rglob("*")) if (home / ".cache").exists() else []


def test_building_a_session_on_the_device_path_writes_no_telemetry(conv, tmp_path):
    assert _run_child("edge", conv, tmp_path) == []


def test_plain_onnxruntime_does_write_telemetry_so_the_check_above_can_fail(conv, tmp_path):
    written = _run_child("plain", conv, tmp_path)
    assert ".cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db" in written


def _ort_and_a_different_onnx(folder: Path) -> Path:
    """``m.ort`` made from the conv model, and beside it an ``m.onnx`` that is another model (x + y), so that the
    output says which file a session read."""
    from tests.unit.runtime_models import write_add

    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # portable, no NCHWc
    options.optimized_model_filepath = str(folder / "m.ort")
    options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(write_conv_relu(folder / "conv.onnx")), options, providers=["CPUExecutionProvider"])
    write_add(folder / "m.onnx")
    return folder / "m.ort"


def _reads_the_conv(session) -> bool:
    return [i.name for i in session.get_inputs()] == ["x"]


def test_an_ort_file_loads_from_its_onnx_where_the_cpu_needs_the_int8_option(tmp_path, monkeypatch):
    """session.x64quantprecision works by a graph transformer an ORT-format file never runs (module docstring):
    on a CPU that needs it, the .onnx beside the .ort is read; elsewhere the .ort itself."""
    path = _ort_and_a_different_onnx(tmp_path)
    monkeypatch.setattr(ort_session, "int8_session_config", lambda: ())  # a VNNI x86 or an ARM core
    assert _reads_the_conv(build_session(path, 1))
    monkeypatch.setattr(ort_session, "int8_session_config", lambda: (("session.x64quantprecision", "1"),))
    session = build_session(path, 1)
    assert not _reads_the_conv(session)  # the x + y model: m.onnx
    assert session.get_session_options().get_session_config_entry("session.x64quantprecision") == "1"
    assert _reads_the_conv(build_session(path, 1, precise_int8=False))  # measuring the saturating kernels
    (tmp_path / "m.onnx").unlink()
    assert _reads_the_conv(build_session(path, 1))  # no .onnx beside it: the .ort as it is
