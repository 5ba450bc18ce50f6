"""The browser build: a static site that runs the face pipeline with onnxruntime-web (WebAssembly).

``build_browser`` copies the page sources (``web/``), the onnxruntime-web runtime files taken from the npm
package installed by ``scripts/setup_web.sh`` (never a CDN: the site works offline), and the models of a
converted face folder (``edge-deploy convert face``: the page runs its detector, BlazeFace full range tiled
as the browser profile names it, or MTCNN) with sample photos and a sample gallery
(``converters.package.web_samples``), optionally a text model (``convert slm``) and a sentence
encoder for the page's semantic search (``converters.package.web_search``) into one folder, then writes
``manifest.json`` with the sha256 and size of every file, the models' sources and licences, the runtime
version and the precision.
The page checks each model's sha256 before loading it.

Precision follows the profile (``firmware_configs/browser-wasm.toml``: fp32). INT8 QDQ models run slower
than fp32 in onnxruntime-web (no fused int8 kernels in its WebAssembly build; measured in docs/browser.md),
so only fp32 models are accepted here.

dlib's 5-point landmark model is an ``.npz`` for numpy; the page gets it as ``shape5.bin`` (raw
little-endian arrays) plus ``shape5.json`` (dtype, offset and length of each array, and the dimensions).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters.package.web_samples import copy_samples
from converters.package.web_search import SearchSite, copy_search
from converters.paths import WEB_DIR
from converters.versions import library_versions
from edge import __version__
from edge.digest import file_sha256
from edge.errors import BundleError, InputError, MissingDependencyError, ProfileError, require
from edge.face import models as face_models
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.profiles import Runtime, TargetProfile
from edge.progress import ProgressFn, silent, timed
from edge.shipped import INSTALLED_ROOT

WEB_MANIFEST_SCHEMA_VERSION = 1
WEB_SOURCE_DIR = WEB_DIR
#: onnxruntime-web for an installed wheel's page sources (``node_modules``).
ORT_CACHE = Path.home() / ".cache" / "edge-deploy" / "onnxruntime-web"
NPM_TIMEOUT_S = 900
#: The page's own files, copied verbatim.
PAGE_FILES = (
    "index.html", "style.css", "app.js", "face.js", "blazeface.js", "mtcnn.js", "align.js", "text.js", "search.js",
    "gallery.js",
)  # fmt: skip
#: onnxruntime-web files the page needs: the wasm-only ES module and the SIMD+threads build. ``ort.min.js``
#: would fetch the 28 MB JSEP (WebGPU) build even for wasm, so it is not shipped.
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
ORT_LICENCE = "MIT"
#: The tokenizer models (generation.json ``tokenizer_model``) the page's JavaScript tokenizer (text.js) runs.
PAGE_TOKENIZER_MODELS = ("gpt2",)
SHAPE5_BIN = "shape5.bin"
SHAPE5_HEADER = "shape5.json"
ROLE_SHAPE5_HEADER = "landmarks.shape5.header"
_MTCNN_ROLES = tuple(net.role for net in face_models.DETECTOR_NETS)
_SHAPE5_ARRAYS = {
    "initial_shape": np.float32,
    "split_idx": np.int32,
    "split_thresh": np.float32,
    "leaf_values": np.float32,
    "anchor_idx": np.int32,
    "deltas": np.float32,
}


@dataclass(frozen=True)
class WebBuild:
    """What ``build_browser`` wrote."""

    out_dir: Path
    manifest: Path
    files: int
    bytes: int
    onnxruntime_web: str


def node_modules(web_dir: Path = WEB_SOURCE_DIR) -> Path:
    """Where onnxruntime-web is installed for the page sources ``web_dir``: ``web_dir/node_modules`` in a
    checkout; for an installed wheel's copy (read-only site-packages), a folder of the user's cache named by the
    hash of the ``package-lock.json`` the wheel carries (``install_ort_from_npm`` fills it)."""
    web_dir = Path(web_dir)
    if web_dir.resolve() != (INSTALLED_ROOT / "web").resolve():
        return web_dir / "node_modules"
    return ORT_CACHE / file_sha256(web_dir / "package-lock.json")[:16] / "node_modules"


def install_ort_from_npm(web_dir: Path = WEB_SOURCE_DIR, progress: ProgressFn = silent) -> None:
    """``npm ci`` of the page's pinned onnxruntime-web into ``node_modules(web_dir)`` (an installed wheel's
    first browser build; a checkout uses ``scripts/setup_web.sh --page``).

    Raises:
        MissingDependencyError: npm is not installed, or ``npm ci`` fails or times out.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise MissingDependencyError(
            "npm: not installed; the browser page's runtime (onnxruntime-web, pinned in the wheel's "
            "package-lock.json) is installed from npm on first use: install Node.js and npm (Debian: "
            "sudo apt-get install nodejs npm) and run the command again"
        )
    folder = node_modules(web_dir).parent
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(Path(web_dir) / name, folder / name)
    argv = [npm, "ci", "--no-audit", "--no-fund", "--prefix", str(folder)]
    line = f"installing onnxruntime-web from npm into {folder} (first browser build only)"
    try:
        with timed(progress, line, "npm ci onnxruntime-web"):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise MissingDependencyError(f"{' '.join(argv)}: did not finish in {NPM_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise MissingDependencyError(
            f"{' '.join(argv)}: failed (exit code {done.returncode}: {done.stderr.strip()[-400:]})"
        )


def ort_dist(web_dir: Path = WEB_SOURCE_DIR) -> tuple[Path, str]:
    """The installed onnxruntime-web ``dist`` folder and its version.

    Raises:
        MissingDependencyError: the npm package is not installed, or a needed file is missing.
    """
    pkg = node_modules(web_dir) / "onnxruntime-web"
    hint = "install it with scripts/setup_web.sh (npm ci in web/)"
    if pkg.parent.parent != Path(web_dir):
        hint = "the first browser build installs it (npm ci), with Node.js and npm installed"
    try:
        version = json.loads((pkg / "package.json").read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError) as exc:
        raise MissingDependencyError(f"{pkg}: onnxruntime-web (npm) is not installed ({exc}); {hint}") from exc
    missing = [name for name in ORT_FILES if not (pkg / "dist" / name).is_file()]
    if missing:
        raise MissingDependencyError(
            f"{pkg / 'dist'}: {', '.join(missing)} missing from onnxruntime-web {version}; {hint}"
        )
    return pkg / "dist", version


def shape5_to_web(npz_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write dlib's 5-point model as ``shape5.bin`` + ``shape5.json`` for the page.

    Returns:
        (bin path, header path).

    Raises:
        InputError: the file is not the ``.npz`` ``converters.face.dlib_shape`` writes.
    """
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            data = {k: npz[k] for k in _SHAPE5_ARRAYS}
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise InputError(
            f"{npz_path}: not dlib's 5-point model as converters.face.dlib_shape writes it ({exc})"
        ) from exc
    levels, trees, splits, _ = data["split_idx"].shape
    header: dict[str, Any] = {
        "dims": {
            "levels": int(levels),
            "trees": int(trees),
            "splits": int(splits),
            "points": int(data["initial_shape"].shape[0]),
            "features": int(data["deltas"].shape[1]),
        },
        "arrays": {},
    }
    blob = bytearray()
    for key, dtype in _SHAPE5_ARRAYS.items():
        arr = np.ascontiguousarray(data[key], dtype=np.dtype(dtype).newbyteorder("<"))
        header["arrays"][key] = {"dtype": np.dtype(dtype).name, "offset": len(blob), "length": int(arr.size)}
        blob += arr.tobytes()
    bin_path, header_path = out_dir / SHAPE5_BIN, out_dir / SHAPE5_HEADER
    bin_path.write_bytes(bytes(blob))
    header_path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    return bin_path, header_path


def _check_profile(profile: TargetProfile) -> None:
    if profile.runtime.default is not Runtime.ONNXRUNTIME_WEB:
        raise ProfileError(
            f"{profile.source}: runtime.default = '{profile.runtime.default.value}'; the browser build needs "
            "'onnxruntime-web' (use --target browser-wasm)"
        )


def _copy_models(profile: TargetProfile, models: Path, dest: Path) -> tuple[list[dict], dict]:
    """The face models the page runs: the folder's detector (models.json ``detector``: the profile's, as the
    face stage wrote it), the embedder and the 5-point model; (manifest rows, the page's detector settings)."""
    face = face_models.read_models_folder(models)
    entries = face.entries
    kind = face.detector
    detector_roles = _MTCNN_ROLES if kind is face_models.Detector.MTCNN else (face_models.BLAZEFACE_ROLES[kind],)
    needed = (*detector_roles, face_models.FaceModel.EMBEDDER.role, face_models.FaceModel.SHAPE5.role)
    missing = [r for r in needed if r not in entries]
    if missing:
        raise InputError(f"{models / face_models.MODELS_FILE}: no model with role {', '.join(missing)}")
    rows = []
    for role in needed[:-1]:
        entry = entries[role]
        if entry.precision != profile.runtime.precision.value:
            raise BundleError(
                f"{models / face_models.MODELS_FILE}: {entry.file} ({role}) is {entry.precision}; profile "
                f"{profile.name} wants runtime.precision = '{profile.runtime.precision.value}'"
            )
        shutil.copyfile(models / entry.file, dest / entry.file)
        rows.append({"role": role, "file": entry.file, "source": entry.source, "precision": entry.precision})
    shape = entries[face_models.FaceModel.SHAPE5.role]
    bin_path, header_path = shape5_to_web(models / shape.file, dest)
    rows.append({"role": shape.role, "file": bin_path.name, "source": shape.source, "precision": "fp32"})
    rows.append({"role": ROLE_SHAPE5_HEADER, "file": header_path.name, "source": shape.source, "precision": "fp32"})
    return rows, detector_settings(kind)


def detector_settings(kind: face_models.Detector) -> dict[str, Any]:
    """What the page's detector runs with (manifest ``face.detector``), taken from the Python constants
    ``web/blazeface.js`` ports: for BlazeFace its input side, anchors, score cut-off, NMS, tiling, the box map
    of the 5-point model and the mouth estimate; for MTCNN its name and the pipeline's score cut-off."""
    from edge.face import detect_blazeface as bf
    from edge.face.tiles import DEFAULT_TILING

    settings: dict[str, Any] = {"kind": kind.value, "pipeline_min_score": face_models.default_min_score(kind)}
    if kind is face_models.Detector.MTCNN:
        return settings
    spec = bf.SHORT_RANGE if kind is face_models.Detector.BLAZEFACE else bf.FULL_RANGE
    tiling = DEFAULT_TILING if kind is face_models.Detector.BLAZEFACE_FULL_TILED else None
    return {
        **settings,
        "role": face_models.BLAZEFACE_ROLES[kind],
        "size": spec.size,
        "strides": list(spec.strides),
        "interpolated_scale_aspect_ratio": spec.interpolated_scale_aspect_ratio,
        "min_score": spec.min_score,
        "num_boxes": spec.num_boxes,
        "nms_iou": bf.NMS_IOU,
        "hog_box_map": list(spec.hog_box_map),
        "half_mouth_to_eyes": float(np.float32(bf._MOUTH_TO_EYES / 2.0)),
        "tiling": None if tiling is None else dict(vars(tiling)),
    }


def check_text_tokenizer(text: Path) -> None:
    """Refuse a text model whose tokenizer the page's JavaScript (``web/text.js``, byte-level BPE) cannot run.

    A folder without a readable generation.json passes here; copying it reports that.

    Raises:
        BundleError: generation.json names a tokenizer model other than byte-level BPE (``gpt2``).
    """
    spec_path = Path(text) / "generation.json"
    try:
        model = json.loads(spec_path.read_text(encoding="utf-8")).get("tokenizer_model", "gpt2")
    except (OSError, ValueError, AttributeError):
        return
    if model not in PAGE_TOKENIZER_MODELS:
        kind = " (SentencePiece)" if model == "llama" else ""
        raise BundleError(
            f"{spec_path}: tokenizer_model = {model!r}{kind}; the browser page's tokenizer (web/text.js) supports "
            "'gpt2' (byte-level BPE) only: build this model for a Pi or x86 target instead"
        )


def _copy_text(text: Path, dest: Path) -> tuple[list[dict], dict]:
    """Copy an SLM folder (``converters/slm``: decoder ONNX, tokenizer.json, generation.json) into the site."""
    spec_path = text / "generation.json"
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        model, tokenizer = text / spec["model_file"], text / spec["tokenizer_file"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{spec_path}: not a text model folder's generation.json ({exc})") from exc
    for path in (model, tokenizer):
        if not path.is_file():
            raise InputError(f"{spec_path}: lists {path.name}, which is missing from {text}")
    if (text / (model.name + ".data")).exists():
        raise BundleError(f"{model}: weights in an external .data file; the page loads single-file models only")
    onnx = require("onnx", "convert", "reading the text decoder's cache layout")
    graph = onnx.load(str(model), load_external_data=False).graph
    key = next((i for i in graph.input if i.name == "past_key_values.0.key"), None)
    if key is None:
        raise InputError(f"{model}: no input past_key_values.0.key; expected a decoder with a KV cache")
    dims = [d.dim_value for d in key.type.tensor_type.shape.dim]
    (dest / "text").mkdir(exist_ok=True)
    rows = []
    for role, path in (("text.decoder", model), ("text.tokenizer", tokenizer), ("text.generation", spec_path)):
        shutil.copyfile(path, dest / "text" / path.name)
        rows.append({"role": role, "file": f"text/{path.name}", "source": spec.get("source", {}), "precision": ""})
    precision = str(spec.get("precision", "?"))
    info = {
        "model": model.name,
        "precision": precision,
        "cache_shape": [dims[1], dims[3]],
        "message": f"SmolLM2 decoder ({precision}), greedy; the tokenizer is tokenizer.json run in JavaScript.",
    }
    return rows, info


def build_browser(
    profile: TargetProfile,
    models: Path | None,
    out_dir: Path,
    progress: ProgressFn = silent,
    web_dir: Path = WEB_SOURCE_DIR,
    text: Path | None = None,
    search: SearchSite | None = None,
    with_samples: bool = True,
) -> WebBuild:
    """Build the static browser site.

    Args:
        profile: the target (``load_profile("browser-wasm")``).
        models: a face models folder written by ``edge-deploy convert face`` (with models.json); None
            leaves the face demo out (``--model slm``).
        out_dir: the site folder to write (created; files of the same name are replaced).
        progress: called with one line per step.
        web_dir: the page sources and the npm install (``web/`` of the repository).
        text: optional text model folder (``converters/slm`` output with generation.json); None leaves the
            page's text demo out, saying so on the page.
        search: optional sentence encoder, its tokenizer and the sentences to rank
            (``converters.package.web_search``); None leaves the search demo out.
        with_samples: with face models, also the sample photos and the sample gallery enrolled from them
            (``converters.package.web_samples``).

    Returns:
        A WebBuild naming the manifest.

    Raises:
        ProfileError: the profile is not an onnxruntime-web target.
        InputError: the models folder is incomplete.
        BundleError: a model's precision is not the profile's, a text model's tokenizer is not byte-level
            BPE, or the site cannot be written.
        MissingDependencyError: onnxruntime-web is not installed in ``web/node_modules``.
    """
    _check_profile(profile)
    if models is None and text is None and search is None:
        raise InputError("browser build: no face models, text model or search folder; expected at least one")
    if text is not None:
        check_text_tokenizer(Path(text))
    dist, ort_version = ort_dist(web_dir)
    out_dir = Path(out_dir)
    try:
        (out_dir / "models").mkdir(parents=True, exist_ok=True)
        (out_dir / "ort").mkdir(exist_ok=True)
        progress(f"copying the page and onnxruntime-web {ort_version} (wasm SIMD + threads)")
        for name in PAGE_FILES:
            shutil.copyfile(web_dir / name, out_dir / name)
        for name in ORT_FILES:
            shutil.copyfile(dist / name, out_dir / "ort" / name)
        model_rows: list[dict] = []
        detector = None
        if models is not None:
            progress(f"copying {profile.runtime.precision.value} face models from {models}")
            model_rows, detector = _copy_models(profile, Path(models), out_dir / "models")
        site_rows: list[dict] = []
        samples = None
        if models is not None and with_samples:
            progress("copying the sample photos and enrolling the sample gallery with the site's face models")
            site_rows, samples = copy_samples(Path(models), out_dir)
        text_info = None
        if text is not None:
            progress(f"copying the text model from {text}")
            text_rows, text_info = _copy_text(Path(text), out_dir / "models")
            model_rows += text_rows
        search_info = None
        if search is not None:
            progress(f"copying the sentence encoder from {search.folder} and {search.corpus}")
            search_rows, search_info = copy_search(profile, search, out_dir / "models")
            model_rows += search_rows
    except OSError as exc:
        raise BundleError(f"{out_dir}: cannot write the browser site ({exc})") from exc
    manifest = _manifest(profile, out_dir, model_rows, ort_version, site_rows)
    manifest["samples"] = samples
    manifest["text"] = text_info
    manifest["search"] = search_info
    if detector is None:
        manifest["face"] = None
    else:
        manifest["face"]["detector"] = detector
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    progress(f"wrote {path} ({len(manifest['files'])} files)")
    total = sum(f["size"] for f in manifest["files"])
    return WebBuild(out_dir, path, len(manifest["files"]), total, ort_version)


def _manifest(
    profile: TargetProfile, out_dir: Path, model_rows: list[dict], ort_version: str, site_rows: list[dict]
) -> dict:
    files: list[dict[str, Any]] = []
    ort_source = {"package": "onnxruntime-web", "registry": "npm", "version": ort_version, "licence": ORT_LICENCE}
    for name in PAGE_FILES:
        files.append({"path": name, "source": {"package": "edge-deploy", "licence": "Apache-2.0"}})
    for name in ORT_FILES:
        files.append({"path": f"ort/{name}", "source": ort_source})
    for row in model_rows:
        files.append({"path": f"models/{row['file']}", **row})
    for row in site_rows:
        files.append({"path": row["file"], **row})
    for row in files:
        p = out_dir / row["path"]
        row["size"] = p.stat().st_size
        row["sha256"] = file_sha256(p)
    return {
        "schema_version": WEB_MANIFEST_SCHEMA_VERSION,
        "kind": "browser-site",
        "profile": profile.to_dict(),
        "runtime": {
            "name": "onnxruntime-web",
            "onnxruntime_web": ort_version,
            "backend": "wasm (SIMD, threads when cross-origin isolated)",
            "precision": profile.runtime.precision.value,
            "threads": profile.runtime.threads,
        },
        "face": {"same_person_threshold": DLIB_SAME_PERSON_THRESHOLD},
        "text": None,
        "files": files,
        "tool_version": __version__,
        "versions": {**library_versions(), "onnxruntime-web": ort_version},
    }
