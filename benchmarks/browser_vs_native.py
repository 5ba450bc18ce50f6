"""Browser (onnxruntime-web, wasm SIMD + threads, headless Chromium) vs native (onnxruntime, CPU) latency.

Same models, same inputs, same thread count, interleaved blocks (browser block, native block, repeat) so
that drift on a noisy machine hits both alike; the first run of each side is left out (steady state).
Contenders: dlib's ResNet embedder on one 150x150 chip, the whole MTCNN cascade on insightface's t1.jpg
(1280x886, the JS cascade around onnxruntime-web vs the numpy one around onnxruntime), the whole frame
(detect, align, describe every face: the page's FacePipeline.analyze vs open_face_pipeline's) on t1.jpg and
on arm_frame's one-face 640x480 frame, and the embedder as INT8 QDQ in the browser (to check the profile's
fp32 choice). Goal: browser / native <= 2.0.
Also saves a screenshot of the page to docs/img/browser-demo.png.

    .venv/bin/python -m benchmarks run browser_vs_native [--models DIR] [--text SLM_DIR] [--threads 2] [--blocks 5]

Writes the "browser" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness.arm_frames import one_face_frame_png
from benchmarks.harness.report import machine_line, write_section
from converters.package.web import build_browser
from edge.imageio import load_image
from edge.profiles import load_profile
from edge.webserve import WebServer
from testsupport.browser import Chromium
from testsupport.needs import WEB, install_on_first_use

NAME = "browser_vs_native"
SUMMARY = "Browser (onnxruntime-web in headless Chromium) against native onnxruntime latency"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("browser",)

REPO = Path(__file__).resolve().parent.parent

SCREENSHOT = REPO / "docs" / "img" / "browser-demo.png"


def _models(arg: str | None, work: Path) -> Path:
    if arg:
        return Path(arg)
    from converters.face.build import _export
    from edge.face.models import write_models_file

    out = work / "models"
    out.mkdir()
    entries, _ = _export(out, lambda m: print(m, file=sys.stderr))
    write_models_file(out, entries, "browser-wasm", "bench")
    return out


def _int8_embedder(models: Path, out: Path) -> Path:
    """The embedder as static INT8 QDQ with the browser profile's settings (calibrated on random chips:
    enough for timing, which is all this file is used for)."""
    from converters.quantize import QuantMode, quantize_model, settings_for

    chips = np.random.default_rng(0).uniform(0, 255, (8, 1, 3, 150, 150)).astype(np.float32)
    settings = settings_for(load_profile("browser-wasm"), QuantMode.STATIC_QDQ)
    return quantize_model(models / "face_embedder.onnx", out, settings, [{"chip": c} for c in chips])


def _timed(call: Callable[[], object], runs: int) -> list[float]:
    """ms of each of ``runs`` calls."""
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _native_model(path: Path, name: str, x: np.ndarray, threads: int, runs: int):
    from edge.runtime.ort_session import build_session

    session = build_session(path, threads)
    session.run(None, {name: x})
    return lambda: _timed(lambda: session.run(None, {name: x}), runs)


def _browser_model(page: Chromium, url: str, name: str, x: np.ndarray, runs: int):
    values = x.ravel().tolist()

    def block() -> list[float]:
        return page.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "edgeBench.model(arguments[0], arguments[1], arguments[2], arguments[3], arguments[4]).then(done);",
            url,
            name,
            list(x.shape),
            values,
            runs,
        )

    return block


def _interleave(blocks: int, browser, native) -> tuple[list[float], list[float]]:
    b, n = [], []
    for _ in range(blocks):
        b += browser()
        n += native()
    return b, n


def _photo_blocks(page: Chromium, photo: Path, hook: str, native_call: Callable[[np.ndarray], object], runs: int):
    """Blocks of one photo's work: the page's ``edgeBench.<hook>`` on ``photo`` chosen in it vs
    ``native_call(rgb)``, each run once apart first. Returns (browser, native, the native first run's result)."""
    assert page.upload(photo) == "done", page.text("error")
    rgb = load_image(photo)
    first = native_call(rgb)

    def browser() -> list[float]:
        return page.driver.execute_async_script(
            f"const done = arguments[arguments.length - 1]; edgeBench.{hook}(arguments[0]).then(done);", runs
        )

    browser()  # first run apart
    return browser, lambda: _timed(lambda: native_call(rgb), runs), first


def _detector_blocks(page: Chromium, models: Path, photo: Path, threads: int, runs: int):
    from edge.face.detect_mtcnn import MtcnnDetector

    det = MtcnnDetector(models, threads=threads)
    browser, native, _ = _photo_blocks(page, photo, "detect", det.detect, runs)
    return browser, native, det


def _frame_blocks(page: Chromium, models: Path, photo: Path, threads: int, runs: int):
    """The whole frame on ``photo``: the page's ``FacePipeline.analyze`` vs ``open_face_pipeline(...).analyze``
    (detect, align and describe every face; the same fp32 models, MTCNN at its 0.9 cut-off in both)."""
    from edge.face.models import open_face_pipeline

    pipeline = open_face_pipeline(models, threads)
    browser, native, faces = _photo_blocks(page, photo, "frame", pipeline.analyze, runs)
    return browser, native, pipeline, len(faces)


def _frame_rows(page: Chromium, models: Path, frames: dict[str, Path], threads: int, blocks: int, runs: int):
    rows = []
    for label, photo in frames.items():
        browser, native, pipeline, faces = _frame_blocks(page, models, photo, threads, runs)
        rows.append((f"whole frame fp32 (MTCNN), {label}, {faces} face(s)", *_interleave(blocks, browser, native)))
        pipeline.close()
    return rows


def _gallery_view(page: Chromium, photo: Path) -> None:
    """Put the page in a state worth a screenshot: one person enrolled, then the photo recognised."""
    from selenium.webdriver.common.by import By

    page.driver.find_element(By.ID, "name").send_keys("Person A")
    page.driver.find_element(By.ID, "enroll").click()
    assert page.upload(photo) == "done", page.text("error")
    page.driver.execute_script("window.scrollTo(0, 0)")


def _text_rows(page: Chromium, text: Path, threads: int, blocks: int) -> list[tuple]:
    """Greedy SmolLM2 in the page vs edge.text natively: time to first token and decode tokens/s."""
    from selenium.webdriver.common.by import By

    from edge.text.generator import TextGenerator
    from edge.text.sampling import SamplingConfig

    prompt, tokens = "What is the capital of France?", 16
    box = page.driver.find_element(By.ID, "prompt")
    box.clear()
    box.send_keys(prompt)
    page.driver.find_element(By.ID, "max-tokens").clear()
    page.driver.find_element(By.ID, "max-tokens").send_keys(str(tokens))
    ttft_b, rate_b, ttft_n, rate_n = [], [], [], []
    with TextGenerator(text, threads=threads) as native:
        native.generate(prompt, SamplingConfig(max_new_tokens=2))
        for _ in range(blocks):
            page.driver.find_element(By.ID, "generate").click()
            assert page.wait_state("text-output", ("done", "error"), 600) == "done", page.text("error")
            got = page.driver.execute_script("return window.edgeLastText")
            ttft_b.append(got["ttft_ms"])
            rate_b.append(got["tokens_per_s"])
            want = native.generate(prompt, SamplingConfig(max_new_tokens=tokens))
            ttft_n.append(want.time_to_first_token_s * 1000)
            rate_n.append(want.decode_tokens_per_s)
    ms_per_token = lambda rates: [1000 / r for r in rates if r > 0]  # noqa: E731
    return [
        ("SmolLM2 fp32: time to first token (37-token prompt)", ttft_b[1:] or ttft_b, ttft_n[1:] or ttft_n),
        ("SmolLM2 fp32: ms per decoded token", ms_per_token(rate_b), ms_per_token(rate_n)),
    ]


def measure(
    models: Path, site: Path, threads: int, blocks: int, runs: int, text: Path | None = None
) -> tuple[list[tuple], int]:
    """Interleaved timings per contender: rows of (name, browser ms list, native ms list)."""
    photo = Path(importlib.util.find_spec("insightface").submodule_search_locations[0]) / "data/images/t1.jpg"
    chip = np.random.default_rng(1).uniform(0, 255, (1, 3, 150, 150)).astype(np.float32)
    rows = []
    install_on_first_use(WEB, "benchmarks/browser_vs_native.py")
    page = Chromium()
    try:
        with WebServer(site, port=0) as server:
            assert page.open(f"{server.url}?threads={threads}") == "ready", page.text("error")
            got = page.driver.execute_script("return edgeBench.threads()")
            emb_b = _browser_model(page, "models/face_embedder.onnx", "chip", chip, runs)
            emb_n = _native_model(models / "face_embedder.onnx", "chip", chip, threads, runs)
            rows.append(("embedder fp32, 1 chip", *_interleave(blocks, emb_b, emb_n)))
            det_b, det_n, det = _detector_blocks(page, models, photo, threads, max(1, runs // 2))
            rows.append(("MTCNN cascade fp32, t1.jpg 1280x886", *_interleave(blocks, det_b, det_n)))
            det.close()
            frames = {"t1.jpg 1280x886": photo, "grace_hopper 640x480": one_face_frame_png(site.parent)}
            rows += _frame_rows(page, models, frames, threads, blocks, max(1, runs // 2))
            q_b = _browser_model(page, "models/face_embedder_int8.onnx", "chip", chip, runs)
            q_n = _native_model(site / "models" / "face_embedder_int8.onnx", "chip", chip, threads, runs)
            rows.append(("embedder INT8 QDQ, 1 chip", *_interleave(blocks, q_b, q_n)))
            # INT8 vs fp32 both in the page, interleaved with each other: the precision choice.
            rows.append(("browser only: embedder INT8 QDQ vs fp32", *_interleave(blocks, q_b, emb_b)))
            if text is not None:
                rows += _text_rows(page, text, threads, blocks)
            _gallery_view(page, photo)
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.driver.save_screenshot(str(SCREENSHOT))
    finally:
        page.close()
    return rows, got


def _markdown(rows: list[tuple], threads: int, got: int, blocks: int, runs: int) -> str:
    lines = [
        "## Browser (onnxruntime-web) vs native (onnxruntime)",
        "",
        f"`.venv/bin/python -m benchmarks run browser_vs_native {' '.join(sys.argv[1:])}` — "
        f"{machine_line()}. Headless Chromium, onnxruntime-web wasm SIMD with {got} threads (cross-origin "
        f"isolated) vs onnxruntime CPU with {threads} intra-op threads; interleaved blocks, first run apart; "
        "median (p90) ms. Goal: browser / native <= 2.0.",
        "",
        "| model | browser ms | native ms | browser / native |",
        "|---|---|---|---|",
    ]
    choice = rows.pop(next(i for i, r in enumerate(rows) if r[0].startswith("browser only")))
    for name, b, n in rows:
        p90 = lambda v: float(np.percentile(v, 90))  # noqa: E731
        ratio = statistics.median(b) / statistics.median(n)
        lines.append(
            f"| {name} | {statistics.median(b):.1f} ({p90(b):.1f}) | {statistics.median(n):.1f} ({p90(n):.1f}) "
            f"| {ratio:.2f} |"
        )
    int8, fp32 = statistics.median(choice[1]), statistics.median(choice[2])
    lines += [
        "",
        f"Precision in the browser (INT8 QDQ and fp32 embedder interleaved in the same page): INT8 {int8:.1f} ms, "
        f"fp32 {fp32:.1f} ms, INT8 / fp32 = {int8 / fp32:.2f}. The site ships fp32 (docs/browser.md).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="a face models folder (default: export one, ~40 s)")
    ap.add_argument("--text", help="an fp32 SmolLM2 folder (converters.slm) to time in the page as well")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        work = Path(tmp)
        models = _models(args.models, work)
        site = work / "site"
        text = Path(args.text) if args.text else None
        build_browser(load_profile("browser-wasm"), models, site, text=text)
        _int8_embedder(models, site / "models" / "face_embedder_int8.onnx")
        rows, got = measure(models, site, args.threads, args.blocks, args.runs, text)
        shutil.rmtree(site, ignore_errors=True)
    md = _markdown(rows, args.threads, got, args.blocks, args.runs)
    print(md)
    print(f"section written to {write_section('browser', md)}; screenshot {SCREENSHOT}")
    return 0
