"""The language model's part of the golden set (issue 16): a face + slm bundle built with the real SmolLM2
conversion carries prompts and the greedy tokens its own model gave; the acceptance check reproduces them and
refuses a golden set the model does not reproduce."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edge.errors import ValidationError
from edge.update.golden import GOLDEN_JSON, check_golden

pytestmark = pytest.mark.integration


def _copy_stage(kind, source: Path, slm_build=None):
    """A stage that ships ``source`` as built: the face models as the fp32 build they are, the language model
    with its own build's record (``slm_result``: its precision, quantization and gate)."""
    from converters.package.stages import ModelStage, StageContext, StageResult, slm_result

    def run(ctx: StageContext) -> StageResult:
        shutil.copytree(source, ctx.out_dir, dirs_exist_ok=True)
        if slm_build is not None:
            return slm_result(slm_build, ctx.out_dir)
        files = tuple(sorted(p.name for p in ctx.out_dir.iterdir()))
        return StageResult(kind, ctx.precision.value, "onnx", files, (), {}, {})

    return ModelStage(kind, lambda: (), (), run)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, face_fp32_models: Path, slm_int4: dict) -> Path:
    from converters.package import bundle as package
    from converters.package.bundle import BuildOptions, build_bundle
    from converters.package.stages import ModelKind
    from edge.profiles import Precision, load_profile

    root = tmp_path_factory.mktemp("update-text")
    saved = dict(package.STAGES)
    package.STAGES[ModelKind.FACE] = _copy_stage(ModelKind.FACE, face_fp32_models)
    package.STAGES[ModelKind.SLM] = _copy_stage(ModelKind.SLM, slm_int4["result"].out_dir, slm_int4["result"])
    try:
        opts = BuildOptions(precision=Precision.FP32, wheels=False, archive=False)
        return build_bundle(load_profile("rpi4"), ["all"], root, root / "cache", options=opts).folder
    finally:
        package.STAGES.update(saved)


def test_the_manifest_names_each_model_at_the_precision_it_was_built(bundle: Path) -> None:
    """The language model is the session's rpi4 INT4 build: the bundle says INT4, as its own build did."""
    models = {m["kind"]: m for m in json.loads((bundle / "manifest.json").read_text())["models"]}
    assert (models["face"]["precision"], models["face"]["quantization"]) == ("fp32", {})
    slm = models["slm"]
    assert (slm["precision"], slm["quantization"].get("method"), slm["metrics"].get("passed")) == (
        "int4",
        "gguf_grid",
        True,
    )
    assert json.loads((bundle / "models" / "slm" / "report.json").read_text())["precision"] == "int4"


def test_the_bundle_carries_prompts_and_greedy_tokens_and_the_device_reproduces_them(bundle: Path) -> None:
    text = json.loads((bundle / GOLDEN_JSON).read_text())["text"]
    assert text["folder"] == "models/slm" and len(text["prompts"]) == 2 and text["max_new_tokens"] == 8
    assert all(len(t) >= 1 for t in text["tokens"])
    result = check_golden(bundle, threads=2, max_latency_ms=60_000, bench_runs=2)
    assert result.text_prompts == 2 and result.count == 4


def test_tokens_the_model_does_not_give_fail_the_check(bundle: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(bundle, tmp_path / "b")
    body = json.loads((copy / GOLDEN_JSON).read_text())
    expected = body["text"]["tokens"][1]
    assert len(expected) >= 3, expected
    body["text"]["tokens"][1] = [*expected[:2], expected[2] + 1, *expected[3:]]
    (copy / GOLDEN_JSON).write_text(json.dumps(body))
    with pytest.raises(ValidationError) as err:
        check_golden(copy, threads=2, max_latency_ms=60_000, bench_runs=2)
    assert str(err.value) == (
        f"{copy}: golden prompt 1 ('Name three primary colours.'): greedy token 2 is {expected[2]}, the build's was "
        f"{expected[2] + 1} ({len(expected)} vs {len(expected)} tokens)"
    )
