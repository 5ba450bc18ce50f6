"""The CLI in-process: output, --json, and the errors users see."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edge.errors import ProfileError, UsageError
from edge_deploy.cli import main

REPO = Path(__file__).resolve().parents[2]


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
    assert main(["targets", "show", "rpi9"]) == ProfileError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("Error: unknown target 'rpi9'; expected one of aarch64-generic")


def test_an_unknown_target_gets_a_did_you_mean(capsys):
    assert main(["convert", "face", "--target", "rpi-4", "-o", "out/x"]) == ProfileError.exit_code
    assert capsys.readouterr().err.endswith("(profiles in firmware_configs); did you mean 'rpi4'?\n")


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
    assert codes == set(range(1, 11))
    kinds = [c for c in vars(errors).values() if isinstance(c, type) and errors.EdgeDeployError in c.__bases__]
    assert len({c.exit_code for c in kinds}) == len(kinds)  # a subclass (MissingExtraError) refines its parent's
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = " ".join(capsys.readouterr().out.split()).split("Exit codes: ")[1]
    assert [int(item.split()[0]) for item in listed.split(", ")] == [0, *sorted(codes), 130]


# --- issue 45: help without arguments, "did you mean", a usage error's own exit code -------------------------


def test_no_arguments_prints_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: edge-deploy ") and "Exit codes: " in out


@pytest.mark.parametrize(
    ("group", "choices"),
    [("convert", ["face", "blazeface", "slm", "model"]), ("face", ["enroll", "recognize"]),
     ("fleet", ["provision", "revoke", "rollout"])],
)  # fmt: skip
def test_a_group_alone_prints_its_help(capsys, group, choices):
    assert main([group]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: edge-deploy {group} ")
    section = out.split("\npositional arguments:\n")[1].split("\n\n")[0]
    assert re.findall(r"^ {4}(\S+)", section, re.M) == choices, out


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["convrt", "face"], "edge-deploy: error: argument COMMAND: invalid choice: 'convrt'; did you mean 'convert'?"),
        (
            ["convert", "fase"],
            "edge-deploy convert: error: argument MODEL: invalid choice: 'fase'; did you mean 'face'?",
        ),
        (
            ["convert", "face", "--target", "rpi4", "-o", "out/x", "--precision", "int4"],
            "edge-deploy convert face: error: argument --precision: invalid choice: 'int4'; did you mean 'int8'?",
        ),
        (
            ["face", "recognize", "m", "a.jpg", "--galery", "g.npz"],
            "edge-deploy face recognize: error: unrecognized arguments: --galery g.npz; did you mean --gallery?",
        ),
        (
            ["targets", "--jsn"],
            "edge-deploy targets: error: unrecognized arguments: --jsn; did you mean --json?",
        ),
        (["targets", "show", "rpi4", "extra"], "edge-deploy targets: error: unrecognized arguments: extra"),
        (
            ["--target", "rpi-4"],
            "edge-deploy: error: --target goes after the command; the commands that take it: convert face, "
            "convert slm, convert model, demo, build, bench",
        ),
        (
            ["convert", "--target", "rpi4", "face"],
            "edge-deploy convert: error: --target goes after the command; the commands that take it: face, slm, model",
        ),
        (["--verson"], "edge-deploy: error: unrecognized arguments: --verson; did you mean --version?"),
        (["convert", "face", "-o", "out/x"], "edge-deploy convert face: error: the following arguments are required"),
    ],
)
def test_usage_errors_have_their_own_exit_code_and_suggest(capsys, argv, error):
    assert main(argv) == UsageError.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: edge-deploy")
    assert f"\n{error}" in err, err
    assert err.endswith(f"\n(examples: {error.split(': error: ')[0]} --help)\n")
    assert "required" not in err or "required" in error


def test_choices_are_listed_after_the_suggestion(capsys):
    assert main(["targets", "lst"]) == 2
    assert "invalid choice: 'lst'; did you mean 'list'? (choose from 'list', 'show')" in capsys.readouterr().err


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


# --- issue 45: a command whose pip extra is missing names it (exit 9) ---------------------------------------

#: Run the CLI with some modules unimportable: a finder ahead of every other raises the error a missing package
#: raises, so the command's real imports fail as they would in a venv without that extra.
WITHOUT = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in sys.argv[1].split(","):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Missing())
from edge_deploy.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("missing", "argv", "extra", "command"),
    [
        ("torch", ["convert", "face", "--target", "rpi4", "-o", "TMP/out"], "convert", "edge-deploy convert face"),
        ("cv2", ["demo", "-o", "TMP/out"], "convert", "edge-deploy demo"),
        ("cv2", ["face", "enroll", "TMP/models", "TMP", "-o", "TMP/out/g.npz"], "device", "edge-deploy face enroll"),
        ("onnxruntime", ["bench", "TMP/m.onnx"], "device", "The ONNX Runtime backend"),
        (
            "psycopg",
            ["monitor", "--store", "postgresql://edge@127.0.0.1:1/fleet", "--web", "127.0.0.1:0"],
            "fleet",
            "the PostgreSQL fleet store",
        ),
    ],
)
def test_a_missing_extra_is_named_with_its_pip_command(tmp_path, missing, argv, extra, command):
    from edge.errors import MissingExtraError

    (tmp_path / "m.onnx").write_bytes(_tiny_onnx())
    argv = [a.replace("TMP", str(tmp_path)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT, missing, *argv], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert (done.returncode, done.stderr) == (
        MissingExtraError.exit_code,
        f"Error: {command} needs the Python module '{missing}' (No module named '{missing}'); install it with: "
        f"pip install 'edge-deploy[{extra}]'\n",
    )
    assert not (tmp_path / "out").exists()


def _tiny_onnx() -> bytes:
    """An ONNX model file (Identity on a 1x4 float input), written with the onnx package."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_import_of_our_own_code_that_fails_is_not_blamed_on_an_extra(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT, "converters", "convert", "face", "--target", "rpi4", "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.endswith("ModuleNotFoundError: No module named 'converters'\n")


def test_a_host_command_looks_for_its_extra_before_it_starts(monkeypatch):
    from edge.errors import MissingExtraError
    from edge_deploy import common

    monkeypatch.setitem(common.EXTRA_FIRST, "convert", ("onnx", "no_such_module_45"))
    with pytest.raises(MissingExtraError) as err:
        common.check_extra("edge-deploy convert face", "convert")
    assert (err.value.extra, err.value.module) == ("convert", "no_such_module_45")
    assert str(err.value) == (
        "edge-deploy convert face needs the Python module 'no_such_module_45' (No module named 'no_such_module_45'); "
        "install it with: pip install 'edge-deploy[convert]'"
    )


def test_the_extras_table_names_what_pyproject_puts_in_each_extra():
    """``EXTRA_MODULES`` (import names) lists exactly the distributions of each extra in pyproject.toml."""
    import importlib.metadata
    import tomllib

    from edge_deploy.common import EXTRA_MODULES

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    dists = importlib.metadata.packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        declared = {norm(re.match(r"[\w.-]+", req)[0]) for req in extras[extra]} - {"edge-deploy"}  # type: ignore[index]
        declared -= {"numpy"}  # the base install's (project.dependencies), whichever list names it here
        assert {norm(d) for m in modules for d in dists[m]} == declared, extra


def test_json_output_prints_a_distance_that_is_not_finite_as_null(capsys):
    from edge_deploy.common import print_json

    print_json({"faces": [{"name": "unknown", "distance": float("inf")}, {"distance": 0.25}], "x": (float("nan"),)})
    assert json.loads(capsys.readouterr().out) == {"faces": [{"name": "unknown", "distance": None}, {"distance": 0.25}], "x": [None]}
