"""Box utilities of the MTCNN cascade (edge/face/detect_mtcnn.py) on hand-made boxes; no models."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from edge.errors import InferenceError, InputError
from edge.face.detect_mtcnn import (
    MtcnnDetector,
    Overlap,
    area_resize,
    area_resize_window,
    check_image,
    crop_windows,
    generate_boxes,
    integral_image,
    nms,
    normalise,
    pyramid_scales,
    regress,
    square,
)

F32 = np.float32


def test_nms_union_drops_heavy_overlap_keeps_light_one():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [5, 0, 15, 10], [20, 20, 30, 30]], F32)
    scores = np.array([0.9, 0.8, 0.95, 0.1], F32)
    # IoU(0,1) = 90/110 = 0.818, IoU(2,0) = 50/150 = 0.333, IoU(2,1) = 60/140 = 0.43
    assert nms(boxes, scores, 0.5).tolist() == [2, 0, 3]
    assert nms(boxes, scores, 0.3).tolist() == [2, 3]
    assert nms(boxes, scores, 0.9).tolist() == [2, 0, 1, 3]


def test_nms_threshold_is_strict_greater():
    boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], F32)  # IoU exactly 50/150 = 1/3
    scores = np.array([0.9, 0.8], F32)
    assert nms(boxes, scores, 0.5).tolist() == [0, 1]
    assert nms(boxes, scores, 0.2).tolist() == [0]


def test_nms_min_mode_suppresses_box_inside_bigger_one():
    big_inner = np.array([[0, 0, 99, 99], [10, 10, 29, 29]], F32)
    scores = np.array([0.99, 0.9], F32)
    # IoU = 400/10000 keeps both; Min = 400/400 = 1 drops the inner box
    assert nms(big_inner, scores, 0.7, Overlap.UNION, plus_one=True).tolist() == [0, 1]
    assert nms(big_inner, scores, 0.7, Overlap.MIN, plus_one=True).tolist() == [0]


def test_nms_plus_one_counts_touching_pixels():
    boxes = np.array([[0, 0, 9, 9], [9, 0, 18, 9]], F32)  # share column 9 in pixel terms
    scores = np.array([0.9, 0.8], F32)
    assert nms(boxes, scores, 0.0).tolist() == [0, 1]
    assert nms(boxes, scores, 0.0, plus_one=True).tolist() == [0]


def test_nms_empty_and_ties_are_stable():
    assert nms(np.zeros((0, 4), F32), np.zeros(0, F32), 0.5).tolist() == []
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60]], F32)
    assert nms(boxes, np.array([0.5, 0.5, 0.5], F32), 0.5).tolist() == [0, 2]


def test_pyramid_scales_follow_facenet_recurrence():
    scales = pyramid_scales(100, 200, 20, 0.5)
    # m = 0.6; short side 60 -> 30 -> 15 -> 7.5 stops
    assert scales == pytest.approx([0.6, 0.3, 0.15])
    assert pyramid_scales(19, 500, 20, 0.709) == []
    # 886 * 0.6 * 0.709**k >= 12 for k = 0..11
    assert len(pyramid_scales(886, 1280, 20, 0.709)) == 12


def test_area_resize_equals_block_mean_on_integer_factor():
    img = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    out = area_resize(img, 2, 3)
    expected = img.astype(np.float64).reshape(2, 2, 3, 2, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)
    assert out.dtype == np.float32


def test_area_resize_uses_adaptive_pool_windows_on_odd_sizes():
    # 1-D check along rows: 5 -> 3 windows are [0,2), [1,4), [3,5) (floor start, ceil end)
    col = np.array([0, 10, 20, 30, 40], np.uint8).reshape(5, 1, 1)
    out = area_resize(col, 3, 1)[:, 0, 0]
    np.testing.assert_allclose(out, [5.0, 20.0, 35.0], atol=1e-6)
    # upscaling repeats pixels: 2 -> 4
    out = area_resize(np.array([[[1]], [[3]]], np.uint8), 4, 1)[:, 0, 0]
    np.testing.assert_allclose(out, [1, 1, 3, 3])


def test_area_resize_window_equals_resizing_the_crop():
    img = np.random.default_rng(0).integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
    crop = area_resize_window(integral_image(img), (7, 31, 3, 20), 24, 24)
    np.testing.assert_allclose(crop, area_resize(img[7:31, 3:20], 24, 24), rtol=0, atol=1e-4)


def test_normalise_is_nchw_and_scaled():
    hwc = np.array([[[0, 127, 255]]], np.uint8)
    out = normalise(hwc)
    assert out.shape == (3, 1, 1)
    np.testing.assert_allclose(out[:, 0, 0], [-0.99609375, -0.00390625, 0.99609375])


def test_generate_boxes_maps_cells_to_pixels():
    prob = np.zeros((3, 4), F32)
    prob[1, 2] = 0.8  # row y=1, column x=2
    prob[2, 0] = 0.6
    reg = np.zeros((4, 3, 4), F32)
    reg[:, 1, 2] = [0.1, 0.2, 0.3, 0.4]
    boxes = generate_boxes(reg, prob, 0.5, 0.6)
    # cell (x=2, y=1): x1 = floor((2*2+1)/0.5) = 10, y1 = floor(3/0.5) = 6, x2 = floor((4+12)/0.5) = 32
    np.testing.assert_allclose(boxes[0], [10, 6, 32, 28, 0.8, 0.1, 0.2, 0.3, 0.4], atol=1e-6)
    np.testing.assert_allclose(boxes[1, :5], [2, 10, 24, 32, 0.6], atol=1e-6)
    assert boxes.dtype == np.float32


def test_regress_with_and_without_plus_one():
    box = np.array([[10, 20, 29, 59, 0.9]], F32)
    reg = np.array([[0.1, -0.1, 0.2, 0.0]], F32)
    np.testing.assert_allclose(regress(box, reg, plus_one=False)[0], [11.9, 16.1, 32.8, 59, 0.9], atol=1e-5)
    np.testing.assert_allclose(regress(box, reg, plus_one=True)[0], [12, 16, 33, 59, 0.9], atol=1e-5)


def test_square_keeps_centre_and_uses_longer_side():
    out = square(np.array([[10, 20, 30, 60, 0.5]], F32))
    np.testing.assert_allclose(out[0], [0, 20, 40, 60, 0.5])


def test_crop_windows_clip_to_image_and_flag_empty():
    boxes = np.array([[-5.7, 3.9, 20.2, 30.0], [90, 90, 130, 130], [200, 10, 220, 30]], F32)
    windows, valid = crop_windows(boxes, 100, 80)
    # trunc(-5.7) = -5 -> clipped to 1 -> column 0; rows 3-1 .. 30
    assert windows.tolist() == [[2, 30, 0, 20], [89, 80, 89, 100], [9, 30, 199, 100]]
    assert valid.tolist() == [True, False, False]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([[1, 2, 3]], "MTCNN input is a list; expected an RGB image as a uint8 numpy array of shape (H, W, 3)"),
        (
            np.zeros((0, 10, 3), np.uint8),
            "MTCNN input image is empty (shape (0, 10, 3)); "
            "expected an RGB image as a uint8 numpy array of shape (H, W, 3)",
        ),
        (
            np.zeros((10, 10), np.uint8),
            "MTCNN input image has shape (10, 10); expected an RGB image as a uint8 numpy array of shape (H, W, 3)",
        ),
        (
            np.zeros((10, 10, 3), np.float32),
            "MTCNN input image has dtype float32; expected an RGB image as a uint8 numpy array of shape (H, W, 3)",
        ),
    ],
)
def test_check_image_rejects_bad_input(value, message):
    with pytest.raises(InputError) as err:
        check_image(value)
    assert str(err.value) == message


def test_missing_model_file_names_it(tmp_path: Path):
    with pytest.raises(InferenceError) as err:
        MtcnnDetector(tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'mtcnn_pnet.onnx'}: MTCNN model file not found; export it with converters.face.mtcnn"
    )


def test_bad_settings_are_rejected(tmp_path: Path):
    with pytest.raises(InputError) as err:
        MtcnnDetector(tmp_path, factor=1.2)
    assert str(err.value) == "MtcnnDetector factor = 1.2; expected a number in (0, 1)"
    with pytest.raises(InputError) as err:
        MtcnnDetector(tmp_path, thresholds=(0.6, 0.7))
    assert str(err.value) == (
        "MtcnnDetector thresholds = (0.6, 0.7); expected three numbers in [0, 1] (PNet, RNet, ONet)"
    )


def test_detector_module_imports_only_device_dependencies():
    import edge.face.detect_mtcnn as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    stdlib = {"__future__", "collections", "enum", "functools", "pathlib", "typing"}
    assert roots <= stdlib | {"numpy", "cv2", "edge"}, roots


def test_integral_image_sums_every_top_left_rectangle_and_switches_to_float64_when_int32_could_overflow(monkeypatch):
    import edge.face.detect_mtcnn as mtcnn

    img = np.random.default_rng(1).integers(0, 256, size=(13, 17, 3), dtype=np.uint8)
    small = integral_image(img)
    expected = np.zeros((14, 18, 3), np.int64)
    expected[1:, 1:] = img.astype(np.int64).cumsum(axis=0).cumsum(axis=1)
    assert small.dtype == np.int32 and np.array_equal(small, expected)
    monkeypatch.setattr(mtcnn, "_INT32_PIXELS", 13 * 17 - 1)  # as if 255 * pixels could overflow int32
    large = integral_image(img)
    assert large.dtype == np.float64 and np.array_equal(large, expected)
    window = (2, 11, 3, 16)
    assert np.array_equal(area_resize_window(large, window, 5, 7), area_resize_window(small, window, 5, 7))
    assert integral_image(img[:, :, :1]).shape == (14, 18, 1)  # one channel keeps its axis


def test_the_resize_equals_the_previous_code_bit_for_bit():
    """integral_image + area_resize_window give the very float32 values of the code they replaced (row-by-row
    numpy cumulative sums and a float64 column cumsum, kept as the baseline of scripts/arm/run_detect_parts.py),
    so the detectors' inputs did not move."""
    import importlib.util
    import sys

    from skimage import data

    arm = Path(__file__).resolve().parents[2] / "scripts" / "arm"
    sys.path.insert(0, str(arm))  # the script imports its neighbour marks.py
    try:
        spec = importlib.util.spec_from_file_location("run_detect_parts", arm / "run_detect_parts.py")
        before = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(before)
    finally:
        sys.path.remove(str(arm))
    rng = np.random.default_rng(2)
    for img in (data.astronaut(), rng.integers(0, 256, (301, 457, 3), dtype=np.uint8)):
        old, new = before._baseline_integral(img), integral_image(img)
        h, w = img.shape[:2]
        for window in ((0, h, 0, w), (7, h - 3, 11, w - 5), (10, 40, 5, 60)):
            for size in ((144, 192), (24, 24), (48, 48), (h // 3 + 1, w // 3 + 1), (2 * h // 3, w + 3)):
                want = before._baseline_resize(old, window, *size)
                assert np.array_equal(area_resize_window(new, window, *size), want), (window, size)


def test_a_float32_division_of_a_window_sum_rounds_as_the_float64_division_it_replaced():
    """area_resize_window divides in float32 while a window holds at most _FLOAT32_EXACT_COUNT pixels: every sum
    of uint8 values is then exact in float32, and the quotient equals float32(float64 sum / count). Checked for
    every sum of every count up to 256 and for sampled sums of larger counts up to the bound; beyond it the
    plan keeps float64."""
    import edge.face.detect_mtcnn as mtcnn

    def both(sums: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        return sums.astype(np.float32) / np.float32(count), (sums.astype(np.float64) / count).astype(np.float32)

    for count in range(1, 257):
        f32, f64 = both(np.arange(255 * count + 1), count)
        assert np.array_equal(f32, f64), count
    rng = np.random.default_rng(3)
    for count in (*rng.integers(257, mtcnn._FLOAT32_EXACT_COUNT, 40), mtcnn._FLOAT32_EXACT_COUNT):
        sums = np.concatenate([rng.integers(0, 255 * count + 1, 100_000), 255 * count - np.arange(1000)])
        f32, f64 = both(sums, int(count))
        assert np.array_equal(f32, f64), count
    assert 255 * mtcnn._FLOAT32_EXACT_COUNT < 2**24 <= 255 * (mtcnn._FLOAT32_EXACT_COUNT + 1)
    plan = mtcnn._cached_area_plan(480, 640, 144, 192, 3)
    assert plan.counts.dtype == np.float32 and not any(a.flags.writeable for a in plan)  # shared: read-only
    assert mtcnn._area_plan(2000, 2000, 2, 2, 3).counts.dtype == np.float64  # 1000 x 1000 pixels a window
    big = np.full((2000, 2000, 3), 255, np.uint8)
    assert np.array_equal(area_resize(big, 2, 2), np.full((2, 2, 3), 255, np.float32))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_area_resize_of_a_whole_image_equals_the_integral_images_box_sums_bit_for_bit(channels: int):
    """area_resize sums rows then columns in uint16, without an integral image: the very float32 values of
    area_resize_window over the integral image, down and up, for frames a camera gives and odd sizes, on
    random and on all-white images (the largest sums)."""
    rng = np.random.default_rng(channels)
    sizes = [((480, 640), (144, 192)), ((720, 1280), (108, 192)), ((1080, 1920), (108, 192)), ((886, 1280), (133, 192))]
    sizes += [((97, 203), (46, 96)), ((5, 7), (12, 3)), ((1, 1), (3, 2)), ((600, 512), (192, 164)), ((17, 17), (1, 1))]
    for (h, w), out in sizes:
        for img in (rng.integers(0, 256, (h, w, channels), dtype=np.uint8), np.full((h, w, channels), 255, np.uint8)):
            want = area_resize_window(integral_image(img), (0, h, 0, w), *out)
            got = area_resize(img, *out)
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), ((h, w), out)


def test_area_resize_takes_the_integral_image_where_a_uint16_sum_could_overflow():
    """A window of more than 257 pixels (255 * 258 >= 2**16) or more than 4 channels (beyond OpenCV's transpose)
    goes through the integral image: the plan says so, and the values are still right."""
    import edge.face.detect_mtcnn as mtcnn

    assert mtcnn._cached_pooling_plan(257, 1, 1, 1, 1) is not None  # 257 pixels: 255 * 257 < 2**16
    assert mtcnn._cached_pooling_plan(258, 1, 1, 1, 1) is None
    assert mtcnn._cached_pooling_plan(480, 640, 5, 144, 192) is None
    plan = mtcnn._cached_pooling_plan(480, 640, 3, 144, 192)
    assert plan is not None and not any(a.flags.writeable for a in plan)  # cached: read-only
    white = np.full((258, 2, 3), 255, np.uint8)
    assert np.array_equal(area_resize(white, 1, 1), np.full((1, 1, 3), 255, np.float32))
    five = np.random.default_rng(5).integers(0, 256, (30, 40, 5), dtype=np.uint8)
    assert np.array_equal(area_resize(five, 7, 9), area_resize_window(integral_image(five), (0, 30, 0, 40), 7, 9))
