"""edge.face.shape5 and converters.face.dlib_shape on small hand-made models (the real one: integration)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from converters.face.dlib_shape import read_shape_predictor
from edge.errors import ConversionError, InputError
from edge.face import shape5
from edge.face.shape5 import SHAPE5_SCHEMA_VERSION, ShapePredictor, hog_like_rect


def _tiny_model() -> dict[str, np.ndarray]:
    """One level, one tree of depth 1: compares two pixels and moves both points by +-0.1 of the box."""
    return {
        "schema_version": np.array(SHAPE5_SCHEMA_VERSION),
        "initial_shape": np.array([[0.25, 0.5], [0.75, 0.5]], np.float32),
        "split_idx": np.array([[[[0, 1]]]], np.int32),  # feature 0 - feature 1 > thresh -> left leaf
        "split_thresh": np.array([[[10.0]]], np.float32),
        "leaf_values": np.array([[[[[0.1, 0.0], [0.1, 0.0]], [[-0.1, 0.0], [-0.1, 0.0]]]]], np.float32),
        "anchor_idx": np.array([[0, 1]], np.int32),  # feature i sits on point i, no offset
        "deltas": np.zeros((1, 2, 2), np.float32),
    }


def _save(path, arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return path


def test_tree_walk_and_box_mapping(tmp_path):
    sp = ShapePredictor(_save(tmp_path / "m.npz", _tiny_model()))
    img = np.zeros((60, 60, 3), np.uint8)
    rect = (10, 10, 50, 50)  # unit box -> x = 10 + 40 u
    # point 0 at (20, 30), point 1 at (40, 30): equal pixels, 0 - 0 > 10 is false -> right leaf (-0.1)
    assert np.array_equal(sp.predict(img, rect), [[16.0, 30.0], [36.0, 30.0]])
    img[30, 20] = (90, 90, 90)  # intensity (r+g+b)//3 = 90 at point 0: 90 - 0 > 10 -> left leaf (+0.1)
    assert np.array_equal(sp.predict(img, rect), [[24.0, 30.0], [44.0, 30.0]])
    assert sp.num_points == 2


def test_pixels_outside_the_image_read_as_zero(tmp_path):
    sp = ShapePredictor(_save(tmp_path / "m.npz", _tiny_model()))
    img = np.full((20, 20, 3), 200, np.uint8)
    # point 0 at x 10 inside (200), point 1 at x 30 outside (0): 200 - 0 > 10 -> left leaf
    assert np.array_equal(sp.predict(img, (0, 0, 40, 20)), [[14.0, 10.0], [34.0, 10.0]])  # x = 40 u


def test_hog_like_rect_is_square_and_follows_the_measured_offsets():
    left, top, right, bottom = hog_like_rect((100.0, 100.0, 200.0, 220.0))
    assert right - left == bottom - top  # square, as HOG's
    assert right - left + 1 == round(0.968 * 110)
    assert (left + right + 1) / 2 == pytest.approx(150 - 0.007 * 110, abs=1)
    assert (top + bottom + 1) / 2 == pytest.approx(160 + 0.055 * 110, abs=1)


def test_load_errors(tmp_path):
    arrays = _tiny_model()
    del arrays["deltas"]
    path = _save(tmp_path / "a.npz", arrays)
    with pytest.raises(InputError) as err:
        ShapePredictor(path)
    assert str(err.value) == (
        f"{path}: key 'deltas' missing; expected schema_version, initial_shape, split_idx, split_thresh, "
        "leaf_values, anchor_idx, deltas"
    )
    path = _save(tmp_path / "b.npz", _tiny_model() | {"leaf_values": np.zeros((1, 1, 3, 2, 2), np.float32)})
    with pytest.raises(InputError) as err:
        ShapePredictor(path)
    assert str(err.value) == f"{path}: key 'leaf_values' has shape (1, 1, 3, 2, 2); expected (1, 1, 2, 2, 2)"
    path = _save(tmp_path / "c.npz", _tiny_model() | {"schema_version": np.array(7)})
    with pytest.raises(InputError) as err:
        ShapePredictor(path)
    assert str(err.value) == f"{path}: schema_version = 7; expected {SHAPE5_SCHEMA_VERSION}"
    with pytest.raises(InputError) as err:
        ShapePredictor(tmp_path / "none.npz")
    assert str(err.value) == (
        f"{tmp_path / 'none.npz'}: shape predictor not found; export it with converters.face.dlib_shape"
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("anchor_idx", np.array([[0, 2]], np.int32), "holds indices 0..2; expected 0..1 (the model's 2 landmarks)"),
        (
            "split_idx",
            np.array([[[[0, -1]]]], np.int32),
            "holds indices -1..0; expected 0..1 (the model's 2 feature pixels)",
        ),
        ("anchor_idx", np.array([[0.0, 1.0]], np.float32), "is float32; expected integer indices"),
    ],
)
def test_indices_out_of_range_are_refused_at_load(tmp_path, key, value, expected):
    """predict_many gathers without bounds checks, so a model whose indices point outside is refused on loading."""
    path = _save(tmp_path / "m.npz", _tiny_model() | {key: value})
    with pytest.raises(InputError) as err:
        ShapePredictor(path)
    assert str(err.value) == f"{path}: key '{key}' {expected}"


def test_predict_rejects_non_rgb(tmp_path):
    sp = ShapePredictor(_save(tmp_path / "m.npz", _tiny_model()))
    with pytest.raises(InputError) as err:
        sp.predict(np.zeros((5, 5), np.uint8), (0, 0, 4, 4))
    assert str(err.value) == "shape predictor: image is uint8 (5, 5); expected uint8 array [H, W, 3] (RGB)"


def _random_model(
    depth: int, seed: int, levels: int = 3, trees: int = 40, points: int = 5, features: int = 60
) -> dict[str, np.ndarray]:
    """A random cascade whose leaves span several orders of magnitude (float32 sums then depend on order)."""
    rng = np.random.default_rng(seed)
    splits = 2**depth - 1
    scale = 10.0 ** rng.integers(-7, -1, (levels, trees, 1, 1, 1))
    return {
        "schema_version": np.array(SHAPE5_SCHEMA_VERSION),
        "initial_shape": rng.uniform(0.2, 0.8, (points, 2)).astype(np.float32),
        "split_idx": rng.integers(0, features, (levels, trees, splits, 2)).astype(np.int32),
        "split_thresh": rng.normal(0, 40, (levels, trees, splits)).astype(np.float32),
        "leaf_values": (rng.normal(0, 1, (levels, trees, splits + 1, points, 2)) * scale).astype(np.float32),
        "anchor_idx": rng.integers(0, points, (levels, features)).astype(np.int32),
        "deltas": rng.normal(0, 0.15, (levels, features, 2)).astype(np.float32),
    }


@pytest.mark.parametrize("by_opencv", [True, False], ids=["opencv", "numpy"])
@pytest.mark.parametrize("depth", [1, 4, 5])  # 5: past the leaf table, walked node by node
def test_vectorised_walk_equals_the_tree_by_tree_one(tmp_path, monkeypatch, depth, by_opencv):
    """predict_many against the previous implementation (tree by tree, leaves added in a Python loop), with the
    pixels read by OpenCV (any image up to 32767 pixels a side; one face's split pairs too) and by numpy (larger
    ones)."""
    from benchmarks.harness.align_reference import predict as previous_predict

    if not by_opencv:
        monkeypatch.setattr(shape5, "_REMAP_MAX_SIDE", 0)
    sp = ShapePredictor(_save(tmp_path / "m.npz", _random_model(depth, seed=depth)))
    assert (sp._leaf_of_code is None) == (depth == 5)
    img = np.random.default_rng(1).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    rects = [(10, 10, 70, 70), (-20, 30, 40, 90), (60, 5, 130, 75), (0, 0, 1, 1)]  # some reach outside
    got = sp.predict_many(img, rects)
    assert got.shape == (4, 5, 2)
    for rect, points in zip(rects, got, strict=True):
        assert np.array_equal(points, previous_predict(sp, img, rect)), rect
        assert np.array_equal(sp.predict(img, rect), points)
    crop = img[5:, 7:]  # a view, not C-contiguous
    assert np.array_equal(sp.predict_many(crop, rects), np.stack([previous_predict(sp, crop, r) for r in rects]))


def test_an_image_wider_than_remap_reaches_is_read_by_numpy(tmp_path):
    """Beyond 32767 pixels a side the intensities come from numpy (int16); one face's pairs still by remap."""
    from benchmarks.harness.align_reference import predict as previous_predict

    sp = ShapePredictor(_save(tmp_path / "m.npz", _random_model(4, seed=7)))
    img = np.random.default_rng(2).integers(0, 256, (40, shape5._REMAP_MAX_SIDE + 60, 3), dtype=np.uint8)
    for rect in [(32740, 0, 32790, 39), (5, 5, 35, 35)]:
        assert np.array_equal(sp.predict(img, rect), previous_predict(sp, img, rect)), rect


def test_opencvs_grey_level_is_dlibs_for_every_pixel():
    """cv2.transform's rounded (r + g + b - 1) / 3 equals dlib's (r + g + b) // 3 for all 2**24 colours."""
    import cv2

    every = np.arange(2**24, dtype=np.uint32)
    rgb = np.stack([every >> 16, (every >> 8) & 255, every & 255], axis=-1).astype(np.uint8).reshape(4096, 4096, 3)
    expected = rgb.astype(np.int16).sum(axis=2) // 3
    assert np.array_equal(cv2.transform(rgb, shape5._GREY_ROW), expected)


def test_opencv_reads_the_same_intensities_and_differences_as_numpy(tmp_path):
    """Far outside, on the border, several faces at once: the same intensities by either route; one face's
    split-pair differences as numpy indexing gives them."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)
    pix = np.floor(rng.uniform(-20, 90, (3, 2, 400)))
    pix[0, :, :6] = [[1e12, -1e12, 69, 70, -1, 0], [0, 0, 49, 50, 0, -1]]  # x, y: far off, last in, first out
    size = np.array([[70], [50]], np.uintp)
    grey = shape5._intensities_opencv(img, pix)
    assert grey.dtype == np.uint8
    assert np.array_equal(grey, shape5._intensities(img.reshape(-1, 3), size, pix))
    assert grey[0, :6].tolist() == [0, 0, img[49, 69].astype(int).sum() // 3, 0, 0, 0]
    sp = ShapePredictor(_save(tmp_path / "m.npz", _random_model(4, seed=2, features=400)))
    got = shape5._differences_opencv(sp._pair_map[1], grey[:1])
    first, second = sp._pairs[1]  # [splits, trees] feature indices
    assert got.dtype == np.int16
    assert np.array_equal(got[..., 0], grey[0].astype(np.int16)[first] - grey[0][second])


def test_leaves_are_added_in_dlibs_order(tmp_path):
    """One big leaf and many tiny ones: in float32 the tiny ones vanish when added one by one after it."""
    model = _tiny_model() | {"leaf_values": np.zeros((1, 64, 2, 2, 2), np.float32)}
    model |= {"split_idx": np.zeros((1, 64, 1, 2), np.int32), "split_thresh": np.full((1, 64, 1), 1e9, np.float32)}
    model["leaf_values"][0, 0, 1] = 0.5  # every tree goes right (0 - 0 > 1e9 is false): leaf 1
    model["leaf_values"][0, 1:, 1] = 2.0**-26  # half an ulp of 0.5 + 0.5 ... each rounds away
    sp = ShapePredictor(_save(tmp_path / "m.npz", model))
    sequential = np.float32(0.25) + np.float32(0.5)  # point 0's x; the tiny leaves are lost one by one
    for faces in (1, 3):  # one face, and several summed side by side
        shapes = sp.predict_many(np.zeros((8, 8, 3), np.uint8), [(0, 0, 2**26, 2**26)] * faces)
        assert (shapes[:, 0, 0] == np.floor(sequential.astype(np.float64) * 2**26 + 0.5)).all()
        assert (shapes[:, 0, 0] != np.floor((0.25 + 0.5 + 63 * 2.0**-26) * 2**26 + 0.5)).all()  # a pairwise sum's


def test_predict_many_checks_the_rects(tmp_path):
    sp = ShapePredictor(_save(tmp_path / "m.npz", _tiny_model()))
    img = np.zeros((8, 8, 3), np.uint8)
    assert sp.predict_many(img, []).shape == (0, 2, 2)
    with pytest.raises(InputError) as err:
        sp.predict_many(img, [(0, 0, 4)])
    assert str(err.value) == "shape predictor: rects have shape (1, 3); expected [N, 4] (left, top, right, bottom)"


def _int(v: int) -> bytes:
    """dlib's integer encoding: tag byte (size, bit 7 = negative), then little-endian bytes."""
    mag = abs(v).to_bytes(max(1, (abs(v).bit_length() + 7) // 8), "little") if v else b""
    return bytes([len(mag) | (0x80 if v < 0 else 0)]) + mag


def test_reader_rejects_other_versions_and_truncation(tmp_path):
    path = tmp_path / "sp.dat"
    path.write_bytes(_int(2))
    with pytest.raises(ConversionError) as err:
        read_shape_predictor(path)
    assert str(err.value) == f"{path}: version 2; expected 1 while reading the shape predictor header"
    path.write_bytes(_int(1) + _int(-4) + _int(-1) + _int(3))  # a 4-vector cut after one byte
    with pytest.raises(ConversionError) as err:
        read_shape_predictor(path)
    assert str(err.value).startswith(f"{path}: truncated at byte ")
