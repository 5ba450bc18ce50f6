"""converters.package.bundle / converters.package.wheelhouse / install.sh: the parts that need no models and no network."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from converters.package.bundle import _prepare_folder, build_bundle, model_kinds
from converters.package.wheelhouse import (
    WheelhouseSpec,
    _check_platform_tags,
    aarch64_platforms,
    device_requirements,
)
from edge.errors import BundleError
from edge.profiles import load_profile

INSTALL_SH = Path(__file__).resolve().parents[2] / "edge" / "bundle_files" / "install.sh"


def test_model_kinds() -> None:
    assert model_kinds(["all"]) == ["face", "slm"]
    assert model_kinds(["slm", "face", "slm"]) == ["face", "slm"]
    assert model_kinds(["face"]) == ["face"]
    with pytest.raises(BundleError) as err:
        model_kinds(["asr"])
    assert str(err.value) == "model 'asr'; expected one of face, slm, all"


def test_every_manylinux_tag_up_to_bookworms_glibc() -> None:
    tags = aarch64_platforms()
    assert tags[0] == "manylinux2014_aarch64"
    assert tags[1:] == tuple(f"manylinux_2_{m}_aarch64" for m in range(17, 37))
    args = WheelhouseSpec(("numpy>=1.26",)).target_args()
    assert args.count("--platform") == 21 and args.count("--abi") == 3
    assert args[:5] == ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]


def test_wheel_cache_key_follows_requirements_and_platform() -> None:
    a = WheelhouseSpec(("numpy>=1.26", "paho-mqtt>=2.1,<3"))
    assert a.key() == WheelhouseSpec(("paho-mqtt>=2.1,<3", "numpy>=1.26")).key()
    assert a.key() != WheelhouseSpec(("numpy>=1.26",)).key()
    assert a.key() != WheelhouseSpec(a.requirements, platforms=aarch64_platforms(28)).key()


def test_device_requirements_come_from_pyproject(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["numpy>=1.26"]\n[project.optional-dependencies]\ndevice = ["paho-mqtt>=2.1,<3"]\n'
    )
    assert device_requirements(["face"], pyproject) == ("numpy>=1.26", "paho-mqtt>=2.1,<3")
    assert device_requirements(["face", "slm"], pyproject)[-1] == "tokenizers>=0.20"
    pyproject.write_text("[project]\ndependencies = []\n")
    with pytest.raises(BundleError) as err:
        device_requirements(["face"], pyproject)
    assert str(err.value) == (
        f"{pyproject}: cannot read [project] dependencies and optional-dependencies.device ('optional-dependencies')"
    )


def test_host_wheels_are_refused(tmp_path: Path) -> None:
    (tmp_path / "paho_mqtt-2.2.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl").write_bytes(b"")
    _check_platform_tags(tmp_path)
    bad = tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    bad.write_bytes(b"")
    with pytest.raises(BundleError) as err:
        _check_platform_tags(tmp_path)
    assert str(err.value) == (
        f"{bad}: platform tag 'manylinux_2_27_x86_64.manylinux_2_28_x86_64'; expected an aarch64 manylinux tag or 'any'"
    )


def test_build_refuses_a_non_arm_target(tmp_path: Path) -> None:
    profile = load_profile("x86_64-host")
    with pytest.raises(BundleError) as err:
        build_bundle(profile, ["face"], tmp_path, tmp_path / "cache")
    assert str(err.value) == (
        f"{profile.source}: cpu.arch = 'x86_64'; 'edge-deploy build' makes bundles for aarch64 boards "
        "(rpi4, rpi5, rpi-zero-2w, aarch64-generic)"
    )


def test_build_never_deletes_a_folder_that_is_not_a_bundle(tmp_path: Path) -> None:
    folder = tmp_path / "rpi4-face"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    with pytest.raises(BundleError) as err:
        _prepare_folder(folder)
    assert str(err.value) == f"{folder}: exists and is not a bundle (no manifest.json); remove it or pick -o"
    assert (folder / "thesis.tex").is_file()


def _install(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(INSTALL_SH), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefix", "relative/dir"], "install.sh: error: --prefix 'relative/dir': expected an absolute path"),
        (["--prefix"], "install.sh: error: --prefix needs a folder"),
        (["--bogus"], "install.sh: error: unknown option '--bogus' (see --help)"),
        (
            ["--prefix", "/tmp/x", "--enable"],
            "install.sh: error: --enable starts the system service; it cannot be combined with --prefix",
        ),
    ],
)
def test_install_sh_argument_errors(args: list[str], message: str) -> None:
    done = _install(*args)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def test_install_sh_help() -> None:
    done = _install("--help")
    assert done.returncode == 0
    assert "Install an edge-deploy bundle on a Raspberry Pi" in done.stdout
    assert "options: --prefix DIR  --enable  --dry-run  --python PYTHON  --trust PUBKEY (repeatable)  --help" in done.stdout
    assert "--trust release.pub" in done.stdout


def test_install_sh_outside_a_bundle_says_so(tmp_path: Path) -> None:
    copy = tmp_path / "install.sh"
    copy.write_bytes(INSTALL_SH.read_bytes())
    done = subprocess.run(["sh", str(copy), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"install.sh: error: {tmp_path}/manifest.json: not found; run install.sh from an extracted bundle"
    )


def test_stage_code_is_the_import_closure() -> None:
    from converters.package.stages import STAGES

    repo = INSTALL_SH.parents[2]
    face = {p.relative_to(repo).as_posix() for p in STAGES["face"].code_files()}
    slm = {p.relative_to(repo).as_posix() for p in STAGES["slm"].code_files()}
    assert {
        "converters/face/build.py",
        "converters/face/mtcnn.py",
        "edge/face/embed.py",
        "converters/package/stages.py",
    } <= face
    assert {"converters/slm/build.py", "converters/slm/export.py", "converters/package/stages.py"} <= slm
    # Building bundles and the other model kind do not change a stage's output.
    for path in ("converters/package/bundle.py", "converters/package/wheelhouse.py", "converters/slm/build.py"):
        assert path not in face
    assert "converters/face/build.py" not in slm


def _counting_stage(calls: list[str], fail: bool = False):
    """A tiny stage (writes one text file) under the face kind, to test the cache mechanics, not a model."""
    from converters.package.stages import ModelKind, ModelStage, StageContext, StageResult
    from edge.errors import ValidationError

    def run(ctx: StageContext) -> StageResult:
        calls.append(ctx.precision.value)
        if ctx.precision.value != "fp32":
            base = (ctx.fp32_folder() / "weights.txt").read_text()
            (ctx.out_dir / "weights.txt").write_text(base + " quantized")
        else:
            (ctx.out_dir / "weights.txt").write_text("fp32 weights")
        ctx.progress(f"wrote {ctx.out_dir / 'weights.txt'}")
        (ctx.work_dir / "report.md").write_text("why it failed")
        if fail:
            raise ValidationError("gate missed")
        return StageResult(ModelKind.FACE, ctx.precision.value, "txt", ("weights.txt",), (), {}, {"passed": True})

    return ModelStage(ModelKind.FACE, lambda: (), (), run)


def test_stage_cache_hits_and_fp32_reuse(tmp_path: Path) -> None:
    from converters.package.bundle import run_stage
    from edge.profiles import Precision

    profile = load_profile("rpi4")
    calls: list[str] = []
    stage = _counting_stage(calls)
    folder, result, key, hit = run_stage(stage, profile, Precision.INT8, tmp_path, lambda _m: None)
    assert (hit, calls) == (False, ["int8", "fp32"])  # int8 asked for the fp32 stage, which was built
    assert (folder / "weights.txt").read_text() == "fp32 weights quantized"
    assert not (folder.parent / "work").exists() and result.precision == "int8"
    again = run_stage(stage, profile, Precision.INT8, tmp_path, lambda _m: None)
    fp32 = run_stage(stage, profile, Precision.FP32, tmp_path, lambda _m: None)
    assert (again[3], fp32[3], calls) == (True, True, ["int8", "fp32"])
    assert again[2] == key != fp32[2]


def test_the_paths_a_stage_prints_are_the_ones_that_exist_after_it(tmp_path: Path) -> None:
    from converters.package.bundle import run_stage
    from edge.profiles import Precision

    lines: list[str] = []
    folder = run_stage(_counting_stage([]), load_profile("rpi4"), Precision.FP32, tmp_path, lines.append)[0]
    (wrote,) = [line.removeprefix("wrote ") for line in lines if line.startswith("wrote ")]
    assert wrote == str(folder / "weights.txt")  # not the .partial folder the stage wrote in, renamed since
    assert Path(wrote).is_file()


def test_failed_stage_keeps_its_reports_and_is_not_cached(tmp_path: Path) -> None:
    from converters.package.bundle import run_stage
    from edge.errors import ValidationError
    from edge.profiles import Precision

    profile = load_profile("rpi4")
    calls: list[str] = []
    with pytest.raises(ValidationError):
        run_stage(_counting_stage(calls, fail=True), profile, Precision.FP32, tmp_path, lambda _m: None)
    (partial,) = (tmp_path / "stages").glob("rpi4-face-fp32-*.partial")
    assert (partial / "work" / "report.md").read_text() == "why it failed"
    assert [p.name for p in (tmp_path / "stages").iterdir()] == [partial.name]  # nothing cached
    folder = run_stage(_counting_stage(calls), profile, Precision.FP32, tmp_path, lambda _m: None)[0]
    assert calls == ["fp32", "fp32"]
    # The finished build replaced the failed one (older builds of a target/kind/precision are pruned).
    assert [p.name for p in (tmp_path / "stages").iterdir()] == [folder.parent.name]


# --- the language model's LiteRT twin in a bundle (build --format tflite|both, runtime.slm_formats) ---------


def _litert_venv_error(venv: Path) -> str:
    return (
        f"{venv}: no ready litert-torch environment (missing bin/python or .edge-deploy-setup); "
        "create it with: bash scripts/setup_litert_torch.sh"
    )


def _twin_profile(tmp_path: Path, formats: str):
    """rpi5 with ``runtime.slm_formats = formats`` (a copy in ``tmp_path``)."""
    from edge.profiles import load_profile_file

    source = Path(load_profile("rpi5").source)
    copy = tmp_path / "rpi5.toml"
    text = source.read_text(encoding="utf-8")
    assert 'slm_formats = "onnx"' in text
    copy.write_text(text.replace('slm_formats = "onnx"', f'slm_formats = "{formats}"'), encoding="utf-8")
    return load_profile_file(copy)


def test_build_refuses_a_twin_at_int4_before_any_work(tmp_path: Path) -> None:
    from converters.package.bundle import BuildOptions
    from edge.errors import ConversionError
    from edge.profiles import ModelFormats, Precision

    options = BuildOptions(precision=Precision.INT4, wheels=False, formats=ModelFormats.TFLITE)
    with pytest.raises(ConversionError) as err:
        build_bundle(load_profile("rpi5"), ["slm"], tmp_path / "dist", tmp_path / "cache", options=options)
    assert str(err.value) == (
        "--format tflite at int4: litert-torch offers no int4 recipe here; expected fp32 or int8 (ONNX is what "
        "int4 ships)"
    )
    assert not (tmp_path / "dist").exists() and not (tmp_path / "cache").exists()


def test_build_refuses_a_twin_without_the_litert_torch_venv_before_any_work(tmp_path: Path) -> None:
    from converters.package.bundle import BuildOptions
    from edge.errors import MissingDependencyError
    from edge.profiles import ModelFormats, Precision

    venv = tmp_path / "no-venv"
    options = BuildOptions(precision=Precision.INT8, wheels=False, formats=ModelFormats.BOTH, litert_venv=venv)
    with pytest.raises(MissingDependencyError) as err:
        build_bundle(load_profile("rpi5"), ["slm"], tmp_path / "dist", tmp_path / "cache", options=options)
    assert str(err.value) == _litert_venv_error(venv)
    assert not (tmp_path / "dist").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("model", ["slm", "all"])
def test_a_profile_asking_for_the_twin_is_refused_naming_its_key(tmp_path: Path, model: str) -> None:
    from converters.package.bundle import BuildOptions
    from edge.errors import ConversionError, MissingDependencyError
    from edge.profiles import Precision

    profile = _twin_profile(tmp_path, "tflite")
    options = BuildOptions(precision=Precision.INT4, wheels=False)
    with pytest.raises(ConversionError) as err:  # with --model all: before the face stage runs
        build_bundle(profile, [model], tmp_path / "dist", tmp_path / "cache", options=options)
    assert str(err.value) == (
        f"{profile.source}: runtime.slm_formats = 'tflite' at int4: litert-torch offers no int4 recipe here; "
        "expected fp32 or int8 (ONNX is what int4 ships)"
    )
    venv = tmp_path / "no-venv"
    options = BuildOptions(precision=Precision.FP32, wheels=False, litert_venv=venv)
    with pytest.raises(MissingDependencyError) as err:
        build_bundle(profile, [model], tmp_path / "dist", tmp_path / "cache", options=options)
    assert str(err.value) == _litert_venv_error(venv)
    assert not (tmp_path / "dist").exists() and not (tmp_path / "cache").exists()


def test_cli_build_names_the_int4_refusal(tmp_path: Path, capsys) -> None:
    from edge_deploy.cli import main

    argv = ["build", "--target", "rpi5", "--model", "slm", "--precision", "int4", "--format", "both",
            "--no-wheels", "-o", str(tmp_path / "dist"), "--cache", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 4
    assert capsys.readouterr().err.endswith(
        "Error: --format both at int4: litert-torch offers no int4 recipe here; expected fp32 or int8 (ONNX is "
        "what int4 ships)\n"
    )
    assert not (tmp_path / "dist").exists()


def test_each_kind_s_formats_come_from_format_or_the_profile(tmp_path: Path) -> None:
    from converters.package.bundle import stage_formats
    from converters.package.stages import ModelKind
    from edge.profiles import ModelFormats

    face, slm = ModelKind.FACE, ModelKind.SLM
    rpi5 = load_profile("rpi5")
    assert stage_formats(rpi5, [face, slm], None) == {face: ModelFormats.TFLITE, slm: ModelFormats.ONNX}
    assert stage_formats(rpi5, [slm], ModelFormats.BOTH) == {slm: ModelFormats.BOTH}
    twin = _twin_profile(tmp_path, "both")
    assert stage_formats(twin, [face, slm], None) == {face: ModelFormats.TFLITE, slm: ModelFormats.BOTH}
    assert stage_formats(twin, [face, slm], ModelFormats.ONNX) == {face: ModelFormats.ONNX, slm: ModelFormats.ONNX}


def test_the_slm_stage_asks_convert_slm_for_the_twin_the_formats_name(tmp_path: Path) -> None:
    from converters.package.stages import slm_twin
    from converters.slm.tflite import VENV
    from edge.profiles import ModelFormats

    assert slm_twin(ModelFormats.ONNX) is None
    tflite, both = slm_twin(ModelFormats.TFLITE), slm_twin(ModelFormats.BOTH, tmp_path)
    assert tflite is not None and both is not None
    assert (tflite.default, tflite.options.venv, tflite.options.kv_cache_max_len) == (True, VENV, 512)
    assert (both.default, both.options.venv) == (False, tmp_path)


def _twin_stage(kind, calls: list):
    from converters.package.stages import ModelStage, StageContext, StageResult

    def run(ctx: StageContext) -> StageResult:
        calls.append(ctx.formats)
        (ctx.out_dir / "model.txt").write_text(f"{ctx.formats.value}")
        return StageResult(kind, ctx.precision.value, "txt", ("model.txt",), (), {}, {"passed": True})

    return ModelStage(kind, lambda: (), (), run, (INSTALL_SH,))


def test_twin_builds_have_their_own_cache_key_and_folder(tmp_path: Path) -> None:
    from converters.package.bundle import run_stage
    from converters.package.stages import STAGES, ModelKind
    from converters.slm.tflite import EXPORT_SCRIPT
    from edge.profiles import ModelFormats, Precision

    assert STAGES[ModelKind.SLM].twin_code == (EXPORT_SCRIPT,)  # litert-torch's script keys a twin build
    assert EXPORT_SCRIPT in STAGES[ModelKind.SLM].code_files(tflite=True)
    assert EXPORT_SCRIPT not in STAGES[ModelKind.SLM].code_files()
    profile, calls = load_profile("rpi4"), []
    slm = _twin_stage(ModelKind.SLM, calls)
    built = {f: run_stage(slm, profile, Precision.FP32, tmp_path, lambda _m: None, f) for f in ModelFormats}
    assert len({b[2] for b in built.values()}) == 3 and calls == list(ModelFormats)
    names = {f: b[0].parent.name for f, b in built.items()}
    assert [names[f].rsplit("-", 1)[0] for f in ModelFormats] == [
        "rpi4-slm-fp32",
        "rpi4-slm-tflite-fp32",
        "rpi4-slm-both-fp32",
    ]
    assert (built[ModelFormats.BOTH][0] / "model.txt").read_text() == "both"
    # the face twins too: tflite makes the device run the embedder's (models.json embedder_runtime), both not
    calls.clear()
    face = _twin_stage(ModelKind.FACE, calls)
    first = run_stage(face, profile, Precision.FP32, tmp_path, lambda _m: None, ModelFormats.BOTH)
    again = run_stage(face, profile, Precision.FP32, tmp_path, lambda _m: None, ModelFormats.TFLITE)
    assert first[0].parent.name.startswith("rpi4-face-both-fp32-") and first[2] != again[2]
    assert again[0].parent.name.startswith("rpi4-face-tflite-fp32-") and not again[3]
    assert calls == [ModelFormats.BOTH, ModelFormats.TFLITE]


def test_the_language_model_takes_int4_where_the_profile_says_int8(tmp_path: Path) -> None:
    """A profile's int8 is for its CNNs: SmolLM2's 8-bit re-rounding misses the greedy gate (docs/slm.md), so
    build's slm stage, like convert slm, takes int4 unless --precision says otherwise."""
    from converters.package.bundle import BuildOptions, stage_precision
    from converters.package.stages import ModelKind
    from edge.errors import ConversionError
    from edge.profiles import ModelFormats, Precision

    rpi5 = load_profile("rpi5")
    assert rpi5.runtime.precision is Precision.INT8
    assert stage_precision(ModelKind.SLM, rpi5, None) is Precision.INT4
    assert stage_precision(ModelKind.FACE, rpi5, None) is Precision.INT8
    assert stage_precision(ModelKind.SLM, rpi5, Precision.INT8) is Precision.INT8
    assert stage_precision(ModelKind.SLM, load_profile("browser-wasm"), None) is Precision.FP32
    options = BuildOptions(wheels=False, formats=ModelFormats.TFLITE)  # no --precision: the twin meets int4
    with pytest.raises(ConversionError) as err:
        build_bundle(rpi5, ["slm"], tmp_path / "dist", tmp_path / "cache", options=options)
    assert str(err.value).startswith("--format tflite at int4: litert-torch offers no int4 recipe here")
