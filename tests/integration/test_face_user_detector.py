"""``edge-deploy convert face --detector MODEL``: a user's detector in BlazeFace's layout becomes the folder's.

The user's file here is MediaPipe's BlazeFace full range ``.tflite`` (mediapipe 0.10.21, Apache-2.0), copied
under another name as a user would bring a re-trained one: the build ships it unchanged (sha256 equal),
models.json records it under ``detector.blazeface_full`` with the licence given and names it the folder's
detector, the pipeline agreement with face_recognition runs with it (its gate passes: 99.8 % measured), and
``face recognize`` on the folder runs it on LiteRT (t1.jpg: 5 of the 6 people on the whole frame, as the
same model does in benchmarks/detector_quality.py).
"""

from __future__ import annotations

import json
import shutil

from converters.face.blazeface import FULL_RANGE, fetch_blazeface
from converters.face.facedata import package_dir
from edge.digest import file_sha256
from edge.face.gallery import Gallery
from edge.face.models import open_face_pipeline
from edge_deploy.cli import main


def test_a_user_detector_is_shipped_recorded_and_run(tmp_path, capsys) -> None:
    mine = shutil.copyfile(fetch_blazeface(variant=FULL_RANGE), tmp_path / "my_blazeface.tflite")
    out = tmp_path / "face"
    args = ["convert", "face", "--target", "rpi4", "--precision", "fp32", "--detector", str(mine),
            "--detector-licence", "Apache-2.0", "-o", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    built = json.loads(capsys.readouterr().out)
    models = json.loads((out / "models.json").read_text())
    assert models["detector"] == "blazeface-full"
    [entry] = [m for m in models["models"] if m["role"] == "detector.blazeface_full"]
    assert (entry["file"], entry["format"], entry["precision"]) == ("my_blazeface.tflite", "tflite", "fp32")
    assert entry["sha256"] == file_sha256(mine) == entry["source"]["sha256"]
    assert (entry["source"]["package"], entry["source"]["licence"]) == ("user model", "Apache-2.0")
    assert entry["source"]["layout"] == "BlazeFace 192x192"
    report = json.loads((out / "report.json").read_text())
    assert built["fp32"] == report  # --json prints the record report.json keeps
    assert report["passed"] and "detector.blazeface_full" in [m["role"] for m in report["models"]]
    assert report["dlib_proof"]["chips_from"].startswith("our pipeline's chips (blazeface-full box")
    assert report["pipeline_agreement"]["decision_agreement"] >= 0.99
    with open_face_pipeline(out) as pipeline:
        assert pipeline.detector.backend == "litert"
    t1 = package_dir("insightface") / "data" / "images" / "t1.jpg"
    gallery = Gallery().save(tmp_path / "g.npz")
    assert main(["face", "recognize", str(out), str(t1), "-g", str(gallery), "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert len(result["faces"]) == 5
