"""``face recognize FOLDER --save-annotated DIR`` on the converted fp32 face models: real photos, real drawings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from converters.demo.host import HELD_OUT, write_gallery_photos
from converters.face.facedata import make_eval_images
from edge.face.annotate import KNOWN, TEXT, UNKNOWN
from edge.imageio import load_image, save_image
from edge_deploy.cli import main

pytestmark = pytest.mark.integration

VIEWS = ("t1/aug1", "tom_hanks/aug2")


@pytest.fixture(scope="module")
def scene(face_fp32_models, tmp_path_factory) -> dict:
    """A gallery as the demo enrolls it (t1's person 6 held out) and a folder of two other views of the photos."""
    root = tmp_path_factory.mktemp("annotate")
    write_gallery_photos(root / "people")
    gallery = root / "gallery.npz"
    assert main(["face", "enroll", str(face_fp32_models), str(root / "people"), "-o", str(gallery), "--json"]) == 0
    photos = root / "photos"
    photos.mkdir()
    for image in make_eval_images(seed=1):
        if image.name in VIEWS:
            save_image(photos / (image.name.replace("/", "_") + ".jpg"), image.rgb)
    return {"models": face_fp32_models, "gallery": gallery, "photos": photos}


def _is(pixel, colour) -> bool:
    return bool(np.all(np.abs(pixel.astype(int) - np.array(colour)) <= 2))


def test_a_folder_is_recognised_and_every_image_annotated(scene, tmp_path, capsys):
    out = tmp_path / "annotated"
    argv = ["face", "recognize", str(scene["models"]), str(scene["photos"]), "-g", str(scene["gallery"])]
    assert main([*argv, "--save-annotated", str(out), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in results] == [str(scene["photos"] / f"{v.replace('/', '_')}.jpg") for v in VIEWS]
    assert [r["annotated"] for r in results] == [str(out / f"{v.replace('/', '_')}.png") for v in VIEWS]
    t1, hanks = results
    assert len(t1["faces"]) == 6 and len(hanks["faces"]) == 1
    assert sorted(f["name"] or "unknown" for f in t1["faces"]) == [f"t1_person{i}" for i in range(1, 6)] + ["unknown"]
    assert hanks["faces"][0]["name"] == "tom_hanks"
    for r in results:
        source, drawn = load_image(r["image"]), load_image(r["annotated"])
        assert drawn.shape == source.shape
        for f in r["faces"]:
            x1, y1, x2, y2 = (round(v) for v in f["box"])
            colour = KNOWN if f["name"] else UNKNOWN
            # the box's left edge, half-way down, is drawn in the colour that says known / unknown
            assert _is(drawn[(y1 + y2) // 2, x1], colour), (r["image"], f["name"])
            # the label band above the box (or inside it at the top) carries white text
            band = drawn[max(0, y1 - 40) : y1 + 40, x1 : x1 + 200].reshape(-1, 3)
            assert sum(_is(p, TEXT) for p in band) > 30, (r["image"], f["name"])
        # far from every face the photo is as it was
        far = np.ones(source.shape[:2], bool)
        for f in r["faces"]:
            x1, y1, x2, y2 = (round(v) for v in f["box"])
            far[max(0, y1 - 60) : y2 + 10, max(0, x1 - 300) : x2 + 300] = False  # a label may shift to fit
        assert np.array_equal(drawn[far], source[far])
    unknown = next(f for f in t1["faces"] if f["name"] is None)
    assert unknown["distance"] > 0.6  # the held-out person
    assert HELD_OUT == "t1_person6"


def test_a_pattern_and_an_unreadable_image_go_on_and_exit_non_zero(scene, tmp_path, capsys):
    """A broken file is reported by name; the others are still recognised and drawn; the exit code says so."""
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff not really a jpeg")
    out = tmp_path / "annotated"
    pattern = str(scene["photos"] / "t1_*.jpg")
    argv = ["face", "recognize", str(scene["models"]), pattern, str(broken), "-g", str(scene["gallery"])]
    assert main([*argv, "--save-annotated", str(out)]) == 3
    captured = capsys.readouterr()
    assert f"  annotated: {out / 't1_aug1.png'}\n" in captured.out
    assert f"{broken}: error: {broken}: not an image" in captured.out
    assert captured.err.startswith(f"Error: 1 of 2 images could not be analysed; first: {broken}: not an image")
    assert sorted(p.name for p in out.iterdir()) == ["t1_aug1.png"]
