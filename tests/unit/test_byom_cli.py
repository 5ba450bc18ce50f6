"""``edge-deploy convert model`` in-process: --help, --json, exit codes and the errors users see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_deploy.cli import main
from tests.unit.byom_models import write_embedder_files


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = write_embedder_files(tmp_path_factory.mktemp("byom-cli"))
    return d


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["convert", "model", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "\n  edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz" in out
    for flag in ("--input", "--task", "--min-cosine", "--min-rank-agreement", "--min-top1", "--max-rel-error"):
        assert flag in out
    # the defaults shown are the profile's keys and their shipped values
    assert "least mean cosine (default: the profile's thresholds.model_min_cosine, 0.99)" in " ".join(out.split())


def test_top_level_help_shows_the_byom_path(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "edge-deploy convert model net.onnx --target rpi4" in capsys.readouterr().out


def _argv(files: Path, out: Path, *extra: str) -> list[str]:
    return [
        "convert", "model", str(files / "emb.onnx"), "--target", "rpi4", "--precision", "int8",
        "--calib", str(files / "calib.npz"), "--eval", str(files / "eval.npz"), "--task", "embedding",
        "--input", "x=2x3x16x16", "-o", str(out), *extra,
    ]  # fmt: skip


def test_json_prints_the_record(files, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_argv(files, out, "--json")) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["passed"] is True and record["precision"] == "int8" and record["target"] == "rpi4"
    assert record["shipped"] == "emb.int8.ort" and record["inputs"][0]["shape"] == [2, 3, 16, 16]
    assert record["gate"]["figures"]["embedding"]["samples"] == 32
    assert json.loads((out / "report.json").read_text())["gate"] == record["gate"]


def test_gate_failure_exits_5(files, tmp_path, capsys):
    argv = _argv(files, tmp_path / "bad", "--json")  # --json: no progress lines on stderr
    argv[argv.index(str(files / "calib.npz"))] = str(files / "const.npz")
    assert main(argv) == 5
    printed = capsys.readouterr()
    err = printed.err
    assert err.startswith(f"Error: {files / 'emb.onnx'}: int8 model for rpi4 failed the embedding gate (")
    assert (
        "\n  embedding: mean cosine to the source " in err
        and "< rpi4.toml thresholds.model_min_cosine 0.99 (32 samples; min " in err
    )
    assert printed.out == ""
    assert sorted(p.name for p in (tmp_path / "bad").iterdir())[-2:] == ["report.json", "report.md"]


def test_bad_input_exits_3_and_writes_nothing(files, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(files, out)
    argv[argv.index("x=2x3x16x16")] = "y=2x3x16x16"
    assert main(argv) == 3
    assert capsys.readouterr().err == f"Error: --input y: {files / 'emb.onnx'} has no input 'y'; its inputs are x\n"
    assert list(tmp_path.iterdir()) == []


def test_bad_input_syntax_exits_3(files, tmp_path, capsys):
    argv = _argv(files, tmp_path / "out")
    argv[argv.index("x=2x3x16x16")] = "x:2x3x16x16"
    assert main(argv) == 3
    assert capsys.readouterr().err == (
        "Error: --input 'x:2x3x16x16': expected NAME=DIMxDIM... with positive whole dimensions, e.g. "
        "input=1x3x224x224\n"
    )


def test_the_profile_sets_the_gate_and_a_flag_overrides_it(files, tmp_path, capsys):
    """``[thresholds] model_*`` of the target profile are the gate's defaults; each flag overrides its key."""
    import shutil

    from edge.profiles import DEFAULT_PROFILE_DIR

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    text = (DEFAULT_PROFILE_DIR / "rpi4.toml").read_text()
    (profiles / "rpi4.toml").write_text(text.replace("model_min_cosine = 0.99\n", "model_min_cosine = 0.999999\n"))
    argv = _argv(files, tmp_path / "strict", "--json", "--profiles", str(profiles))
    assert main(argv) == 5
    assert "< rpi4.toml thresholds.model_min_cosine 0.999999 (32 samples" in capsys.readouterr().err
    record = json.loads((tmp_path / "strict" / "report.json").read_text())["gate"]["thresholds"]
    assert (
        record["min_cosine"] == 0.999999 and record["given_by"]["min_cosine"] == "rpi4.toml thresholds.model_min_cosine"
    )
    argv = _argv(files, tmp_path / "flag", "--json", "--profiles", str(profiles), "--min-cosine", "0.99")
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)["gate"]["thresholds"]
    assert record["min_cosine"] == 0.99 and record["given_by"]["min_cosine"] == "--min-cosine"
    shutil.rmtree(profiles)
