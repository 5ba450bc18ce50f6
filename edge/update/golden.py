"""The golden set: what a bundle's models computed at build time, for the device to reproduce on its own board.

``edge-deploy build`` runs the bundle's own face pipeline on a few real photos and stores, in the bundle:

- ``golden/face.npz``: ``chips`` uint8 [N, S, S, 3] (aligned face chips at the embedder's chip size: 150 for
  dlib's ResNet) and ``descriptors`` float32 [N, D] (what the bundle's embedder gave for them on the build
  host: 128-d for dlib's, a user embedder's own size);
- ``golden/golden.json``: ``{"schema_version": 1, "face": {"file", "role", "model_sha256", "count",
  "min_cosine", "source"}}``, ``min_cosine`` being the accuracy gate's tolerance (the profile's
  ``thresholds.embed_mean_cosine``); and for a bundle with the language model ``"text": {"folder",
  "prompts", "tokens", "max_new_tokens"}``: a few prompts and the greedy token ids the bundle's model gave
  (the language-model gate asks for equal greedy tokens, so the device must reproduce them exactly).

Both are listed in ``manifest.json``, so the signature covers them. After an over-the-air update the daemon
runs :func:`check_golden` on the new slot: every chip's descriptor must have a cosine of at least
``min_cosine`` to the stored one, the embedder's median time per chip must stay within a bound, and every
prompt must give the same greedy tokens. A
process-alive health check can't tell a model that loads from one that computes the wrong thing; this can.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.bundle import read_bundle_file
from edge.cosine import row_cosines
from edge.errors import InputError, ValidationError
from edge.payload import PayloadError, parse_json

GOLDEN_SCHEMA_VERSION = 1
GOLDEN_JSON = "golden/golden.json"
FACE_GOLDEN = "golden/face.npz"
#: Chip sides and descriptor sizes a golden set may hold (dlib's: 150 and 128; a user embedder's its own).
CHIP_SIDES = range(8, 1025)
DESCRIPTOR_SIZES = range(1, 4097)
#: A golden set is small: a few chips (each 67.5 kB).
MAX_GOLDEN_CHIPS = 32
MAX_GOLDEN_BYTES = 8 << 20


@dataclass(frozen=True)
class GoldenResult:
    """What the acceptance check measured (reported in ``update.accepted`` / ``update.rolled_back``)."""

    count: int
    min_cosine: float
    worst_cosine: float
    p50_ms: float
    max_latency_ms: float
    text_prompts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _chips_shaped(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] == shape[2] and shape[1] in CHIP_SIDES and shape[3] == 3


def _descriptors_shaped(shape: tuple[int, ...], n: int) -> bool:
    return len(shape) == 2 and shape[0] == n and shape[1] in DESCRIPTOR_SIZES


def write_face_golden(
    bundle: Path,
    chips: np.ndarray,
    descriptors: np.ndarray,
    min_cosine: float,
    model_sha256: str,
    source: str,
    role: str = "embedder",
) -> dict[str, Any]:
    """Write ``golden/face.npz`` and ``golden/golden.json`` into a bundle folder (before its manifest).

    ``role`` is the models.json role of the embedder that computed the descriptors, the one the device runs
    (``edge.face.models.embedder_role``: ``tflite.embedder`` for a folder that runs the TFLite twin).

    Returns:
        The ``face`` record of golden.json.

    Raises:
        InputError: chips or descriptors of the wrong shape or type, no chip, too many, or a bad tolerance.
    """
    chips = np.asarray(chips)
    descriptors = np.asarray(descriptors, dtype=np.float32)
    n = chips.shape[0] if chips.ndim == 4 else -1
    if chips.dtype != np.uint8 or not _chips_shaped(chips.shape) or not 1 <= n <= MAX_GOLDEN_CHIPS:
        raise InputError(f"golden chips: {chips.dtype} {chips.shape}; expected uint8 [1..{MAX_GOLDEN_CHIPS}, S, S, 3]")
    if not _descriptors_shaped(descriptors.shape, n) or not np.isfinite(descriptors).all():
        raise InputError(f"golden descriptors: {descriptors.shape}; expected finite float32 [{n}, D]")
    if not (math.isfinite(min_cosine) and 0.0 < min_cosine <= 1.0):
        raise InputError(f"golden min_cosine = {min_cosine!r}; expected a number in (0, 1]")
    (bundle / "golden").mkdir(parents=True, exist_ok=True)
    np.savez_compressed(bundle / FACE_GOLDEN, chips=chips, descriptors=descriptors)
    record = {
        "file": FACE_GOLDEN,
        "role": role,
        "model_sha256": model_sha256,
        "count": int(n),
        "min_cosine": float(min_cosine),
        "source": source,
    }
    _merge(bundle, "face", record)
    return record


def _merge(bundle: Path, key: str, record: dict[str, Any]) -> None:
    """Set one part of golden.json (keeping the others)."""
    path = bundle / GOLDEN_JSON
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    body.update({"schema_version": GOLDEN_SCHEMA_VERSION, key: record})
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")


def write_text_golden(
    bundle: Path, prompts: list[str], tokens: list[list[int]], max_new_tokens: int, folder: str = "models/slm"
) -> dict[str, Any]:
    """Add the language model's part to golden.json: prompts and the greedy token ids the bundle's model gave.

    Raises:
        InputError: no prompt, or prompts and token lists that do not pair up.
    """
    if not prompts or len(prompts) != len(tokens) or not all(isinstance(p, str) and p for p in prompts):
        raise InputError(
            f"golden text: {len(prompts)} prompts, {len(tokens)} token lists; expected pairs, at least one"
        )
    record = {"folder": folder, "prompts": list(prompts), "tokens": [list(map(int, t)) for t in tokens],
              "max_new_tokens": int(max_new_tokens)}  # fmt: skip
    _merge(bundle, "text", record)
    return record


def _read_body(bundle: Path) -> dict[str, Any]:
    where = bundle / GOLDEN_JSON
    try:
        body = parse_json(read_bundle_file(where, (1 << 20) + 1), str(where), 1 << 20, 6)
    except OSError:
        raise ValidationError(
            f"{bundle}: no {GOLDEN_JSON}; expected a bundle built with a golden set (edge-deploy build)"
        ) from None
    except PayloadError as exc:
        raise ValidationError(str(exc)) from None
    if not isinstance(body, dict) or body.get("schema_version") != GOLDEN_SCHEMA_VERSION:
        raise ValidationError(f"{where}: expected a JSON object with schema_version {GOLDEN_SCHEMA_VERSION}")
    return body


def _first_difference(got: list[int], expected: list[int]) -> int:
    return next(
        (k for k, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
    )


def check_text_golden(bundle: Path, threads: int) -> int:
    """Reproduce the golden prompts' greedy tokens with the bundle's language model; return the prompt count.

    Raises:
        ValidationError: the first prompt whose tokens differ (position, got, expected), or a malformed record.
    """
    from edge.text import SamplingConfig, TextGenerator

    where = bundle / GOLDEN_JSON
    raw = _read_body(bundle).get("text")
    text: dict[str, Any] = raw if isinstance(raw, dict) else {}
    prompts, tokens, n = text.get("prompts"), text.get("tokens"), text.get("max_new_tokens")
    pairs = isinstance(prompts, list) and isinstance(tokens, list) and len(prompts) == len(tokens) > 0
    if not pairs or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationError(f"{where}: 'text' needs prompts, tokens (one list per prompt) and max_new_tokens >= 1")
    folder = text.get("folder", "models/slm")
    if not isinstance(folder, str) or ".." in folder.split("/") or folder.startswith("/"):
        raise ValidationError(f"{where}: text.folder = {folder!r}; expected a folder inside the bundle")
    with TextGenerator(bundle / folder, threads=threads) as generator:
        for i, (prompt, expected) in enumerate(zip(text["prompts"], text["tokens"], strict=True)):
            got = list(generator.generate(str(prompt), SamplingConfig(max_new_tokens=n)).token_ids)
            if got != expected:
                at = _first_difference(got, expected)
                raise ValidationError(
                    f"{bundle}: golden prompt {i} ({str(prompt)[:40]!r}): greedy token {at} is "
                    f"{got[at] if at < len(got) else 'the end'}, the build's was "
                    f"{expected[at] if at < len(expected) else 'the end'} ({len(got)} vs {len(expected)} tokens)"
                )
    return len(text["prompts"])


def read_face_golden(bundle: Path) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """The face golden set of a (verified) bundle folder: its record, chips and descriptors.

    Raises:
        ValidationError: the bundle has no golden set, or it is malformed (naming the file and what is wrong).
    """
    where = bundle / GOLDEN_JSON
    face = _read_body(bundle).get("face")
    if not isinstance(face, dict):
        raise ValidationError(f"{where}: expected schema_version {GOLDEN_SCHEMA_VERSION} and a 'face' object")
    tol = face.get("min_cosine")
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not (math.isfinite(tol) and 0 < tol <= 1):
        raise ValidationError(f"{where}: face.min_cosine = {tol!r}; expected a number in (0, 1]")
    npz = bundle / FACE_GOLDEN
    try:
        raw = read_bundle_file(npz, MAX_GOLDEN_BYTES + 1)
    except OSError:
        raw = b""
    if not raw or len(raw) > MAX_GOLDEN_BYTES:
        raise ValidationError(f"{npz}: missing or larger than {MAX_GOLDEN_BYTES} bytes; expected the golden chips")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            chips, descriptors = data["chips"], data["descriptors"]
    except (OSError, KeyError, ValueError) as exc:
        raise ValidationError(f"{npz}: not a golden set ({exc}); expected arrays chips and descriptors") from None
    n = chips.shape[0] if chips.ndim == 4 else -1
    ok = chips.dtype == np.uint8 and _chips_shaped(chips.shape) and 1 <= n <= MAX_GOLDEN_CHIPS
    if not ok or not _descriptors_shaped(descriptors.shape, n) or not np.isfinite(descriptors).all():
        raise ValidationError(
            f"{npz}: chips {chips.dtype} {chips.shape}, descriptors {descriptors.dtype} {descriptors.shape}; "
            f"expected uint8 [N, S, S, 3] and finite [N, D], N in 1..{MAX_GOLDEN_CHIPS}"
        )
    return face, chips, descriptors.astype(np.float32)


def check_golden(bundle: Path, threads: int, max_latency_ms: float, bench_runs: int) -> GoldenResult:
    """Run the bundle's embedder on its golden chips, on this board; refuse what does not reproduce.

    Args:
        bundle: a verified bundle folder with ``models/face`` and a golden set.
        threads: onnxruntime threads.
        max_latency_ms: largest accepted median time to describe one chip.
        bench_runs: timed single-chip runs (after one warm-up run).

    Returns:
        The measurements, when every chip reproduces and the bench is within the bound.

    Raises:
        ValidationError: naming the worst chip's cosine and the tolerance, or the median and the bound, or the
            first golden prompt whose greedy tokens differ; or a missing/malformed golden set.
        InputError / InferenceError: the model does not load or run.
    """
    from edge.face.embed import FaceEmbedder
    from edge.face.models import read_models_folder

    record, chips, expected = read_face_golden(bundle)
    models = bundle / "models" / "face"
    embedder_file = read_models_folder(models).model_path(str(record.get("role", "embedder")))
    with FaceEmbedder(embedder_file, threads=threads) as embedder:
        size = (embedder.chip_size, embedder.descriptor_size)
        if size != (chips.shape[1], expected.shape[1]):
            raise ValidationError(
                f"{bundle / FACE_GOLDEN}: {chips.shape[1]}-pixel chips and {expected.shape[1]}-d descriptors; the "
                f"bundle's embedder takes {size[0]}-pixel chips and gives {size[1]}-d descriptors (not the "
                "model the golden set was made with)"
            )
        got = embedder.embed(chips)
        cos = row_cosines(got, expected)
        worst = int(np.argmin(cos))
        tol = float(record["min_cosine"])
        if not cos[worst] >= tol:  # NaN fails too
            raise ValidationError(
                f"{bundle}: golden chip {worst} of {len(cos)}: cosine {cos[worst]:.6f} to the descriptor the build "
                f"computed; expected at least {tol} (the model does not compute what the build proved)"
            )
        embedder.embed(chips[:1])  # warm-up
        times = []
        for _ in range(bench_runs):
            t0 = time.perf_counter()
            embedder.embed(chips[:1])
            times.append((time.perf_counter() - t0) * 1000.0)
    p50 = float(np.median(times))
    if not p50 <= max_latency_ms:
        raise ValidationError(
            f"{bundle}: embedder median {p50:.3f} ms per chip over {bench_runs} runs; expected at most "
            f"{max_latency_ms:g} ms (update.max_latency_ms)"
        )
    prompts = check_text_golden(bundle, threads) if "text" in _read_body(bundle) else 0
    return GoldenResult(len(cos), tol, float(cos[worst]), p50, float(max_latency_ms), prompts)
