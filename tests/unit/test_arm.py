"""The emulation harness's pure parts: CPU models, cpuinfo, count parsing, face comparison, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.arm.cost import InsnCounts, count_instructions, measure_model, parse_counts
from converters.arm.face import compare_face_results, run_face_both
from converters.arm.guest import (
    AARCH64_PLATFORMS,
    ROOTFS_STAMP,
    ArmGuest,
    CpuModel,
    compile_site,
    cpu_model,
    cpuinfo_text,
)
from converters.arm.text import run_text_both
from edge.errors import InferenceError, InputError
from tests.unit.tool_helpers import never_finishing_tool, printed_error


def test_cpu_models_and_their_errors():
    assert cpu_model("cortex-a76") is CpuModel.CORTEX_A76
    assert cpu_model(CpuModel.CORTEX_A72) is CpuModel.CORTEX_A72
    with pytest.raises(InputError) as err:
        cpu_model("max")
    assert str(err.value) == "cpu = 'max'; expected one of cortex-a53, cortex-a72, cortex-a76"


def test_cpuinfo_looks_like_the_pi_that_has_the_core():
    pi4 = cpuinfo_text(CpuModel.CORTEX_A72, 2)
    pi5 = cpuinfo_text(CpuModel.CORTEX_A76, 2)
    assert pi4.count("processor\t:") == 2
    assert "Features\t: fp asimd evtstrm crc32 cpuid\n" in pi4
    assert "CPU part\t: 0xd08\n" in pi4
    assert "asimddp" not in pi4
    assert "CPU part\t: 0xd0b\n" in pi5
    assert " asimddp\n" in pi5


def test_every_manylinux_aarch64_tag_is_listed():
    assert AARCH64_PLATFORMS[0] == "manylinux2014_aarch64"
    assert "manylinux_2_17_aarch64" in AARCH64_PLATFORMS
    assert AARCH64_PLATFORMS[-1] == "manylinux_2_36_aarch64"
    assert len(AARCH64_PLATFORMS) == 21


def test_counts_parse_and_subtract():
    log = (
        "some qemu line\ninsncount: region 2 total 50 simd 20 vector 10 sdot 5 udot 0\n"
        "insncount: all total 100 simd 40 vector 30 sdot 5 udot 1\n"
    )
    run = parse_counts(log)
    assert run.regions == {2: InsnCounts(50, 20, 10, 5, 0)}
    c = run.whole
    assert c == InsnCounts(100, 40, 30, 5, 1)
    assert c - InsnCounts(10, 4, 3, 2, 1) == InsnCounts(90, 36, 27, 3, 0)
    assert c.simd_share == 0.4


def test_a_log_without_counts_is_an_error():
    with pytest.raises(InferenceError) as err:
        parse_counts("qemu: uncaught target signal 11 (Segmentation fault)\n", "run_model.py on cortex-a72")
    assert str(err.value) == (
        "run_model.py on cortex-a72: expected one 'insncount: all total N simd N vector N sdot N udot N' line, found 0"
    )


def test_an_unfinished_rootfs_is_refused(tmp_path):
    (tmp_path / "usr").mkdir()
    with pytest.raises(InputError) as err:
        ArmGuest(tmp_path, "cortex-a72")
    assert str(err.value) == (
        f"{tmp_path}: not a finished arm64 rootfs (no {ROOTFS_STAMP}); build it with scripts/arm/rootfs.sh {tmp_path}"
    )


def _guest(tmp_path: Path, cpu: str = "cortex-a72") -> ArmGuest:
    (tmp_path / ROOTFS_STAMP).write_text("test\n")
    return ArmGuest(tmp_path, cpu, cores=2)


def test_system_files_follow_the_cpu_model(tmp_path):
    proc_link = tmp_path / "proc"
    proc_link.symlink_to("/proc")  # as debootstrap --foreign leaves it
    guest = _guest(tmp_path, "cortex-a76")
    guest.write_system_files()
    assert not proc_link.is_symlink()
    assert (tmp_path / "proc/cpuinfo").read_text() == cpuinfo_text(CpuModel.CORTEX_A76, guest.cores)
    span = "0\n" if guest.cores == 1 else f"0-{guest.cores - 1}\n"
    assert (tmp_path / "sys/devices/system/cpu/possible").read_text() == span
    ArmGuest(tmp_path, "cortex-a72", cores=2).write_system_files()
    assert "asimddp" not in (tmp_path / "proc/cpuinfo").read_text()


def test_the_guest_command_always_names_the_cpu(tmp_path):
    guest = _guest(tmp_path)
    cmd = guest.command(Path("/x/run.py"), ["--a", "1"])
    assert cmd[1:8] == [
        "-cpu",
        "cortex-a72",
        "-L",
        str(tmp_path.resolve()),
        "-0",
        "/usr/bin/python3",
        str(guest.python),
    ]
    assert cmd[-4:] == ["-s", "/x/run.py", "--a", "1"]
    counted = guest.command(Path("/x/run.py"), [], Path("/p.so"), Path("/log.txt"))
    assert counted[1:3] == ["x86_64", "-R"]
    assert counted[4:10] == ["-plugin", "/p.so", "-d", "plugin", "-D", "/log.txt"]
    assert counted[10:12] == ["-cpu", "cortex-a72"]


def test_counting_without_the_plugin_says_how_to_build_it(tmp_path):
    guest = _guest(tmp_path)
    with pytest.raises(InputError) as err:
        count_instructions(guest, Path("/x/run.py"), [], tmp_path / "missing.so")
    assert (
        str(err.value) == f"{tmp_path / 'missing.so'}: TCG plugin not found; build it with scripts/arm/build_plugin.sh"
    )
    with pytest.raises(InputError) as err:
        measure_model(guest, tmp_path / "m.onnx", k=0)
    assert str(err.value) == "k = 0; expected at least 1 steady-state inference"


def _result(*faces_per_photo: list[list[float]]) -> dict:
    return {
        "photos": [
            {"photo": f"p{i}.png", "faces": [{"box": [0.0, 0.0, 10.0, 10.0], "descriptor": d} for d in faces]}
            for i, faces in enumerate(faces_per_photo)
        ]
    }


def test_face_comparison_counts_differences_and_flipped_decisions():
    a, b, c = [0.0, 0.0], [0.5, 0.0], [0.0, 1.0]
    host = _result([a, b], [c])
    same = compare_face_results(host, _result([a, b], [c]))
    assert (same.pairs, same.decisions_agree, same.descriptor_max_abs_diff) == (3, 3, 0.0)
    assert same.problems() == []
    moved = compare_face_results(host, _result([a, [0.7, 0.0]], [c]))  # a-b: 0.5 (same) -> 0.7 (different)
    assert moved.decisions_agree == 2
    assert moved.problems() == [
        "descriptors: max |diff| 0.2 > 0.0001",
        "same/different decisions: 2 of 3 pairs agree",
    ]
    lost = compare_face_results(host, _result([a], [c]))
    assert lost.problems()[0] == "faces found: host 3, guest 2 (per photo they must match)"
    # at a user embedder's threshold (0.8) the move 0.5 -> 0.7 is no flip: both are the same person
    assert compare_face_results(host, _result([a, [0.7, 0.0]], [c]), threshold=0.8).decisions_agree == 3


def test_face_comparison_needs_the_same_photos():
    with pytest.raises(InputError) as err:
        compare_face_results(_result([]), _result([], []))
    assert str(err.value) == "host photos ['p0.png'] != guest photos ['p0.png', 'p1.png']; expected the same photos"


def test_a_hung_host_run_of_the_face_comparison_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "rootfs").mkdir()
    guest = _guest(tmp_path / "rootfs")
    hung = never_finishing_tool(tmp_path)

    def compare() -> tuple[dict, dict]:
        return run_face_both(guest, tmp_path / "models", [tmp_path / "a.png"], tmp_path, timeout=0.5, host_python=hung)

    code, printed = printed_error(compare, capsys)
    assert printed == "Error: run_face.py on the host did not finish within 0.5 s\n"
    assert code == InferenceError.exit_code


def test_a_hung_host_run_of_the_text_comparison_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "rootfs").mkdir()
    guest = _guest(tmp_path / "rootfs")
    hung = never_finishing_tool(tmp_path)

    def compare() -> tuple[dict, dict]:
        return run_text_both(guest, tmp_path / "model", tmp_path, timeout=0.5, host_python=hung)

    code, printed = printed_error(compare, capsys)
    assert printed == "Error: run_text.py on the host did not finish within 0.5 s\n"
    assert code == InferenceError.exit_code


def test_run_model_feeds_every_input_from_an_npz(tmp_path):
    """``scripts/arm/run_model.py --inputs FILE.npz`` (what ``benchmarks/byom_arm_cost.py`` counts): the first
    rows of each named array, as many as the model's batch (1 when it is dynamic); a missing name is an error
    naming the file and the input. Run on the host's python: the guest runs the same script."""
    import json
    import subprocess
    import sys

    import numpy as np

    from converters.arm.cost import RUN_MODEL
    from testsupport.byom_models import write_embedder

    model = write_embedder(tmp_path / "emb.onnx")  # x [batch, 3, 16, 16] -> emb [batch, 32]
    x = np.random.default_rng(0).uniform(0, 1, (5, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "eval.npz", x=x)
    np.savez(tmp_path / "other.npz", y=x)
    args = [sys.executable, str(RUN_MODEL), "--model", str(model), "--runs", "1", "--inputs"]
    done = subprocess.run([*args, str(tmp_path / "eval.npz")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outputs = json.loads(done.stdout)["outputs"]
    from edge.runtime import open_model

    with open_model(model) as m:
        expected = m.run({"x": x[:1]})["emb"]
    assert outputs["emb"][0] == [1, 32] and outputs["emb"][1] == pytest.approx(float(expected.sum()), rel=1e-5)
    done = subprocess.run([*args, str(tmp_path / "other.npz")], capture_output=True, text=True, timeout=120)
    assert (
        done.returncode != 0 and f"{tmp_path / 'other.npz'}: no array 'x'; expected one per model input" in done.stderr
    )


def test_the_guest_site_gets_byte_code_for_every_module_nested_packages_too(tmp_path):
    # uncompiled modules would be compiled by the first guest run that imports them, inside its counts
    nested = tmp_path / "pkg" / "aot" / "vendors"
    nested.mkdir(parents=True)
    for folder in (tmp_path / "pkg", nested):
        (folder / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    compile_site(tmp_path)
    for folder in (tmp_path / "pkg", nested):
        assert list((folder / "__pycache__").glob("__init__.cpython-311*.pyc")), folder
