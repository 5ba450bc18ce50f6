"""The default browser site (``build --target browser-wasm --model all``): what it costs to build and to ship, the
face frame with its detector (BlazeFace full range tiled) against MTCNN in the same Chromium, and screenshots.

    .venv/bin/python -m benchmarks run browser_demo [--cache DIR] [--runs 5] [--threads 2]

Builds the site with the build cache (``--cache``; a cold cache times the model stages, a warm one the copying
only), then in headless Chromium: the sample photo recognised on load (the screenshot
``docs/img/browser-face.png``), a greedy answer (``browser-text.png``), a search (``browser-search.png``), and the
face frame of the site's detector and of MTCNN (the same face folder with models.json's ``detector`` removed),
interleaved, on insightface's t1.jpg and on grace_hopper letterboxed to 640x480. Writes the "browser-demo"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.report import machine_line, write_section
from edge.webserve import WebServer
from testsupport.browser import Chromium
from testsupport.needs import WEB, install_on_first_use

NAME = "browser_demo"
SUMMARY = "The default browser site: build time, size by part, BlazeFace vs MTCNN frames in Chromium, screenshots"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("browser-demo",)

REPO = Path(__file__).resolve().parent.parent
IMG = REPO / "docs" / "img"
SHOT_SCALE = 0.7
PARTS = (("face models", "models/", ("models/text/", "models/search/")), ("text model", "models/text/", ()),
         ("search encoder and sentences", "models/search/", ()), ("sample photos and gallery", "samples/", ()),
         ("onnxruntime-web", "ort/", ()))  # fmt: skip


def _sizes(manifest: dict) -> list[tuple[str, int]]:
    """Bytes of the site by part (the page's own files last)."""
    rows, counted = [], set()
    for name, prefix, exclude in PARTS:
        files = [f for f in manifest["files"] if f["path"].startswith(prefix) and not f["path"].startswith(exclude)]
        counted.update(f["path"] for f in files)
        rows.append((name, sum(f["size"] for f in files)))
    rows.append(("page (HTML, CSS, JavaScript)", sum(f["size"] for f in manifest["files"] if f["path"] not in counted)))
    return rows


def _shot(page: Chromium, element: str, name: str) -> Path:
    """A screenshot with ``#element`` at the top, scaled to ``SHOT_SCALE`` (kept small for the repository)."""
    import cv2
    import numpy as np

    page.driver.execute_script(f"document.getElementById('{element}').scrollIntoView()")
    path = IMG / name
    path.parent.mkdir(parents=True, exist_ok=True)
    image = cv2.imdecode(np.frombuffer(page.driver.get_screenshot_as_png(), np.uint8), cv2.IMREAD_COLOR)
    small = cv2.resize(image, None, fx=SHOT_SCALE, fy=SHOT_SCALE, interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(path), small, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    return path


def _text_and_search(page: Chromium) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    page.driver.find_element(By.ID, "max-tokens").clear()
    page.driver.find_element(By.ID, "max-tokens").send_keys("24")
    page.driver.find_element(By.ID, "generate").click()
    assert page.wait_state("text-output", ("done", "error"), 900) == "done", page.text("error")
    _shot(page, "text", "browser-text.png")
    page.driver.find_element(By.ID, "find").click()
    assert page.wait_state("search-results", ("done", "error"), 900) == "done", page.text("error")
    _shot(page, "search", "browser-search.png")
    return page.text("text-output"), page.text("search-results").splitlines()[0]


def _frames(page: Chromium, photo: Path, runs: int) -> tuple[list[float], list[float]]:
    """(detect ms, whole frame ms) of the page's pipeline on ``photo`` (first run apart)."""
    assert page.upload(photo) == "done", page.text("error")
    detect = page.driver.execute_async_script(f"edgeBench.detect({runs}).then(arguments[0])")
    frame = page.driver.execute_async_script(f"edgeBench.frame({runs}).then(arguments[0])")
    return detect, frame


def _race(sites: dict[str, Path], photos: dict[str, Path], threads: int, runs: int, blocks: int) -> list[tuple]:
    """Interleaved blocks per (site, photo): rows of (detector, photo, faces, detect ms, frame ms)."""
    pages = {name: Chromium() for name in sites}
    servers = {name: WebServer(site, port=0) for name, site in sites.items()}
    got: dict[tuple[str, str], tuple[list[float], list[float], int]] = {}
    try:
        for name, server in servers.items():
            server.__enter__()
            assert pages[name].open(f"{server.url}?threads={threads}&sample=none") == "ready", pages[name].text("error")
        for _ in range(blocks):
            for photo_name, photo in photos.items():
                for name, page in pages.items():
                    detect, frame = _frames(page, photo, runs)
                    faces = int(page.driver.find_element("id", "faces").get_attribute("data-count"))
                    d, f, _ = got.get((name, photo_name), ([], [], 0))
                    got[(name, photo_name)] = (d + detect[1:], f + frame[1:], faces)
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
        for page in pages.values():
            page.close()
    return [
        (name, photo, faces, statistics.median(d), statistics.median(f)) for (name, photo), (d, f, faces) in got.items()
    ]


def _mtcnn_site(face: Path, work: Path) -> Path:
    """The site of the same face folder with MTCNN as its detector."""
    from converters.face.blazeface import set_default_detector
    from converters.package.web import build_browser
    from edge.profiles import load_profile

    folder = work / "face-mtcnn"
    shutil.copytree(face, folder)
    set_default_detector(folder, "mtcnn")
    build_browser(load_profile("browser-wasm"), folder, work / "site-mtcnn", with_samples=False)
    return work / "site-mtcnn"


def _markdown(build_s: float, cache: str, sizes: list[tuple[str, int]], rows: list[tuple], answers, threads) -> str:
    total = sum(b for _, b in sizes)
    lines = [
        "## The default browser site (build --target browser-wasm --model all)",
        "",
        f"`.venv/bin/python -m benchmarks run browser_demo {' '.join(sys.argv[1:])}` — {machine_line()}.",
        "",
        f"Build: {build_s:.0f} s ({cache}). Size: {total / 1e6:.1f} MB.",
        "",
        "| part | MB |",
        "|---|---|",
        *(f"| {name} | {size / 1e6:.1f} |" for name, size in sizes),
        "",
        f"Face frame in headless Chromium (onnxruntime-web, {threads} threads; median ms, interleaved blocks):",
        "",
        "| detector | photo | faces | detect ms | whole frame ms |",
        "|---|---|---|---|---|",
        *(f"| {d} | {p} | {n} | {det:.0f} | {frame:.0f} |" for d, p, n, det, frame in rows),
        "",
        f"Greedy answer in the page: {answers[0]!r}. First search hit: {answers[1]!r}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness.arm_frames import one_face_frame_png
    from converters.face.facedata import package_dir
    from converters.package.bundle import build_browser_site, run_stage
    from converters.package.stages import STAGES, ModelKind
    from edge.profiles import Precision, load_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "edge-deploy" / "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=3)
    args = ap.parse_args(argv)
    install_on_first_use(WEB, "benchmarks/browser_demo.py")
    with tempfile.TemporaryDirectory(prefix="bench-web-demo-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        lines: list[str] = []
        site = build_browser_site(load_profile("browser-wasm"), ["all"], work / "site", Path(args.cache), lines.append)
        build_s = time.perf_counter() - start
        print("\n".join(lines), file=sys.stderr)
        reused = [w for w, key in (("face", "face models"), ("text", "slm models"), ("search", "search encoder"))
                  if any(line.startswith(key) and "cache" in line for line in lines)]  # fmt: skip
        cache = f"{', '.join(reused) or 'nothing'} reused from the build cache"
        manifest = json.loads(site.manifest.read_text())
        page = Chromium()
        try:
            with WebServer(site.out_dir, port=0) as server:
                assert page.open(server.url) == "ready", page.text("error")
                _shot(page, "face", "browser-face.png")
                answers = _text_and_search(page)
        finally:
            page.close()
        face = run_stage(
            STAGES[ModelKind.FACE], load_profile("browser-wasm"), Precision.FP32, Path(args.cache), print
        )[0]
        sites = {manifest["face"]["detector"]["kind"]: site.out_dir, "mtcnn": _mtcnn_site(face, work)}
        photos = {"t1.jpg 1280x886": package_dir("insightface") / "data" / "images" / "t1.jpg",
                  "grace_hopper 640x480": one_face_frame_png(work)}  # fmt: skip
        rows = _race(sites, photos, args.threads, args.runs, args.blocks)
    md = _markdown(build_s, cache, _sizes(manifest), rows, answers, args.threads)
    print(md)
    print(f"section written to {write_section('browser-demo', md)}; screenshots in {IMG}")
    return 0
