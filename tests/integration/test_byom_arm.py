"""A passed ``convert model`` folder on the Pi's cores: its shipped INT8 ``.ort`` in the arm64 guest
(``qemu-aarch64 -cpu cortex-a72`` / ``a76``, the device runtime) against the gate's arithmetic on the host
(the QDQ ``.onnx`` unfused), on the folder's own evaluation data (``converters.arm.model``). The model is
the test embedder of ``testsupport/byom_models.py``, converted here for rpi4."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.arm.guest import ArmGuest, prepare_guest
from converters.arm.model import check_model_folder, compare

pytestmark = [pytest.mark.integration, pytest.mark.arm]

#: Largest |difference| allowed, as a share of the host output's largest magnitude (the face build's INT8
#: tolerance, 0.03 on descriptors of norm ~1, is of the same order).
RELATIVE_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from converters.byom.build import ModelJob, convert_model
    from converters.byom.gate import Task
    from edge.profiles import Precision, load_profile
    from testsupport.byom_models import write_embedder_files

    d = write_embedder_files(tmp_path_factory.mktemp("byom-arm"))
    job = ModelJob(model=d / "emb.onnx", out_dir=d / "net", profile=load_profile("rpi4"), precision=Precision.INT8,
                   task=Task.EMBEDDING, evaluation=d / "eval.npz", calibration=d / "calib.npz",
                   input_shapes={"x": (4, 3, 16, 16)})  # fmt: skip
    convert_model(job)
    return d / "net"


@pytest.mark.parametrize("cpu", ["cortex-a72", "cortex-a76"])
def test_the_shipped_int8_file_on_the_pi_computes_what_the_gate_measured(folder, cpu, tmp_path):
    guest = prepare_guest("cortex-a72")
    guest = guest if cpu == "cortex-a72" else ArmGuest(guest.rootfs, cpu)
    (emb,) = check_model_folder(folder, guest, tmp_path)
    assert emb.name == "emb" and emb.shape == (4, 32)  # the model's batch of 4, from eval.npz
    assert emb.max_abs_diff <= RELATIVE_TOLERANCE * emb.max_abs_host, emb
    assert emb.min_row_cosine > 0.999, emb


def test_outputs_of_another_model_are_refused():
    import numpy as np

    from edge.errors import InputError

    with pytest.raises(InputError, match=r"host outputs \{'emb': \(4, 32\)\} != guest outputs \{'emb': \(1, 32\)\}"):
        compare({"emb": np.zeros((4, 32))}, {"emb": np.zeros((1, 32))})


def test_emulate_checks_and_counts_the_folder_on_both_cores(folder, tmp_path, capsys):
    import json

    from edge_deploy.cli import main

    argv = ["emulate", str(folder), "--cpu", "cortex-a72", "--cpu", "cortex-a76", "--count", "--json",
            "--work", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["kind"], record["shipped"], record["host"]) == ("model", "emb.int8.ort", "emb.int8.onnx")
    a72, a76 = record["cores"]
    for core in (a72, a76):
        (emb,) = core["outputs"]
        assert emb["shape"] == [4, 32] and emb["max_abs_diff"] <= RELATIVE_TOLERANCE * emb["max_abs_host"]
        steady = core["instructions"]["steady"]
        assert steady["total"] > 0 and core["instructions"]["repeat_noise"] < steady["total"] // 100
    # the Pi 5's core has the dot product and onnxruntime's int8 kernels use it; the Pi 4's has none
    assert a72["instructions"]["steady"]["sdot"] + a72["instructions"]["steady"]["udot"] == 0
    assert a76["instructions"]["steady"]["sdot"] + a76["instructions"]["steady"]["udot"] > 0
