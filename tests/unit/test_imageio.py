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
    assert str(err.value) == f"{path}: not an image (12 bytes with no JPEG, PNG, BMP, WebP signature)"


def test_corrupt_jpeg_soi_then_garbage(tmp_path):
    data = T1.read_bytes()[:3] + bytes(np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8))
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: not an image (a JPEG signature but no readable size in 503 bytes)"


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
    assert str(err.value) == "camera frame 7: not an image (3 bytes with no JPEG, PNG, BMP, WebP signature)"


def test_save_rejects_bad_arrays_and_suffix(tmp_path):
    with pytest.raises(InputError) as err:
        save_image(tmp_path / "x.png", np.zeros((4, 4), np.uint8))
    assert str(err.value) == f"{tmp_path / 'x.png'}: image to save is uint8 (4, 4); expected uint8 [H, W, 3]"
    with pytest.raises(InputError) as err:
        save_image(tmp_path / "x.nope", np.zeros((4, 4, 3), np.uint8))
    assert str(err.value) == f"{tmp_path / 'x.nope'}: cv2 cannot encode an image with suffix '.nope'"


# --- issue 17, defect 2: size and pixel limits read from the header before decoding ------------------------


@pytest.fixture(scope="module")
def huge_pngs(tmp_path_factory):
    """The outside test's files: valid all-black PNGs of 40000x40000 (cv2.error escaped load_image) and
    30000x30000 (decoded: MemoryError after 50 s at 5.4 GB RSS)."""
    from tests.hostile_files import zero_png

    d = tmp_path_factory.mktemp("huge")
    return zero_png(d / "40k.png", 40000, 40000), zero_png(d / "30k.png", 30000, 30000)


def test_a_40000_square_png_is_refused_from_its_header(huge_pngs):
    path = huge_pngs[0]
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == (
        f"{path}: PNG image of 40000x40000 = 1600.0 megapixels; expected at most 67.1 (refused before decoding; "
        "the limit follows the board's memory)"
    )


def test_a_30000_square_png_is_refused_before_any_allocation(huge_pngs):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InputError, match=r"30000x30000 = 900\.0 megapixels; expected at most 67\.1"):
        load_image(huge_pngs[1])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: nothing decoded


def test_the_pixel_limit_follows_the_profile(tmp_path):
    from edge.profiles import load_profile

    zero = load_profile("rpi-zero-2w").memory.max_image_pixels
    assert zero == 512 * 2**20 // 64  # 8.4 MP on a 512 MB Pi Zero 2 W
    path = tmp_path / "p.png"
    save_image(path, np.zeros((3000, 3000, 3), np.uint8))  # 9 MP: fine on a host, too big for a Zero
    assert load_image(path).shape == (3000, 3000, 3)
    with pytest.raises(InputError, match=r"PNG image of 3000x3000 = 9\.0 megapixels; expected at most 8\.4"):
        load_image(path, zero)


@pytest.mark.parametrize("suffix", [".jpg", ".png", ".bmp", ".webp"])
def test_header_sizes_match_what_cv2_decodes(tmp_path, suffix):
    from edge.imageio import image_header

    rgb = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    path = save_image(tmp_path / f"x{suffix}", rgb)
    fmt, size = image_header(path.read_bytes())
    assert size == (53, 37) and fmt in ("JPEG", "PNG", "BMP", "WebP")
    assert load_image(path).shape == (37, 53, 3)


def test_a_lossless_webp_header_is_read(tmp_path):
    import cv2

    from edge.imageio import image_header

    ok, buf = cv2.imencode(".webp", np.zeros((1000, 3001, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 101])
    assert ok and image_header(buf.tobytes()) == ("WebP", (3001, 1000))


def test_an_oversized_file_is_not_read(tmp_path):
    from edge.imageio import MAX_FILE_BYTES

    path = tmp_path / "big.jpg"
    with open(path, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(InputError) as err:
        load_image(path)
    assert str(err.value) == f"{path}: {MAX_FILE_BYTES + 1} bytes; expected an image file of at most {MAX_FILE_BYTES}"


def test_image_files_expands_folders_and_patterns_in_order(tmp_path):
    """A folder gives its image files (sorted, by suffix, not its sub-folders); a pattern its matches; a file,
    even a missing one, is kept as given (load_image names it later); the same file twice counts once."""
    from edge.imageio import image_files

    photos = tmp_path / "photos"
    (photos / "sub").mkdir(parents=True)
    for name in ("b.png", "a.JPG", "notes.txt", ".hidden.png", "sub/c.png"):
        (photos / name).write_bytes(b"x")
    assert image_files([photos]) == [photos / "a.JPG", photos / "b.png"]
    assert image_files([str(photos / "*.png")]) == [photos / "b.png"]
    assert image_files([str(photos / "**" / "*.png")]) == [photos / "b.png", photos / "sub" / "c.png"]
    missing = tmp_path / "missing.jpg"
    assert image_files([photos / "b.png", missing, photos]) == [photos / "b.png", missing, photos / "a.JPG"]


def test_image_files_refuses_an_empty_folder_and_a_pattern_matching_nothing(tmp_path):
    from edge.imageio import image_files

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("no photos")
    with pytest.raises(InputError) as err:
        image_files([empty])
    assert (
        str(err.value) == f"{empty}: a folder with no image file; expected .jpg, .jpeg, .png, .bmp, .webp files in it"
    )
    with pytest.raises(InputError) as err:
        image_files([str(tmp_path / "*.jpg")])
    assert str(err.value) == f"{tmp_path}/*.jpg: the pattern matches no image file (.jpg, .jpeg, .png, .bmp, .webp)"
