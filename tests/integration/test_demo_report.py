"""The demo's HTML report (converters.demo.html_report) over a real face demo run on the converted fp32 models,
with the gate's report and the emulated Pi's figures as the demo's other steps write them."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser

import numpy as np
import pytest

from converters.demo.host import run_face_demo
from converters.demo.html_report import write_html_report
from converters.demo.pi import PiRun
from edge.face.annotate import KNOWN
from edge.imageio import load_image

pytestmark = pytest.mark.integration

VOID = {"meta", "img", "br", "hr", "link", "input"}


class _Page(HTMLParser):
    """Collects the images, the text, and whether every element that was opened was closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"])
        for key in ("src", "href"):
            if key in a:
                self.links.append(a[key])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.problems.append(f"</{tag}> closes nothing open")

    def handle_data(self, data):
        self.text.append(data)


def _gate_report() -> dict:
    cosines = np.round(np.random.default_rng(0).uniform(0.9991, 0.99995, 54), 6).tolist()
    disagreement = {"a": "t1/aug3", "b": "t1/aug5", "same": False, "fp32": 0.5987, "quant": 0.6012}
    return {
        "precision": "int8",
        "passed": True,
        "shipped": "ort",
        "thresholds": {"embed_mean_cosine": 0.999},
        "embedder": {
            "faces": len(cosines),
            "cosine_mean": float(np.mean(cosines)),
            "cosine_min": min(cosines),
            "cosines": cosines,
            "decisions": {"pairs": 1431, "agree": 1429, "agreement": 0.9986, "disagreements": [disagreement]},
        },
    }


def _pi_run(out_dir) -> PiRun:
    """The pi step's record and the two JSON files it leaves in emulated-pi/ (host and guest, per photo)."""
    run = PiRun(str(out_dir / "dist" / "rpi4-face"), None, 43, {"face": True, "wheels": True}, cpu="cortex-a72")
    run.comparison = {
        "photos": 2,
        "faces_host": 3,
        "faces_guest": 3,
        "box_max_abs_diff": 0.0625,
        "descriptor_max_abs_diff": 2.5e-7,
        "pairs": 3,
        "decisions_agree": 3,
        "distance_min_margin": 0.0813,
    }
    run.latency_ms = [2211.5, 1873.25]
    work = out_dir / "emulated-pi"
    work.mkdir(parents=True)
    faces = [{"box": [0, 0, 1, 1]}]
    host = {
        "photos": [
            {"photo": "astronaut.png", "ms": 61.5, "faces": faces},
            {"photo": "t1_crop.png", "ms": 70.0, "faces": faces * 2},
        ]
    }
    guest = {
        "photos": [
            {"photo": "astronaut.png", "ms": 2211.5, "faces": faces},
            {"photo": "t1_crop.png", "ms": 1873.25, "faces": faces * 2},
        ]
    }
    (work / "host.json").write_text(json.dumps(host))
    (work / "cortex-a72.json").write_text(json.dumps(guest))
    return run


def test_the_report_shows_the_photos_the_gate_and_the_emulated_pi(face_fp32_models, tmp_path):
    models = tmp_path / "models"
    shutil.copytree(face_fp32_models, models)
    (models / "quant_report.json").write_text(json.dumps(_gate_report()))
    result = run_face_demo(models, tmp_path / "demo", threads=2)
    result.pi = _pi_run(tmp_path / "demo")

    path = write_html_report(result)

    assert path == tmp_path / "demo" / "report" / "index.html"
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    assert page.problems == [] and page.stack == []
    # every picture is a PNG beside the page; nothing is fetched from elsewhere
    assert all("/" not in link and ":" not in link for link in page.links), page.links
    assert len(page.images) == len(result.images) + 3  # the photos, the two histograms, the Pi's times
    for src in page.images:
        assert (path.parent / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src
    # the photos carry the drawings: boxes in the known colour (every face of the demo is named or held out)
    first = load_image(path.parent / page.images[0])
    assert (np.abs(first.astype(int) - KNOWN).sum(axis=2) <= 6).sum() > 200
    text = " ".join(" ".join(page.text).split())
    # the demo's own figures
    for key, value in result.counts.items():
        assert f"{key} {value}" in text
    for face in (f for im in result.images for f in im["faces"]):
        assert f"{face['distance']:.4f}" in text
    assert "unknown" in text and "eileen_collins" in text
    # the gate's
    assert "int8 gate: PASSED" in text and "1429 of 1431 pairs" in text and "0.9986" in text
    assert "t1/aug3 t1/aug5 different 0.5987 0.6012" in text
    # the emulated Pi's, against the host's per-photo times
    assert "faces found: host / emulated Pi 3 / 3" in text and "descriptors: max |diff| 2.5e-07" in text
    assert "3 of 3" in text and "cortex-a72" in text
    assert "astronaut.png 1 1 61.5 2211.5 36.0" in text
