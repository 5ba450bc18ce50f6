"""converters/package/web.py: the browser site's files, manifest and errors (small stand-in files, no browser)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from converters.package.web import ORT_FILES, PAGE_FILES, build_browser, ort_dist, shape5_to_web
from edge.digest import file_sha256
from edge.errors import BundleError, InputError, MissingDependencyError, ProfileError
from edge.face import models as fm
from edge.profiles import load_profile

SRC = {"package": "test", "licence": "CC0"}


def _shape5(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "initial_shape": rng.random((5, 2), np.float32),
        "split_idx": rng.integers(0, 500, (15, 500, 15, 2)).astype(np.uint64),
        "split_thresh": rng.random((15, 500, 15), np.float32),
        "leaf_values": rng.random((15, 500, 16, 5, 2), np.float32),
        "anchor_idx": rng.integers(0, 5, (15, 500)).astype(np.uint64),
        "deltas": rng.random((15, 500, 2), np.float32),
    }
    np.savez(path, schema_version=np.array(1), **arrays)
    return arrays


@pytest.fixture()
def web_dir(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    dist = web / "node_modules" / "onnxruntime-web" / "dist"
    dist.mkdir(parents=True)
    (web / "node_modules" / "onnxruntime-web" / "package.json").write_text('{"version": "1.30.0"}')
    for name in ORT_FILES:
        (dist / name).write_bytes(b"ort " + name.encode())
    for name in PAGE_FILES:
        (web / name).write_text(f"// {name}\n")
    return web


@pytest.fixture()
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    entries = []
    for role, name in [
        (fm.FaceModel.PNET.role, "mtcnn_pnet.onnx"),
        (fm.FaceModel.RNET.role, "mtcnn_rnet.onnx"),
        (fm.FaceModel.ONET.role, "mtcnn_onet.onnx"),
        (fm.FaceModel.EMBEDDER.role, "face_embedder.onnx"),
    ]:
        (folder / name).write_bytes(b"onnx " + name.encode())
        entries.append(fm.describe(folder / name, role, "onnx", "fp32", SRC))
    _shape5(folder / "shape5.npz")
    entries.append(fm.describe(folder / "shape5.npz", fm.FaceModel.SHAPE5.role, "npz", "fp32", SRC))
    fm.write_models_file(folder, entries, "browser-wasm", "test")
    return folder


def test_shape5_arrays_round_trip_through_bin_and_header(tmp_path):
    arrays = _shape5(tmp_path / "s.npz")
    bin_path, header_path = shape5_to_web(tmp_path / "s.npz", tmp_path)
    header = json.loads(header_path.read_text())
    assert header["dims"] == {"levels": 15, "trees": 500, "splits": 15, "points": 5, "features": 500}
    blob = bin_path.read_bytes()
    for key, want in arrays.items():
        meta = header["arrays"][key]
        got = np.frombuffer(blob, np.dtype(meta["dtype"]).newbyteorder("<"), meta["length"], meta["offset"])
        np.testing.assert_array_equal(got, want.ravel().astype(got.dtype))
    assert len(blob) == sum(4 * a.size for a in arrays.values())


def test_build_writes_page_runtime_models_and_a_manifest_of_hashes(models, web_dir, tmp_path):
    out = tmp_path / "site"
    lines = []
    build = build_browser(load_profile("browser-wasm"), models, out, lines.append, web_dir=web_dir, with_samples=False)
    manifest = json.loads(build.manifest.read_text())
    paths = {f["path"] for f in manifest["files"]}
    assert paths == (
        set(PAGE_FILES)
        | {f"ort/{n}" for n in ORT_FILES}
        | {f"models/{n}" for n in ("mtcnn_pnet.onnx", "mtcnn_rnet.onnx", "mtcnn_onet.onnx", "face_embedder.onnx")}
        | {"models/shape5.bin", "models/shape5.json"}
    )
    for row in manifest["files"]:
        assert row["sha256"] == file_sha256(out / row["path"]) and row["size"] == (out / row["path"]).stat().st_size
    assert manifest["runtime"]["onnxruntime_web"] == "1.30.0" and manifest["runtime"]["precision"] == "fp32"
    assert manifest["text"] is None and manifest["profile"]["name"] == "browser-wasm"
    assert build.files == len(manifest["files"]) and build.bytes == sum(f["size"] for f in manifest["files"])
    assert lines[-1] == f"wrote {out / 'manifest.json'} ({build.files} files)"
    assert manifest["face"]["detector"] == {"kind": "mtcnn", "pipeline_min_score": 0.9}
    assert manifest["samples"] is None


def test_a_blazeface_folder_ships_its_detector_and_its_settings_only(models, web_dir, tmp_path):
    """The page runs the folder's detector (models.json ``detector``): BlazeFace's ONNX translation and the settings
    web/blazeface.js reads, taken from edge.face; no MTCNN nets."""
    from edge.face.detect_blazeface import FULL_RANGE

    (models / "blazeface_full.onnx").write_bytes(b"onnx blazeface")
    entry = fm.describe(models / "blazeface_full.onnx", "detector.blazeface_full", "onnx", "fp32", SRC)
    data = json.loads((models / "models.json").read_text())
    data["models"].append(entry.to_dict())
    data["detector"] = "blazeface-full-tiled"
    (models / "models.json").write_text(json.dumps(data))
    build = build_browser(load_profile("browser-wasm"), models, tmp_path / "site", web_dir=web_dir, with_samples=False)
    manifest = json.loads(build.manifest.read_text())
    assert {f["path"] for f in manifest["files"] if f["path"].startswith("models/")} == {
        "models/blazeface_full.onnx",
        "models/face_embedder.onnx",
        "models/shape5.bin",
        "models/shape5.json",
    }
    detector = manifest["face"]["detector"]
    assert detector["kind"] == "blazeface-full-tiled" and detector["role"] == "detector.blazeface_full"
    assert (detector["size"], detector["num_boxes"], detector["min_score"]) == (192, 2304, 0.6)
    assert detector["hog_box_map"] == list(FULL_RANGE.hog_box_map) and detector["pipeline_min_score"] == 0.0
    assert detector["tiling"] == {
        "per_side": 2, "min_side": 576, "net_face": 24.0, "look_score": 0.3, "look_zoom": 2.0, "max_looks": 4,
        "cued": True,
    }  # fmt: skip


def test_a_device_profile_is_refused(models, web_dir, tmp_path):
    profile = load_profile("rpi4")
    with pytest.raises(ProfileError) as err:
        build_browser(profile, models, tmp_path / "site", web_dir=web_dir, with_samples=False)
    assert str(err.value) == (
        f"{profile.source}: runtime.default = 'onnxruntime'; the browser build needs 'onnxruntime-web' "
        "(use --target browser-wasm)"
    )


def test_an_int8_model_is_refused_for_the_fp32_browser_profile(models, web_dir, tmp_path):
    data = json.loads((models / "models.json").read_text())
    data["models"][3]["precision"] = "int8"
    (models / "models.json").write_text(json.dumps(data))
    with pytest.raises(BundleError) as err:
        build_browser(load_profile("browser-wasm"), models, tmp_path / "site", web_dir=web_dir, with_samples=False)
    assert str(err.value) == (
        f"{models / 'models.json'}: face_embedder.onnx (embedder) is int8; profile browser-wasm wants "
        "runtime.precision = 'fp32'"
    )


def test_missing_onnxruntime_web_names_the_setup_script(tmp_path):
    with pytest.raises(MissingDependencyError) as err:
        ort_dist(tmp_path)
    pkg = tmp_path / "node_modules" / "onnxruntime-web"
    assert str(err.value).startswith(f"{pkg}: onnxruntime-web (npm) is not installed (")
    assert str(err.value).endswith("); install it with scripts/setup_web.sh (npm ci in web/)")


def test_a_missing_runtime_file_is_named(web_dir):
    dist = web_dir / "node_modules" / "onnxruntime-web" / "dist"
    (dist / "ort-wasm-simd-threaded.wasm").unlink()
    with pytest.raises(MissingDependencyError) as err:
        ort_dist(web_dir)
    assert str(err.value) == (
        f"{dist}: ort-wasm-simd-threaded.wasm missing from onnxruntime-web 1.30.0; "
        "install it with scripts/setup_web.sh (npm ci in web/)"
    )


def test_nothing_to_build_is_refused(web_dir, tmp_path):
    with pytest.raises(InputError) as err:
        build_browser(load_profile("browser-wasm"), None, tmp_path / "site", web_dir=web_dir)
    assert str(err.value) == "browser build: no face models, text model or search folder; expected at least one"


def test_a_sentencepiece_text_model_is_refused_before_anything_is_written(web_dir, tmp_path):
    """web/text.js is byte-level BPE only: a text folder converted from a SentencePiece GGUF is refused."""
    text = tmp_path / "slm"
    text.mkdir()
    (text / "generation.json").write_text(json.dumps({"model_file": "model.onnx", "tokenizer_model": "llama"}))
    with pytest.raises(BundleError) as err:
        build_browser(load_profile("browser-wasm"), None, tmp_path / "site", web_dir=web_dir, text=text)
    assert str(err.value) == (
        f"{text / 'generation.json'}: tokenizer_model = 'llama' (SentencePiece); the browser page's tokenizer "
        "(web/text.js) supports 'gpt2' (byte-level BPE) only: build this model for a Pi or x86 target instead"
    )
    assert not (tmp_path / "site").exists()


_CUE_SCRIPT = """
import { BlazeFace } from %s;
const spec = %s;
async function passes(side) {
  const bf = Object.create(BlazeFace.prototype);
  bf.spec = spec;
  let calls = 0;
  bf.candidates = async (rgb, w, win) => {  // the whole frame sees one face of side x side, the tiles nothing
    calls += 1;
    const whole = win[0] === 0 && win[2] === 0 && win[1] === 480 && win[3] === 640;
    return whole && side ? [{ box: [100, 100, 100 + side, 100 + side], kp: new Array(12).fill(120), score: 0.9 }] : [];
  };
  await bf.detect(new Uint8Array(640 * 480 * 3), 480, 640);
  return calls;
}
console.log(JSON.stringify([await passes(200), await passes(64), await passes(0)]));
"""


@pytest.mark.parametrize("cued", [True, False])
def test_blazeface_js_runs_its_tiles_on_the_cue_python_runs_them_on(tmp_path, cued):
    """web/blazeface.js on a 640x480 frame: a face 60 pixels wide at the input runs the whole-frame pass alone, one
    of 19 pixels or none runs the 4 tiles too (``Tiling.cued``), as edge/face/detect_blazeface.py does
    (tests/unit/test_tiles.py); not cued, every frame runs them."""
    import shutil
    import subprocess
    from dataclasses import replace

    from edge.face.tiles import DEFAULT_TILING

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh installs it with the web tools)")
    spec = {"size": 192, "min_score": 0.6, "nms_iou": 0.3, "half_mouth_to_eyes": 0.4}
    spec["tiling"] = dict(vars(replace(DEFAULT_TILING, cued=cued)))
    module = (Path(__file__).parents[2] / "web" / "blazeface.js").as_uri()
    script = tmp_path / "cue.mjs"
    script.write_text(_CUE_SCRIPT % (json.dumps(module), json.dumps(spec)))
    out = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == ([1, 5, 5] if cued else [5, 5, 5])
