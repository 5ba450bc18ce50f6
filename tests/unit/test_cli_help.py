"""Every command's --help: a short description and examples that parse; output files and folders on failure.

The examples are read from the epilogs the parser prints, so an example that stops parsing fails here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge.daemon.config import EXAMPLE_CONFIG
from edge.errors import InputError, ProfileError, UsageError
from edge_deploy.cli import build_parser, main
from testsupport.byom_models import write_embedder_files, write_npz

MAX_DESCRIPTION_WORDS = 60


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command path, parser)`` for the top level and every subcommand under it."""
    yield " ".join(("edge-deploy", *path)), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def examples(epilog: str | None) -> list[str]:
    """The ``edge-deploy ...`` lines of an epilog, a line ending in ``\\`` joined with the next."""
    lines, joined = [], ""
    for line in (epilog or "").splitlines():
        joined += line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip() + " "
            continue
        if joined.startswith("edge-deploy "):
            lines.append(joined)
        joined = ""
    return lines


COMMANDS = list(_commands(build_parser()))


def test_the_walk_sees_every_command():
    names = {name for name, _ in COMMANDS}
    assert len(names) >= 25
    assert {"edge-deploy targets", "edge-deploy convert model", "edge-deploy fleet revoke", "edge-deploy serve-web",
            "edge-deploy face recognize", "edge-deploy command"} <= names  # fmt: skip


@pytest.mark.parametrize(("name", "parser"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_has_a_short_description_and_an_example(name, parser):
    words = len((parser.description or "").split())
    assert 0 < words <= MAX_DESCRIPTION_WORDS, f"{name}: description of {words} words"
    found = examples(parser.epilog)
    assert found, f"{name}: no example in its --help"
    assert all(line.startswith(name + " ") or line == name for line in found), found


EXAMPLES = [(name, line) for name, parser in COMMANDS for line in examples(parser.epilog)]


@pytest.mark.parametrize(("name", "line"), EXAMPLES, ids=[line[:80] for _, line in EXAMPLES])
def test_every_example_parses(name, line):
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert callable(args.func)


def test_the_reader_sees_a_broken_example():
    """An example the parser refuses is one ``test_every_example_parses`` reports (``serve``'s old one)."""
    line = examples("examples:\n  edge-deploy command --config c.toml bench --runs 20 send a signed command\n")[0]
    with pytest.raises(UsageError, match="unrecognized arguments: send a signed command"):
        build_parser().parse_args(shlex.split(line)[1:])


def test_continuation_lines_are_joined():
    assert examples("examples:\n  # a\n  edge-deploy build --model x \\\n      -o dist/\n  edge-deploy targets\n") == [
        "edge-deploy build --model x -o dist/",
        "edge-deploy targets",
    ]


def test_help_prints_the_examples_as_written(capsys):
    with pytest.raises(SystemExit):
        main(["fleet", "rollout", "--help"])
    out = capsys.readouterr().out
    assert (
        "examples:\n  # 10% of the devices tagged beta first; stop at the first failure\n"
        "  edge-deploy fleet rollout https://files.example/rpi4-face.tar.gz --sha256 HEX --group beta --canary 10% \\\n"
        "      --abort-after 1 --store out/monitor/monitor.db --broker 10.0.0.2:8883 --tls-ca ca.crt \\\n"
    ) in out


def test_serve_prints_its_example_config(capsys):
    assert main(["serve", "--example-config"]) == 0
    assert capsys.readouterr().out == EXAMPLE_CONFIG.read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert f"\n  # (the file: {EXAMPLE_CONFIG})\n  edge-deploy serve --example-config\n" in capsys.readouterr().out
    assert EXAMPLE_CONFIG.is_file()


# --- examples that write files work from a fresh checkout -------------------------------------------------


def test_keygen_creates_the_key_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["keygen", "-o", "keys/release.key"]) == 0
    assert "keys/release.key (mode 600" in capsys.readouterr().out
    assert stat.S_IMODE(os.stat("keys/release.key").st_mode) == 0o600
    assert Path("keys/release.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")


def test_face_enroll_creates_the_gallery_folder_only_when_it_gets_that_far(tmp_path, capsys):
    models = tmp_path / "nomodels"
    assert main(["face", "enroll", str(models), str(tmp_path), "-o", str(tmp_path / "new" / "g.npz")]) == 3
    assert capsys.readouterr().err.startswith(f"Error: {models / 'models.json'}: ")
    assert not (tmp_path / "new").exists()


def test_an_output_folder_under_a_file_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    key = tmp_path / "file" / "release.key"
    assert main(["keygen", "-o", str(key)]) == 3
    assert capsys.readouterr().err == (
        f"Error: --output {key}: cannot create the folder {tmp_path / 'file'} (File exists)\n"
    )


# --- bad input leaves no empty output folder behind -------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = write_embedder_files(tmp_path_factory.mktemp("cli-help"))
    write_npz(d / "wrong.npz", y=np.zeros((4, 3, 16, 16), np.float32))
    return d


BAD_INPUT = {
    "convert slm, a missing GGUF": (
        ["convert", "slm", "--target", "rpi4", "--gguf", "TMP/missing.gguf", "-o", "TMP/out/x", "--json"],
        "Error: TMP/missing.gguf: no such file; expected a GGUF model\n",
    ),
    "convert model, a missing model": (
        [
            "convert",
            "model",
            "TMP/X.tflite",
            "--target",
            "rpi4",
            "--precision",
            "fp32",
            "--eval",
            "FILES/eval.npz",
            "-o",
            "TMP/out/x",
        ],
        "Error: TMP/X.tflite: the model file does not exist\n",
    ),
    "convert model, data without the model's input": (
        [
            "convert",
            "model",
            "FILES/emb.onnx",
            "--target",
            "rpi4",
            "--precision",
            "fp32",
            "--input",
            "x=2x3x16x16",
            "--eval",
            "FILES/wrong.npz",
            "-o",
            "TMP/out/x",
        ],
        "Error: --eval FILES/wrong.npz: no array named 'x'; expected one array per model input (x); the file has y\n",
    ),
    "convert face, a missing embedder": (
        ["convert", "face", "--target", "rpi4", "--embedder", "TMP/missing.onnx", "-o", "TMP/out/x"],
        "Error: TMP/missing.onnx: the model file does not exist\n",
    ),
    "convert face, an embedder of another size": (
        ["convert", "face", "--target", "rpi4", "--embedder", "FILES/emb.onnx", "--chip-size", "3", "-o", "TMP/out/x"],
        "Error: --chip-size 3: FILES/emb.onnx's input 'x' is fixed to 16 (batchx3x16x16)\n",
    ),
    "convert blazeface, not a face folder": (
        ["convert", "blazeface", "TMP/out/x"],
        "Error: TMP/out/x/models.json: not found; expected a models folder written by 'edge-deploy convert face' "
        "(with models.json)\n",
    ),
    "build, not a passed folder": (
        ["build", "--model", "FILES", "-o", "TMP/out/x"],
        "Error: --model FILES: no models.json; convert model writes it only when the gate passed: only gated models "
        "are bundled\n",
    ),
    "build, a cache that is a file": (
        ["build", "--model", "face", "--target", "rpi4", "--cache", "FILES/eval.npz", "-o", "TMP/out/x"],
        "Error: --cache FILES/eval.npz: is a file; expected the build cache folder (created if missing)\n",
    ),
    "keygen, a public key that exists": (
        ["keygen", "-o", "TMP/out/x/k.key", "--public", "FILES/eval.npz"],
        "Error: FILES/eval.npz: cannot create the key file (File exists); expected a new file\n",
    ),
    "emulate, not a converted folder": (
        ["emulate", "TMP", "--work", "TMP/out/x"],
        "Error: TMP: no models.json; expected a folder 'convert model' or 'convert face' wrote\n",
    ),
    "demo, an unknown target": (
        ["demo", "--target", "rpi9", "-o", "TMP/out/x"],
        "Error: unknown target 'rpi9'; expected one of ",
    ),
    "fleet provision, a bad identity": (
        ["fleet", "provision", "a b", "--ca", "TMP/out/ca", "-o", "TMP/out/x"],
        "Error: identity = 'a b'; expected 1-64 characters of letters, digits, '_', '.', ':' or '-' (it becomes one "
        "MQTT topic level)\n",
    ),
    "bench, a missing model": (
        ["bench", "TMP/missing.onnx", "--plot", "TMP/out/x/lat.png"],
        "Error: TMP/missing.onnx: no such model file\n",
    ),
}


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_leaves_no_output_folder(files, tmp_path, capsys, argv, message):
    def fill(text: str) -> str:
        return text.replace("TMP", str(tmp_path)).replace("FILES", str(files))

    assert main([fill(a) for a in argv]) == (ProfileError.exit_code if "rpi9" in argv else InputError.exit_code)
    err = capsys.readouterr().err
    assert err.startswith(fill(message)) if message.endswith(" ") else err == fill(message)
    assert not (tmp_path / "out").exists()


def test_a_failed_bundle_leaves_no_half_bundle(files, tmp_path):
    """A bundle that fails once its folder is made (here: the wheel cache is a file) removes that folder: a half
    bundle has no manifest.json, and the next build would refuse to replace it."""
    from converters.package.bundle import build_model_bundle
    from edge.profiles import load_profile

    net, dist = tmp_path / "net", tmp_path / "dist"
    argv = ["convert", "model", str(files / "emb.onnx"), "--target", "rpi4", "--precision", "fp32", "--input",
            "x=2x3x16x16", "--eval", str(files / "eval.npz"), "-o", str(net)]  # fmt: skip
    assert main(argv) == 0
    with pytest.raises(NotADirectoryError):
        build_model_bundle(load_profile("rpi4"), net, dist, files / "eval.npz")
    assert list(dist.iterdir()) == []
    assert main(["build", "--model", str(net), "-o", str(dist), "--no-wheels", "--no-archive", "-q"]) == 0
    assert (dist / "rpi4-model-net" / "manifest.json").is_file()
