"""docs/python-api.md runs: every ```python block, each in its own interpreter, from a folder holding what the
doc names (the session's converted face and language models, photos shipped in packages, a small ONNX model,
a fleet store), so the doc cannot go stale."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import cv2
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


def test_the_doc_has_the_four_quick_starts():
    assert len(BLOCKS) == 4
    assert [("recognize_image" in b, "TextGenerator" in b, "convert_model" in b, "open_store" in b) for b in BLOCKS] == [
        (True, False, False, False), (False, True, False, False), (False, False, True, False),
        (False, False, False, True),
    ]  # fmt: skip


def _photos(folder: Path) -> None:
    """people/NAME/*.png (the demo's gallery crops) and photos/*.jpg (other views of the same photos)."""
    from converters.demo.host import write_gallery_photos
    from converters.face.facedata import make_eval_images

    write_gallery_photos(folder / "people")
    (folder / "photos").mkdir()
    views = [im for im in make_eval_images(seed=1) if not im.name.endswith("/original")][:3]
    for image in views:
        cv2.imwrite(str(folder / "photos" / (image.name.replace("/", "_") + ".jpg")), image.rgb[..., ::-1])


def _model_files(folder: Path) -> None:
    from testsupport.byom_models import image_pairs, write_embedder, write_npz

    write_embedder(folder / "net.onnx")  # x [batch, 3, 16, 16] -> emb [batch, 32]
    write_npz(folder / "calib.npz", x=image_pairs(0, 32))
    write_npz(folder / "eval.npz", x=image_pairs(1, 32))


def _fleet_store(path: Path) -> None:
    from edge.telemetry.schema import Telemetry, to_json
    from fleet.store import open_store

    with open_store(path) as store:
        report = Telemetry(device_id="pi-kitchen", seq=1, timestamp=100.0, latency_p50_ms=41.0, latency_p90_ms=48.0,
                           fps=9.5)  # fmt: skip
        assert store.handle("edge-deploy/pi-kitchen/telemetry", to_json(report), received=100.0) == "stored"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, face_fp32_models: Path, slm_int4: dict) -> Path:
    folder = tmp_path_factory.mktemp("python-api")
    (folder / "out").mkdir()
    (folder / "out" / "face").symlink_to(face_fp32_models)
    (folder / "out" / "slm").symlink_to(slm_int4["result"].out_dir)
    _photos(folder)
    _model_files(folder)
    _fleet_store(folder / "fleet.db")
    return folder


def _run(block: str, cwd: Path) -> str:
    run = subprocess.run([sys.executable, "-c", block], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"{block}\n--- stderr:\n{run.stderr}"
    return run.stdout


def test_recognise_faces_in_a_folder(workdir: Path):
    out = _run(BLOCKS[0], workdir)
    lines = out.splitlines()
    assert len(lines) >= 3 and (workdir / "gallery.npz").is_file()
    named = [line.split()[1] for line in lines if line.split()[1] != "unknown"]
    people = {p.name for p in (workdir / "people").iterdir()}
    assert named and set(named) <= people


def test_generate_text(workdir: Path):
    out = _run(BLOCKS[1], workdir)
    answer, streamed = out.splitlines()[:2]  # the words depend on the host's kernels (docs/slm.md): not checked
    assert re.fullmatch(r".+ \(\d+ tokens/s\)", answer) and streamed.strip()


def test_convert_a_model(workdir: Path):
    out = _run(BLOCKS[2], workdir)
    shipped, cosine = out.split()
    assert shipped.startswith("int8") and 0.9 < float(cosine) <= 1.0
    assert (workdir / "out" / "net" / "models.json").is_file()


def test_read_the_fleet_store(workdir: Path):
    out = _run(BLOCKS[3], workdir)
    assert out.split() == ["pi-kitchen", "None", "41.0", "1"]  # no status message yet: online unknown
