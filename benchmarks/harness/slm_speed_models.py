"""The models of the small-LM speed race, built once and cached under ``.cache/bench/``.

    .cache/bench/slm-int4-<key>/   convert_slm(x86_64-host, INT4): model.onnx, tokenizer.json, generation.json
    .cache/bench/slm-fp32-<key>/   convert_slm(x86_64-host, FP32)
    .cache/bench/slm-hf-<key>/     the Hugging Face folder transformers loads (fp32, from the same GGUF)

The race runs on an x86 host, so ours is what ``edge-deploy convert slm --target x86_64-host`` builds for one
(a Pi profile's build runs its projections at accuracy level 4 there, which an x86 CPU without VNNI computes
otherwise: docs/slm.md, "What the gates measure"). ``key`` hashes the GGUF's sha256, the sources of
``converters/slm`` and the profile's settings, so a change to any of them rebuilds.
Host side: imports converters.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from converters.slm.build import convert_slm
from converters.slm.gguf_source import locate_smollm2_gguf, read_gguf, source_info, write_hf_folder
from edge.profiles import Precision, TargetProfile, load_profile

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench"
SLM_SOURCES = REPO / "converters" / "slm"
#: The profile the race builds ours with: the x86 one (accuracy level 0, the fp32 LM head).
PROFILE = "x86_64-host"


@dataclass(frozen=True)
class SlmModels:
    """Everything the race loads: the GGUF, our two folders, the HF folder."""

    gguf: Path
    gguf_sha256: str
    int4_dir: Path
    fp32_dir: Path
    hf_dir: Path
    key: str


def cache_key(gguf_sha256: str, sources: Path = SLM_SOURCES, profile: TargetProfile | None = None) -> str:
    """16 hex digits of sha256 over the GGUF digest, every ``*.py`` under ``sources`` (name + bytes) and, if
    given, the profile's settings (``TargetProfile.to_dict``).

    Args:
        gguf_sha256: the GGUF's hex digest.
        sources: the converter package whose code decides what the builds contain.
        profile: the target the builds are for; its settings decide them too.

    Returns:
        The key used in the cache folder names.
    """
    digest = hashlib.sha256(gguf_sha256.encode("ascii"))
    for path in sorted(sources.rglob("*.py")):
        digest.update(path.relative_to(sources).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    if profile is not None:
        digest.update(json.dumps(profile.to_dict(), sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:16]


def cached(folder: Path, marker: str, build: Callable[[Path], None], say: Callable[[str], None]) -> Path:
    """Build into ``folder.tmp`` and rename, so an interrupted build is never taken for a finished one."""
    if (folder / marker).is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"building {folder.name}")
    build(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def race_models(progress: Callable[[str], None] | None = None, cache: Path = CACHE) -> SlmModels:
    """Build (or reuse) the INT4 and fp32 ONNX folders and the HF folder.

    Args:
        progress: called with a short line per build stage.
        cache: the cache root.

    Returns:
        The paths.

    Raises:
        ConversionError, ValidationError: a build failed (see ``converters.slm.build.convert_slm``).
    """
    say = progress or (lambda _line: None)
    gguf = locate_smollm2_gguf()
    sha = source_info(gguf).sha256
    profile = load_profile(PROFILE)
    key = cache_key(sha, profile=profile)

    def build(precision: Precision) -> Callable[[Path], None]:
        return lambda out: convert_slm(profile, precision, out, say)

    int4 = cached(cache / f"slm-int4-{key}", "report.json", build(Precision.INT4), say)
    fp32 = cached(cache / f"slm-fp32-{key}", "report.json", build(Precision.FP32), say)
    hf = cached(cache / f"slm-hf-{key}", "source.json", lambda out: write_hf_folder(read_gguf(gguf), out), say)
    for stale in stale_folders(cache, key):
        say(f"removing the stale build {stale.name}")
        shutil.rmtree(stale, ignore_errors=True)
    return SlmModels(gguf, sha, int4, fp32, hf, key)


def stale_folders(cache: Path, key: str) -> list[Path]:
    """This race's cached folders built under another key (older GGUF or converter sources)."""
    if not cache.is_dir():
        return []
    return sorted(
        p
        for kind in ("int4", "fp32", "hf")
        for p in cache.glob(f"slm-{kind}-*")
        if p.is_dir() and not p.name.endswith(".tmp") and p.name != f"slm-{kind}-{key}"
    )


if __name__ == "__main__":
    print(race_models(print))
