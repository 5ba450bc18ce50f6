"""``edge-deploy emulate`` in-process: --help, the verdict, and the refusals that come before any guest runs.

The runs themselves (both Pi cores, --count) are in tests/integration/test_byom_arm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from converters.arm.model import OutputComparison
from edge_deploy.cli import main
from edge_deploy.emulate_command import output_problems


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["emulate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "edge-deploy emulate out/net --cpu cortex-a72 --cpu cortex-a76 --count --json" in out
    assert "scripts/arm/rootfs.sh" in out and "(default 0.03)" in out


def test_top_level_help_lists_it(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "emulate" in out and "edge-deploy emulate out/net --cpu cortex-a72 --cpu cortex-a76 --count" in out


def test_the_verdict_is_relative_to_the_host_output_and_checks_each_row():
    same = OutputComparison("emb", (4, 32), 0.0, 0.9, 1.0)
    close = OutputComparison("emb", (4, 32), 0.02, 0.9, 0.9995)
    far = OutputComparison("emb", (4, 32), 0.05, 0.9, 0.9995)
    turned = OutputComparison("logits", (1, 10), 0.001, 0.9, 0.99)
    assert output_problems("cortex-a72", [same, close], 0.03) == []
    assert output_problems("cortex-a72", [far, turned], 0.03) == [
        "cortex-a72 output emb: max |difference| 0.05 (host's largest |value| 0.9, tolerance 0.03 of it), "
        "smallest row cosine 0.999500 (expected >= 0.999)",
        "cortex-a72 output logits: max |difference| 0.001 (host's largest |value| 0.9, tolerance 0.03 of it), "
        "smallest row cosine 0.990000 (expected >= 0.999)",
    ]


def _folder(tmp_path: Path, models: dict) -> Path:
    folder = tmp_path / "net"
    folder.mkdir()
    (folder / "models.json").write_text(json.dumps(models))
    return folder


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cpu", "cortex-a99"], "Error: --cpu 'cortex-a99'; expected one of cortex-a53, cortex-a72, cortex-a76\n"),
        (["--tolerance", "0"], "Error: --tolerance 0.0; expected a share of the output's magnitude in (0, 1)\n"),
        (
            ["--count"],
            "Error: --count with TMP/net: counts of a face folder come from benchmarks/arm_frame.py (per frame) "
            "and benchmarks/arm_cost.py (per model); emulate counts a convert model folder\n",
        ),
    ],
)
def test_bad_options_are_one_line_errors_before_any_guest_runs(tmp_path, capsys, extra, message):
    folder = _folder(tmp_path, {"target": "rpi4", "models": [{"role": "embedder", "file": "e.onnx"}]})
    assert main(["emulate", str(folder), *extra]) == 3
    assert capsys.readouterr().err == message.replace("TMP", str(tmp_path))


def test_a_folder_without_models_json_is_refused(tmp_path, capsys):
    assert main(["emulate", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err == f"Error: {tmp_path}: no models.json; expected a folder 'convert model' or 'convert face' wrote\n"


def test_an_x86_folder_needs_a_core_named(tmp_path, capsys):
    from testsupport.byom_models import write_embedder_files

    d = write_embedder_files(tmp_path)
    argv = ["convert", "model", str(d / "emb.onnx"), "--target", "x86_64-host", "--precision", "fp32",
            "--eval", str(d / "eval.npz"), "--task", "embedding", "--input", "x=4x3x16x16", "-o", str(d / "net"),
            "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["emulate", str(d / "net")]) == 3
    assert capsys.readouterr().err == (
        f"Error: {d / 'net'}: converted for x86_64-host, whose core x86-64-v3 is not one emulate runs; give "
        "--cpu cortex-a53 or cortex-a72 or cortex-a76\n"
    )
