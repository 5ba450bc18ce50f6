"""The CLI in-process: output, --json, and the errors users see."""

from __future__ import annotations

import json

import pytest

from edge_deploy.cli import main


def test_targets_table(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["target", "cpu", "arch"]
    assert any(line.startswith("rpi5") and "dotprod" in line for line in out.splitlines())


def test_targets_json_is_parseable(capsys):
    assert main(["targets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["name"] for d in data} >= {"rpi4", "rpi5", "browser-wasm"}


def test_targets_show_json(capsys):
    assert main(["targets", "show", "rpi4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cpu"]["model"] == "Cortex-A72"
    assert data["cpu"]["isa_features"] == ["neon"]


def test_unknown_target_is_a_clear_error(capsys):
    assert main(["targets", "show", "rpi9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: unknown target 'rpi9'; expected one of aarch64-generic")


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "edge-deploy convert face --target rpi4" in out


def test_help_lists_every_exit_code(capsys):
    from edge import errors

    codes = {errors.EdgeDeployError.exit_code}
    codes |= {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.EdgeDeployError)
    }
    assert codes == set(range(1, 10))
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = " ".join(capsys.readouterr().out.split()).split("Exit codes: ")[1]
    assert [int(item.split()[0]) for item in listed.split(", ")] == [0, *sorted(codes), 130]


# --- issue 17, defect 8: tracebacks (or a hang) instead of one-line errors -----------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "m.onnx", "--min-duration", "nan"], "Error: --min-duration nan; expected seconds in 0..86400\n"),
        (["bench", "m.onnx", "--min-duration", "inf"], "Error: --min-duration inf; expected seconds in 0..86400\n"),
        (
            ["bench", "m.onnx", "--count", str(10**12)],
            "Error: --count 1000000000000; expected a whole number in 1..1000000\n",
        ),
        (
            ["bench", "m.onnx", "--shape", "input=1x3x100000x100000"],
            "Error: --shape input=1x3x100000x100000: 30000000000 elements; expected at most 268435456 (1 GiB of float32)\n",
        ),
        (
            ["face", "enroll", "models", "photos", "-o", "TMP"],
            "Error: --output TMP: is a folder; expected a gallery file to write, e.g. TMP/gallery.npz\n",
        ),
        (
            ["face", "enroll", "models", "photos", "-o", "TMP/g.npz", "--threads", "100000"],
            "Error: --threads 100000; expected a whole number in 1..256\n",
        ),
        (
            ["face", "recognize", "models", "a.jpg", "-g", "g.npz", "--threshold", "nan"],
            "Error: --threshold nan; expected a descriptor distance in (0, 2]\n",
        ),
        (
            ["face", "recognize", "models", "a.jpg", "-g", "g.npz", "--threshold", "-1"],
            "Error: --threshold -1.0; expected a descriptor distance in (0, 2]\n",
        ),
        (
            ["face", "recognize", "models", "a.jpg", "-g", "g.npz", "--min-score", "5"],
            "Error: --min-score 5.0; expected a detection score in [0, 1]\n",
        ),
    ],
)
def test_hostile_options_are_one_line_errors(tmp_path, capsys, argv, message):
    argv = [a.replace("TMP", str(tmp_path)) for a in argv]
    assert main(argv) == 3
    assert capsys.readouterr().err == message.replace("TMP", str(tmp_path))


def test_a_deeply_nested_manifest_is_a_one_line_error(tmp_path, capsys):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["verify", str(bundle)]) == 6
    assert (
        capsys.readouterr().err
        == f"Error: {bundle / 'manifest.json'}: nested 100000 levels deep; expected at most 32\n"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--precision", "fp16", "--format", "both"],
            "Error: --format both with --precision fp16: the TFLite twins are fp32 and full-integer INT8; use "
            "--precision fp32 or int8, or --format onnx\n",
        ),
        (
            ["--precision", "int8", "--dynamic", "--format", "tflite"],
            "Error: --format tflite with --dynamic: the INT8 TFLite twin is full-integer, calibrated; drop "
            "--dynamic or use --format onnx\n",
        ),
    ],
)
def test_convert_face_format_that_cannot_be_built_fails_before_any_work(tmp_path, capsys, extra, message):
    out = tmp_path / "face"
    assert main(["convert", "face", "--target", "rpi4", "-o", str(out), *extra]) == 3
    assert capsys.readouterr().err == message
    assert not out.exists()


def test_build_with_tflite_twins_at_fp16_fails_before_any_stage(tmp_path, capsys):
    argv = ["build", "--target", "rpi4", "--model", "face", "--precision", "fp16", "--format", "both"]
    assert main([*argv, "-o", str(tmp_path / "dist"), "--cache", str(tmp_path / "cache"), "--no-wheels"]) == 3
    assert capsys.readouterr().err == (
        "Error: --format both with --precision fp16: the TFLite twins are fp32 and full-integer INT8; use "
        "--precision fp32 or int8, or --format onnx\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []
