"""What ``convert slm`` writes into generation.json about its LiteRT twin: named only when it passed its gate.

The folder is a tiny llama GGUF written with gguf-py (``test_gguf_source.write_tiny_gguf``); the twins' gate
records are real ``DivergenceGate`` values, one passing and one failing, beside differing greedy answers (a report,
not the verdict).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.slm.agreement import GreedyAgreement, PromptAgreement
from converters.slm.build import TfliteBuild, _generation_spec
from converters.slm.chat_template import derive_chat_format
from converters.slm.divergence import Divergence, DivergenceGate, DivergenceLimits
from converters.slm.gguf_source import read_gguf, write_hf_folder
from converters.slm.report import _tflite_lines
from converters.slm.tflite import TfliteQuant
from edge.profiles import Precision
from tests.unit.test_gguf_source import write_tiny_gguf


def _twin(tmp_path: Path, passed: bool, default: bool = True) -> TfliteBuild:
    prompt = PromptAgreement("Hi", (7, 8, 9, 2), (7, 5, 5, 5), "a", "b", 1)
    kld = 1e-5 if passed else 0.5
    figures = Divergence(8175, 17, kld, kld, kld, 0.99, 10.0, 10.0)
    gate = DivergenceGate(figures, DivergenceLimits(0.0054, 0.040, 0.958, 1.0042), "LiteRT")
    return TfliteBuild(tmp_path / "model_none.tflite", TfliteQuant.NONE, 123, gate, GreedyAgreement((prompt,), 4),
                       default)  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    work = tmp_path_factory.mktemp("gen")
    write_tiny_gguf(work / "tiny.gguf")
    hf = write_hf_folder(read_gguf(work / "tiny.gguf"), work / "hf")
    return hf, derive_chat_format(hf.tokenizer.chat_template)


def test_a_passed_twin_is_named_and_a_failed_one_is_not(folder, tmp_path) -> None:
    hf, chat = folder
    plain = _generation_spec(hf, chat, Precision.FP32, None).to_dict()
    assert "runtime" not in plain and "litert_file" not in plain
    passed = _generation_spec(hf, chat, Precision.FP32, _twin(tmp_path, passed=True)).to_dict()
    assert (passed["runtime"], passed["litert_file"]) == ("litert", "model_none.tflite")
    both = _generation_spec(hf, chat, Precision.FP32, _twin(tmp_path, passed=True, default=False)).to_dict()
    assert (both["runtime"], both["litert_file"]) == ("onnxruntime", "model_none.tflite")
    failed = _generation_spec(hf, chat, Precision.FP32, _twin(tmp_path, passed=False)).to_dict()
    assert failed == plain


def test_the_report_says_where_the_twin_runs(tmp_path) -> None:
    assert _tflite_lines(_twin(tmp_path, passed=True).to_dict())[0] == (
        "LiteRT twin `model_none.tflite` (none, 123 bytes), the device's default (generation.json runtime = litert)."
    )
    assert _tflite_lines(_twin(tmp_path, passed=False).to_dict())[0] == (
        "LiteRT twin `model_none.tflite` (none, 123 bytes), not named in generation.json (it failed its gate; "
        "the device runs the ONNX)."
    )


def test_the_level_4_count_is_written_when_there_is_one(folder) -> None:
    hf, chat = folder
    assert "int8_activation_matmuls" not in _generation_spec(hf, chat, Precision.INT4, None).to_dict()
    assert _generation_spec(hf, chat, Precision.INT4, None, 61).to_dict()["int8_activation_matmuls"] == 61
