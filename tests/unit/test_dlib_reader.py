"""converters.face.dlib_reader on the real dlib_face_recognition_resnet_model_v1.dat and on broken copies of it.

The byte offsets in the expected messages are those of face-recognition-models 0.3.0's file (pinned).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from converters.face.dlib_reader import FACE_RESNET_V1, LayerKind, read_dlib_face_net
from converters.sources import DLIB_RESNET
from edge.errors import ConversionError

NOT_FACE_NET = "; not dlib's face-recognition ResNet (expected version 1, then 'loss_metric_2')"


@pytest.fixture(scope="module")
def dat_bytes() -> bytes:
    return DLIB_RESNET.locate().read_bytes()


@pytest.fixture(scope="module")
def net():
    return read_dlib_face_net(DLIB_RESNET.locate())


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConversionError) as info:
        read_dlib_face_net(path)
    return str(info.value)


def test_the_real_file_reads_completely(net):
    assert net.input_size == (150, 150)
    assert net.input_mean == pytest.approx((122.782, 117.001, 104.298), abs=1e-4)
    assert net.distance_threshold == pytest.approx(0.6)
    assert len(net.layers) == len(FACE_RESNET_V1) == 130
    kinds = Counter(layer.kind for layer in net.layers)
    assert kinds == {
        LayerKind.CON: 29,
        LayerKind.AFFINE: 29,
        LayerKind.RELU: 29,
        LayerKind.ADD_PREV: 14,
        LayerKind.TAG: 18,
        LayerKind.SKIP: 4,
        LayerKind.AVG_POOL: 5,
        LayerKind.MAX_POOL: 1,
        LayerKind.FC: 1,
    }
    assert [layer.index for layer in net.computational] == list(range(108))


def test_layer_records_carry_the_parameters(net, dat_bytes):
    first = net.layers[0]
    assert (first.kind, first.version, first.offset) == (LayerKind.CON, "con_4", 334)
    assert first.params["weight"].shape == (32, 3, 7, 7)
    assert first.params["bias"].shape == (32,)
    assert first.hyper == {"num_filters": 32, "kernel": (7, 7), "stride": (2, 2), "padding": (0, 0)}
    # The first filter value is the first float32 of the params tensor, right after its header.
    assert first.params["weight"].flat[0] == np.frombuffer(dat_bytes, "<f4", 1, 352)[0]
    fc = net.layers[-1]
    assert fc.kind is LayerKind.FC and fc.params["weight"].shape == (256, 128)
    assert fc.hyper == {"num_outputs": 128, "num_inputs": 256}
    pools = [layer.hyper["kernel"] for layer in net.layers if layer.kind is LayerKind.AVG_POOL]
    assert pools == [(2, 2)] * 4 + [(0, 0)]
    params = sum(a.size for layer in net.layers for a in layer.params.values())
    # 29 conv (weights + biases) 5,574,720 + 29 affine (gamma + beta) 7,104 + fc 256x128, counted by hand
    # from the architecture; float32 weights are all but 7.7 kB of the file.
    assert params == 5_574_720 + 7_104 + 32_768
    assert 0 < len(dat_bytes) - 4 * params < 8_000


def test_truncated_in_a_tensor(tmp_path, dat_bytes):
    path = _write(tmp_path, "cut.dat", dat_bytes[:11_000_000])
    assert _error(path) == (
        f"{path}: truncated at byte 11000000 (2360320 bytes needed from byte 10521718) while reading the "
        "values of a [590080, 1, 1, 1] tensor in con_ layer 87 of 108 (con_4 at byte 10521699)"
    )


def test_truncated_in_the_first_layer(tmp_path, dat_bytes):
    path = _write(tmp_path, "cut.dat", dat_bytes[:1000])
    assert _error(path) == (
        f"{path}: truncated at byte 1000 (18944 bytes needed from byte 352) while reading the values of a "
        "[4736, 1, 1, 1] tensor in con_ layer 0 of 108 (con_4 at byte 334)"
    )


def test_truncated_in_the_wrapper_versions(tmp_path, dat_bytes):
    path = _write(tmp_path, "cut.dat", dat_bytes[:100])
    assert _error(path) == (
        f"{path}: truncated at byte 100 (1 byte needed from byte 100) while reading the version of "
        "wrapper 35 of 130 from the output (add_layer around con_)"
    )


def test_truncated_at_the_very_end(tmp_path, dat_bytes):
    path = _write(tmp_path, "cut.dat", dat_bytes[:-10])
    assert _error(path) == (
        f"{path}: truncated at byte 22466056 (1 byte needed from byte 22466056) while reading the "
        "add_layer state after fc_ layer 107 of 108"
    )


def test_trailing_bytes(tmp_path, dat_bytes):
    path = _write(tmp_path, "long.dat", dat_bytes + b"\0\0\0")
    assert _error(path) == (
        f"{path}: 3 unexpected bytes after the last layer at byte 22466066; expected the end of the file"
    )


def test_empty_file(tmp_path):
    path = _write(tmp_path, "empty.dat", b"")
    assert _error(path) == f"{path}: empty file; expected a dlib serialized network (loss_metric_2 ...)"


def test_random_bytes(tmp_path):
    path = _write(tmp_path, "random.dat", np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes())
    assert _error(path) == (
        f"{path}: invalid integer tag byte 0x5f at byte 0 while reading the add_loss_layer header" + NOT_FACE_NET
    )


def test_text_file(tmp_path):
    path = tmp_path / "model.dat"
    path.write_text("This is not a dlib model, just some text.\n")
    assert _error(path) == (
        f"{path}: invalid integer tag byte 0x54 at byte 0 while reading the add_loss_layer header" + NOT_FACE_NET
    )


def test_another_dlib_network(tmp_path):
    path = DLIB_RESNET.locate().parent / "mmod_human_face_detector.dat"
    assert _error(path) == (
        f"{path}: expected the loss layer 'loss_metric_2' at byte 2, found 'loss_mmod_' while reading the "
        "add_loss_layer header" + NOT_FACE_NET
    )


def test_unknown_layer_version(tmp_path, dat_bytes):
    data = bytearray(dat_bytes)
    data[334 + 2 + 4] = ord("5")  # con_4 -> con_5: a newer layer format this reader does not know
    path = _write(tmp_path, "con5.dat", bytes(data))
    assert _error(path) == (
        f"{path}: expected layer version con_4 at byte 334, found 'con_5' while reading the version string "
        "of con_ layer 0 of 108"
    )


def test_missing_file(tmp_path):
    path = tmp_path / "absent.dat"
    assert _error(path) == f"{path}: cannot read the dlib model (No such file or directory)"
