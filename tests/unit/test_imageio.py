"""edge.imageio: reading photos, with errors that name the file."""

from __future__ import annotations

import numpy as np
import pytest

from converters.face.facedata import package_dir
from edge.errors import InputError
from edge.imageio import decode_image, load_image, save_image

T1 = package_dir("insightface") / "data" / "images" / "t1.jpg"


def test_loads_real_jpeg_as_rgb():
    rgb = load_image(T1)
    assert rgb.dtype == np.uint8 and rgb.shape == (886, 1280, 3)
    # the same pixels as cv2's BGR, channels reversed
    import cv2

    assert np.array_equal(rgb, cv2.imread(str(T1))[:, :, ::-1])


def test_png_round_trip_is_exact(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (17, 23, 3), dtype=np.uint8)
    path = save_image(tmp_path / "x.png", rgb)
    assert np.array_equal(load_image(path), rgb)


def test_grey_png_becomes_three_channels(tmp_path):
    import cv2

    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    cv2.imwrite(str(tmp_path / "g.png"), grey)
    rgb = load_image(tmp_path / "g.png")
    assert rgb.shape == (8, 8, 3) and np.array_equal(rgb[:, :, 1], grey)


def test_empty_file(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"")
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: empty file (0 bytes); expected an image"


def test_text_file(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"hello world\n")
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: not an image (cv2 could not decode 12 bytes)"


def test_corrupt_jpeg_soi_then_garbage(tmp_path):
    data = T1.read_bytes()[:2] + bytes(np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8))
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: not an image (cv2 could not decode 502 bytes)"


def test_truncated_jpeg(tmp_path):
    data = T1.read_bytes()
    path = tmp_path / "half.jpg"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: not an image (cv2 could not decode {len(data) // 2} bytes)"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError) as err:
        load_image(tmp_path / "nope.jpg")
    assert str(err.value) == f"{tmp_path / 'nope.jpg'}: no such file; expected an image"
    with pytest.raises(InputError) as err:
        load_image(tmp_path)
    assert str(err.value) == f"{tmp_path}: not a file; expected an image"


def test_decode_names_the_source():
    with pytest.raises(InputError) as err:
        decode_image(b"\x00\x01\x02", "camera frame 7")
    assert str(err.value) == "camera frame 7: not an image (cv2 could not decode 3 bytes)"


def test_save_rejects_bad_arrays_and_suffix(tmp_path):
    with pytest.raises(InputError) as err:
        save_image(tmp_path / "x.png", np.zeros((4, 4), np.uint8))
    assert str(err.value) == f"{tmp_path / 'x.png'}: image to save is uint8 (4, 4); expected uint8 [H, W, 3]"
    with pytest.raises(InputError) as err:
        save_image(tmp_path / "x.nope", np.zeros((4, 4, 3), np.uint8))
    assert str(err.value) == f"{tmp_path / 'x.nope'}: cv2 cannot encode an image with suffix '.nope'"
