"""Issue 17 with the real face models: one bad image among good ones costs only its own result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.face.gallery import Gallery
from edge_deploy.cli import main

pytestmark = pytest.mark.integration


def test_recognize_keeps_the_good_images_results(face_fp32_models: Path, tmp_path: Path, capsys) -> None:
    from converters.face.facedata import package_dir
    from tests.hostile_files import zero_png

    good = package_dir("insightface") / "data" / "images" / "t1.jpg"
    huge = zero_png(tmp_path / "huge.png", 40000, 40000)
    text = tmp_path / "notes.jpg"
    text.write_text("not a photo")
    gallery = Gallery().save(tmp_path / "g.npz")
    argv = ["face", "recognize", str(face_fp32_models), str(good), str(huge), str(text), "-g", str(gallery), "--json"]
    assert main(argv) == 3
    out, err = capsys.readouterr()
    results = json.loads(out)
    assert [r["image"] for r in results] == [str(good), str(huge), str(text)]
    assert len(results[0]["faces"]) == 6  # the photo's six people, all unknown to an empty gallery
    assert "PNG image of 40000x40000 = 1600.0 megapixels" in results[1]["error"]
    assert results[2]["error"] == f"{text}: not an image (11 bytes with no JPEG, PNG, BMP, WebP signature)"
    assert err.startswith(f"Error: 2 of 3 images could not be analysed; first: {huge}: PNG image of 40000x40000")


@pytest.mark.parametrize("kind", ["huge_array", "nested_arrays", "wrapping_offset"])
def test_convert_slm_refuses_a_hostile_gguf_in_one_line(tmp_path: Path, kind: str) -> None:
    """Issue 44, item 6, through the installed CLI: exit 4, one line, no traceback, no output folder."""
    import subprocess
    import sys

    from tests import hostile_files

    make = {
        "huge_array": hostile_files.gguf_huge_array,
        "nested_arrays": hostile_files.gguf_nested_arrays,
        "wrapping_offset": lambda p: hostile_files.gguf_tensor_at(p, 2**64 - 64),
    }[kind]
    bad, out_dir = make(tmp_path / "bad.gguf"), tmp_path / "out"
    argv = ["convert", "slm", "--target", "rpi4", "--gguf", str(bad), "-o", str(out_dir)]
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "edge_deploy", *argv], capture_output=True, text=True, timeout=120, cwd=repo
    )
    assert (proc.returncode, proc.stdout) == (4, "")
    assert proc.stderr.startswith(f"Error: {bad}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not out_dir.exists()
