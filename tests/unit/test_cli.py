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
