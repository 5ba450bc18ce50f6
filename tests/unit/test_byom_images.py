"""``convert model`` with folders of images as --calib / --eval: real photos, resized and normalised."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from converters.byom.images import ImageOptions, Layout, read_image_folder
from converters.byom.source import TensorSpec
from edge.errors import InputError
from edge.imageio import save_image
from edge.profiles import Precision, load_profile
from edge_deploy.cli import main
from tests.unit.byom_models import (
    image_pairs,
    write_classifier,
    write_embedder,
    write_npz,
    write_photo_folder,
    write_two_inputs,
)

F32, U8 = np.dtype(np.float32), np.dtype(np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("byom-images")
    write_embedder(d / "emb.onnx")
    write_embedder(d / "emb_nhwc_u8.onnx", nhwc=True, uint8=True)
    write_photo_folder(d / "calib", seed=10, count=32)
    write_photo_folder(d / "eval", seed=11, count=12)
    return d


def _solid(folder: Path, colours: dict[str, tuple[int, int, int]], size=(20, 30)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rgb in colours.items():
        save_image(folder / name, np.full((*size, 3), rgb, np.uint8))
    return folder


def _read(folder: Path, shape, dtype=F32, **options) -> np.ndarray:
    samples = read_image_folder(
        folder, Path("m.onnx"), [TensorSpec("x", dtype, shape)], "--eval", ImageOptions(**options)
    )
    return samples.arrays["x"]


# --- what reaches the model ----------------------------------------------------------------------------------


def test_pixels_are_normalised_per_channel_in_file_order(tmp_path):
    folder = _solid(tmp_path / "s", {"b.png": (0, 0, 255), "a.png": (200, 100, 50)})
    nchw = _read(folder, (2, 3, 8, 8), mean=(100.0, 50.0, 25.0), std=(2.0, 4.0, 5.0))
    assert nchw.dtype == F32 and nchw.shape == (2, 3, 8, 8)
    np.testing.assert_array_equal(nchw[0, :, 0, 0], [50.0, 12.5, 5.0])  # a.png first: (200-100)/2, ...
    np.testing.assert_array_equal(nchw[1, :, 3, 5], [-50.0, -12.5, 46.0])
    nhwc = _read(folder, (1, 8, 8, 3))  # defaults: pixels / 255
    np.testing.assert_allclose(nhwc[0, 4, 4], np.array([200, 100, 50]) / 255, rtol=1e-6)
    assert _read(folder, (1, 8, 8, 3), U8)[1, 7, 7].tolist() == [0, 0, 255]  # uint8: the pixels
    grey = _read(folder, (1, 1, 4, 4), mean=(0.0,), std=(1.0,))
    assert grey.shape == (2, 1, 4, 4) and grey[0, 0, 0, 0] == round(0.299 * 200 + 0.587 * 100 + 0.114 * 50)


def test_a_real_photo_is_area_averaged_to_the_input(tmp_path):
    from skimage import data

    photo = data.astronaut()  # 512x512, decoded by skimage, not by our reader
    (tmp_path / "p").mkdir()
    save_image(tmp_path / "p" / "astronaut.png", photo)
    got = _read(tmp_path / "p", (1, 3, 16, 16), std=(1.0,))  # pixels 0..255, NCHW
    blocks = photo.astype(np.float64).reshape(16, 32, 16, 32, 3).mean(axis=(1, 3)).transpose(2, 0, 1)
    assert np.abs(got[0] - blocks).max() <= 0.5 + 1e-6  # only uint8 rounding after cv2's area resize


def test_the_report_records_the_preprocessing(files, tmp_path):
    out = tmp_path / "out"
    job = ModelJob(
        model=files / "emb.onnx",
        out_dir=out,
        profile=load_profile("rpi4"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "eval",
        calibration=files / "calib",
        input_shapes={"x": (4, 3, 16, 16)},
        images=ImageOptions(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375)),
    )
    build = convert_model(job)
    assert build.passed and (out / "models.json").is_file()
    report = json.loads((out / "report.json").read_text())
    assert report["calibration"]["samples"] == 32 and report["evaluation"]["samples"] == 12
    pre = report["evaluation"]["preprocessing"]
    assert pre["layout"] == "nchw" and pre["size"] == [16, 16] and pre["images"] == 12
    assert pre["mean"] == pytest.approx([123.675, 116.28, 103.53]) and pre["std"] == pytest.approx(
        [58.395, 57.12, 57.375]
    )
    assert report["evaluation"]["shared_with_calibration"] == 0
    assert build.figures["embedding"]["cosine_mean"] > 0.99
    assert (
        "12 samples from" in (out / "report.md").read_text()
        and "RGB 16x16 NCHW float32" in (out / "report.md").read_text()
    )


def test_an_nhwc_uint8_model_gets_raw_pixels(files, tmp_path):
    out = tmp_path / "out"
    job = ModelJob(
        model=files / "emb_nhwc_u8.onnx",
        out_dir=out,
        profile=load_profile("rpi5"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "eval",
        calibration=files / "calib",
        input_shapes={"x": (2, 16, 16, 3)},
    )
    build = convert_model(job)
    assert build.passed
    pre = build.evaluation["preprocessing"]
    assert (pre["layout"], pre["dtype"], pre["mean"]) == ("nhwc", "uint8", None)


# --- refused, with the reason ----------------------------------------------------------------------------------


def _refused(files: Path, tmp_path: Path, **kw) -> str:
    out = tmp_path / "out"
    base: dict = dict(
        model=files / "emb.onnx",
        out_dir=out,
        profile=load_profile("rpi4"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "eval",
        calibration=files / "calib",
        input_shapes={"x": (4, 3, 16, 16)},
    )
    base.update(kw)
    with pytest.raises(InputError) as err:
        convert_model(ModelJob(**base))
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    return str(err.value)


def test_an_empty_folder(files, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _refused(files, tmp_path, evaluation=empty) == (
        f"--eval {empty}: no images; expected image files (.jpg, .jpeg, .png, .bmp, .webp) or a .npz"
    )
    (empty / "labels.txt").write_text("cat\n")
    assert _refused(files, tmp_path, evaluation=empty) == (
        f"--eval {empty}: no images (it has 1 other files, e.g. labels.txt); expected image files (.jpg, .jpeg, "
        ".png, .bmp, .webp) or a .npz"
    )


def test_an_unreadable_image_is_named(files, tmp_path):
    folder = write_photo_folder(tmp_path / "photos", seed=3, count=8)
    bad = folder / "img003.jpg"
    bad.write_bytes(bad.read_bytes()[:40])
    assert _refused(files, tmp_path, calibration=folder).startswith(f"{bad}: not an image (")
    bad.write_bytes(b"")
    assert _refused(files, tmp_path, calibration=folder) == f"{bad}: empty file (0 bytes); expected an image"


def test_a_remainder_is_refused_not_dropped(files, tmp_path):
    folder = write_photo_folder(tmp_path / "photos", seed=3, count=6)
    assert _refused(files, tmp_path, evaluation=folder) == (
        f"--eval {folder}: 6 images; expected a multiple of 4, the batch of the model's input 'x' (4x3x16x16): "
        "add 2 or remove 2"
    )


def test_a_model_with_two_inputs(files, tmp_path):
    model = write_two_inputs(tmp_path / "two.onnx")
    message = _refused(files, tmp_path, model=model, input_shapes={"a": (4, 8), "b": (4, 8)}, task=Task.RAW)
    assert message == (
        f"--eval: an image folder feeds a model with one image input; {model} has 2 inputs (a=4x8, b=4x8); give a "
        ".npz with one array per input"
    )


def test_a_non_image_input(files, tmp_path):
    model = write_classifier(tmp_path / "cls.onnx")
    message = _refused(files, tmp_path, model=model, input_shapes={}, task=Task.CLASSIFICATION)
    assert message == (
        f"--eval: {model}'s input 'x' is 1x20, not an image; expected a 4-D input of 1 or 3 channels (Bx3xHxW or "
        "BxHxWx3); give a .npz instead"
    )
    folder = _solid(tmp_path / "s", {"a.png": (1, 2, 3)})
    with pytest.raises(InputError, match=r"'x' is 1x5x8x8, not an image; expected a 4-D input of 1 or 3 channels"):
        _read(folder, (1, 5, 8, 8))
    with pytest.raises(InputError, match=r"'x' is int64; images feed float32 or uint8 inputs"):
        _read(folder, (1, 3, 8, 8), np.dtype(np.int64))


def test_an_ambiguous_layout_needs_the_flag(tmp_path):
    folder = _solid(tmp_path / "s", {"a.png": (10, 20, 30)})
    with pytest.raises(InputError) as err:
        _read(folder, (1, 3, 8, 3))
    assert str(err.value) == (
        "--eval: m.onnx's input 'x' is 1x3x8x3: axis 1 and axis 3 could both hold the channels; say which with "
        "--layout nchw or --layout nhwc"
    )
    assert _read(folder, (1, 3, 8, 3), layout=Layout.NHWC, std=(1.0,))[0, 0, 0].tolist() == [10, 20, 30]
    assert _read(folder, (1, 3, 8, 3), layout=Layout.NCHW, std=(1.0,))[0, :, 0, 0].tolist() == [10, 20, 30]
    with pytest.raises(InputError, match=r"^--layout nhwc: m.onnx's input 'x' is 1x3x8x8; axis 3 has 8, expected"):
        _read(folder, (1, 3, 8, 8), layout=Layout.NHWC)


@pytest.mark.parametrize(
    ("options", "dtype", "message"),
    [
        ({"mean": (1.0, 2.0)}, F32, "--mean 1,2: 2 values for an input of 3 channels"),
        ({"std": (0.0,)}, F32, "--std 0: 0.0 is not a finite number > 0"),
        ({"mean": (float("nan"),)}, F32, "--mean nan: nan is not a finite number"),
        ({"std": (255.0,)}, U8, "--mean/--std: m.onnx's input 'x' is uint8, fed the pixels as they are (0-255); "
         "normalisation is for float32 inputs"),
    ],
)  # fmt: skip
def test_bad_normalisation(tmp_path, options, dtype, message):
    folder = _solid(tmp_path / "s", {"a.png": (1, 2, 3)})
    with pytest.raises(InputError) as err:
        _read(folder, (1, 3, 8, 8), dtype, **options)
    assert str(err.value) == message


def test_normalisation_flags_without_an_image_folder(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=image_pairs(0, 8))
    evaluation = write_npz(tmp_path / "e.npz", x=image_pairs(1, 8))
    message = _refused(files, tmp_path, calibration=calib, evaluation=evaluation, images=ImageOptions(mean=(1.0,)))
    assert message == (
        "--mean/--std/--layout: apply to image folders, and neither --calib nor --eval is one (a .npz is taken as "
        "it is: normalise its tensors yourself)"
    )


def test_the_same_pictures_twice_are_refused_as_calibration(files, tmp_path):
    assert "is the same data as --calib" in _refused(files, tmp_path, evaluation=files / "calib")


# --- the CLI ---------------------------------------------------------------------------------------------------


def test_cli_flags_and_help(files, tmp_path, capsys):
    argv = [
        "convert", "model", str(files / "emb.onnx"), "--target", "rpi4", "--precision", "int8",
        "--calib", str(files / "calib"), "--eval", str(files / "eval"), "--task", "embedding",
        "--input", "x=4x3x16x16", "--mean", "127.5", "--std", "127.5", "--layout", "nchw",
    ]  # fmt: skip
    assert main([*argv, "-o", str(tmp_path / "ok"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["calibration"]["preprocessing"]["mean"] == [127.5, 127.5, 127.5]
    assert main([*argv[:-6], "--mean", "1,x", "-o", str(tmp_path / "bad")]) == 3
    assert capsys.readouterr().err == (
        "Error: --mean '1,x': expected numbers separated by commas, e.g. 123.675,116.28,103.53\n"
    )
    with pytest.raises(SystemExit):
        main(["convert", "model", "--help"])
    out = capsys.readouterr().out
    assert "--calib photos/calib/" in out and "--mean 123.675,116.28,103.53" in out


def test_a_missing_path_names_both_kinds_of_data(files, tmp_path):
    missing = tmp_path / "nowhere"
    assert _refused(files, tmp_path, evaluation=missing) == (
        f"--eval {missing}: no such file or folder; expected a .npz with one array per model input, or a folder of "
        "images"
    )
