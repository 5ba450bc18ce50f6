"""``edge-deploy build``: a bundle a Raspberry Pi owner copies over and installs offline.

``build_bundle(load_profile("rpi4"), ["face"], Path("dist"), Path(".cache/edge-deploy"))`` writes::

    dist/rpi4-face/
      golden/face.npz, golden.json   face chips + descriptors the models gave here (edge.update.golden)
      manifest.sig              with options.sign_key: Ed25519 signature over manifest.json (edge.signing)
      manifest.json             schema version, target, profile, models (sources, licences, quantization,
                                gate metrics), wheelhouse, tool version, every file with size and sha256
      models/face/...           the stage's folder (models.json, *.onnx, reports)
      wheels/*.whl              the device extra for aarch64 / CPython 3.11 + edge-deploy's own wheel
      wheels/requirements.txt   what install.sh installs from them
      install.sh, README.md     installer and device README (edge/bundle_files/)
      profile/rpi4.toml         the target profile the bundle was built for
      systemd/edge-deploy.service, config/edge-deploy.example.toml   (when edge/daemon/ ships them)
    dist/rpi4-face.tar.gz       the same folder, archived

Model stages are cached under ``cache_dir/stages`` (see ``converters.package.stages``), the wheelhouse under
``cache_dir/wheels``; the returned :class:`Bundle` says which came from the cache.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from converters.package.stages import STAGES, ModelKind, ModelStage, StageContext, StageResult
from converters.package.wheelhouse import prepare_wheelhouse
from converters.paths import REPO_ROOT
from converters.versions import library_versions
from edge import __version__
from edge.bundle import BUNDLE_FORMAT, MANIFEST_FILE, MANIFEST_SCHEMA_VERSION, verify_bundle
from edge.digest import file_sha256
from edge.errors import BundleError, InputError
from edge.profiles import ModelFormats, Precision, TargetProfile
from edge.progress import ProgressFn, Rewritten, silent, timed
from edge.signing import SIGNATURE_FILE, load_private_key, sign_manifest

#: What ``--model`` accepts: a kind, or every kind.
MODEL_CHOICES = (*(kind.value for kind in ModelKind), "all")
BUNDLE_FILES = REPO_ROOT / "edge" / "bundle_files"
DAEMON_DIR = REPO_ROOT / "edge" / "daemon"
#: Files copied into every bundle when present: source -> path in the bundle.
EXTRA_FILES = {
    BUNDLE_FILES / "install.sh": "install.sh",
    BUNDLE_FILES / "README.device.md": "README.md",
    DAEMON_DIR / "edge-deploy.service": "systemd/edge-deploy.service",
    DAEMON_DIR / "edge-deploy.example.toml": "config/edge-deploy.example.toml",
}
EXECUTABLE = {"install.sh"}
#: The daemon's part of EXTRA_FILES: only bundles of our face/text models, which the daemon serves, get them.
DAEMON_FILES = {"systemd/edge-deploy.service", "config/edge-deploy.example.toml"}
#: Targets a Pi bundle is for (aarch64 wheels; the browser has its own build).
PI_ARCH = "aarch64"


@dataclass(frozen=True)
class BuildOptions:
    """Settings beyond the profile.

    Attributes:
        precision: overrides the profile's ``runtime.precision`` for every model (None: the profile's, with the
            language model at int4 where the profile says int8: ``stage_precision``).
        wheels: include the aarch64 wheelhouse (False for a models-only bundle).
        archive: also write ``<folder>.tar.gz``.
        golden: write the face golden set (``golden/``) that over-the-air updates check on the device.
        sign_key: an Ed25519 private key file (``edge-deploy keygen``): ``manifest.sig`` is written beside
            ``manifest.json``. The key itself never enters the bundle.
        formats: ``build --format``, for every model kind: ``tflite``/``both`` add the face models' TFLite twins
            (listed in their models.json) and the language model's LiteRT twin (``tflite``: the device runs
            it, generation.json ``runtime = "litert"``; ``both``: listed beside the ONNX the device runs);
            the manifest lists them. None: as the profile's ``runtime.face_formats`` and
            ``runtime.slm_formats`` say.
        litert_venv: the litert-torch environment of the language model's twin (None: ``.venv-litert-torch``).
    """

    precision: Precision | None = None
    wheels: bool = True
    archive: bool = True
    sign_key: Path | None = None
    golden: bool = True
    formats: ModelFormats | None = None
    litert_venv: Path | None = None


@dataclass
class Bundle:
    """A finished bundle."""

    folder: Path
    archive: Path | None
    manifest: dict[str, Any]
    stage_cache_hits: dict[str, bool] = field(default_factory=dict)
    wheel_cache_hit: bool | None = None
    seconds: float = 0.0

    @property
    def total_bytes(self) -> int:
        return sum(f["size"] for f in self.manifest["files"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "archive": str(self.archive) if self.archive else None,
            "target": self.manifest["target"],
            "files": len(self.manifest["files"]),
            "total_bytes": self.total_bytes,
            "archive_bytes": self.archive.stat().st_size if self.archive else None,
            "stage_cache_hits": self.stage_cache_hits,
            "wheel_cache_hit": self.wheel_cache_hit,
            "seconds": round(self.seconds, 1),
            "models": [{k: m[k] for k in ("kind", "precision", "folder")} for m in self.manifest["models"]],
        }

    def summary(self) -> str:
        lines = [f"bundle for {self.manifest['target']}: {self.folder} ({self.total_bytes / 1e6:.1f} MB)"]
        for m in self.manifest["models"]:
            hit = "cached" if self.stage_cache_hits.get(m["kind"]) else "built"
            hit = f"from {m['from']}" if "from" in m else hit
            licences = ", ".join(sorted({s["licence"] for s in m["sources"]}))
            lines.append(f"  {m['kind']:5} {m['precision']:5} {len(m['files'])} files ({hit}); licences {licences}")
        wh = self.manifest["wheelhouse"]
        if wh:
            state = "cached" if self.wheel_cache_hit else "downloaded"
            lines.append(f"  wheels: {len(wh['resolved'])} distributions for aarch64 ({state}), resolve offline")
        else:
            lines.append("  wheels: none (--no-wheels)")
        if self.archive:
            lines.append(f"  archive: {self.archive} ({self.archive.stat().st_size / 1e6:.1f} MB)")
        lines.append(f"  verify on the Pi: edge-deploy verify {self.folder.name}")
        return "\n".join(lines)


def check_pi_target(profile: TargetProfile) -> None:
    """Bundles are for aarch64 boards (the browser has its own build).

    Raises:
        BundleError: naming the profile file and its arch.
    """
    if profile.cpu.arch.value != PI_ARCH:
        raise BundleError(
            f"{profile.source}: cpu.arch = '{profile.cpu.arch.value}'; 'edge-deploy build' makes bundles for "
            f"{PI_ARCH} boards (rpi4, rpi5, rpi-zero-2w, aarch64-generic)"
        )


def model_kinds(models: list[str]) -> list[ModelKind]:
    """``["all"]`` -> every kind; otherwise the kinds in a fixed order, each once.

    Raises:
        BundleError: an unknown model name.
    """
    kinds: list[ModelKind] = []
    for name in models:
        if name not in MODEL_CHOICES:
            raise BundleError(f"model {name!r}; expected one of {', '.join(MODEL_CHOICES)}")
        kinds += list(STAGES) if name == "all" else [ModelKind(name)]
    return [k for k in STAGES if k in kinds]


def run_stage(
    stage: ModelStage,
    profile: TargetProfile,
    precision: Precision,
    cache_dir: Path,
    progress: ProgressFn,
    formats: ModelFormats = ModelFormats.ONNX,
    litert_venv: Path | None = None,
) -> tuple[Path, StageResult, str, bool]:
    """The stage's cached folder (built when missing); its result, cache key and whether it was a hit."""
    key = stage.cache_key(profile, precision, formats)
    twins = f"-{formats.value}" if formats.tflite else ""
    prefix = f"{profile.name}-{stage.kind}{twins}-{precision.value}-"
    folder = cache_dir / "stages" / f"{prefix}{key}"
    record = folder / "stage.json"
    if record.is_file():
        progress(f"{stage.kind} models at {precision.value}: unchanged, reusing the cache ({folder.name})")
        return folder / "files", StageResult.from_dict(json.loads(record.read_text(encoding="utf-8"))), key, True
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "files").mkdir(parents=True)
    (partial / "work").mkdir()
    progress(f"{stage.kind} models: converting for {profile.name} at {precision.value}")

    def fp32_folder() -> Path:
        return run_stage(stage, profile, Precision.FP32, cache_dir, progress, formats, litert_venv)[0]

    work = partial / "work"
    # Lines name the folder the stage ends in (the .partial one is renamed when it passes).
    say = Rewritten(progress, lambda line: line.replace(str(partial), str(folder)))
    ctx = StageContext(profile, precision, partial / "files", work, say, fp32_folder, formats, litert_venv)
    # On failure the .partial folder stays: the reports in it (named by the error) explain why.
    result = stage.run(ctx)
    shutil.rmtree(partial / "work")
    (partial / "stage.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    for stale in folder.parent.glob(prefix + "*"):  # older builds of the same target/kind/precision
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return folder / "files", result, key, False


def stage_formats(
    profile: TargetProfile, kinds: list[ModelKind], asked: ModelFormats | None
) -> dict[ModelKind, ModelFormats]:
    """Each kind's formats: ``build --format`` (``asked``) for all, else the profile's ``runtime.face_formats``
    and ``runtime.slm_formats``."""
    own = {ModelKind.FACE: profile.runtime.face_formats, ModelKind.SLM: profile.runtime.slm_formats}
    return {kind: asked or own[kind] for kind in kinds}


def stage_precision(kind: ModelKind, profile: TargetProfile, asked: Precision | None) -> Precision:
    """A stage's precision: ``--precision`` when given, else the profile's, except that the language model
    takes int4 where the profile says int8 (``converters.slm.build.default_precision``, as ``convert slm``)."""
    if asked is not None:
        return asked
    if kind is ModelKind.SLM:
        from converters.slm.build import default_precision

        return default_precision(profile)
    return profile.runtime.precision


def check_twins(
    profile: TargetProfile,
    precisions: dict[ModelKind, Precision],
    formats: dict[ModelKind, ModelFormats],
    opts: BuildOptions,
) -> None:
    """Refuse, before any stage runs, twins that cannot be built here: the face twins' precision and onnx2tf's
    venv; the language model's LiteRT twin at int4 and without litert-torch's venv.

    Raises:
        ConversionError: a precision the twins have no recipe for (naming ``--format`` or the profile key).
        MissingDependencyError: a side venv is missing (naming its set-up script).
    """
    if formats.get(ModelKind.FACE, ModelFormats.ONNX).tflite:
        from converters.face.build import check_formats
        from converters.tflite.convert import onnx2tf_executable

        check_formats(precisions[ModelKind.FACE], False, ModelFormats.BOTH)
        onnx2tf_executable()  # a missing venv names scripts/setup_onnx2tf.sh
    slm = formats.get(ModelKind.SLM, ModelFormats.ONNX)
    if slm.tflite:
        from converters.package.stages import litert_options
        from converters.slm.build import check_tflite_twin

        asked_by = f"--format {slm.value}" if opts.formats else f"{profile.source}: runtime.slm_formats = '{slm.value}'"
        check_tflite_twin(precisions[ModelKind.SLM], litert_options(opts.litert_venv), asked_by)


def _prepare_folder(folder: Path) -> None:
    """Empty ``folder`` for a new build, refusing to delete anything that is not a bundle of ours."""
    if folder.exists():
        if not folder.is_dir() or (any(folder.iterdir()) and not (folder / MANIFEST_FILE).is_file()):
            raise BundleError(f"{folder}: exists and is not a bundle (no {MANIFEST_FILE}); remove it or pick -o")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


@contextmanager
def _fresh_folder(folder: Path) -> Iterator[None]:
    """Empty ``folder`` for a new build (``_prepare_folder``) and remove it if the build then fails: a
    half-written bundle is no bundle, and the next build would refuse to replace it."""
    _prepare_folder(folder)
    try:
        yield
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _copy_extras(folder: Path, profile: TargetProfile, daemon: bool = True) -> None:
    """install.sh, the device README and the profile; with ``daemon``, also the daemon's unit and config
    template (a user-model bundle has no daemon service: its config would point at face models it lacks)."""
    for src, rel in EXTRA_FILES.items():
        if not daemon and rel in DAEMON_FILES:
            continue
        if src.is_file():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, folder / rel)
            if rel in EXECUTABLE:
                (folder / rel).chmod(0o755)
    (folder / "profile").mkdir(exist_ok=True)
    shutil.copy2(profile.source, folder / "profile" / Path(profile.source).name)


def _manifest(folder: Path, profile: TargetProfile, models: list[dict], wheelhouse: dict | None) -> dict[str, Any]:
    own = (folder / MANIFEST_FILE, folder / SIGNATURE_FILE)  # the manifest lists neither itself nor its signature
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p not in own)
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "format": BUNDLE_FORMAT,
        "target": profile.name,
        "tool": "edge-deploy",
        "tool_version": __version__,
        "versions": library_versions(),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": {
            "file": f"profile/{Path(profile.source).name}",
            "sha256": file_sha256(Path(profile.source)),
            "settings": profile.to_dict(),
        },
        "models": models,
        "wheelhouse": wheelhouse,
        "files": [
            {"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size, "sha256": file_sha256(p)}
            for p in files
        ],
    }


def _golden(folder: Path, kinds: list[ModelKind], profile: TargetProfile, progress: ProgressFn) -> None:
    """The golden set of the device's acceptance check (``converters.package.golden``)."""
    from converters.package.golden import make_face_golden, make_text_golden

    if ModelKind.FACE in kinds:
        line = "golden set: the bundle's face models on real photos (the device's acceptance check)"
        with timed(progress, line, f"build: face golden set {profile.name}"):
            make_face_golden(folder / "models" / "face", folder, profile)
    if ModelKind.SLM in kinds:
        line = "golden set: the bundle's language model's greedy tokens for a few prompts"
        with timed(progress, line, f"build: text golden set {profile.name}"):
            make_text_golden(folder / "models" / "slm", folder)


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owner root, no user names from the build machine; files 0644 except the installer."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isfile():
        top_level = info.name.count("/") == 1
        info.mode = 0o755 if top_level and info.name.endswith("/install.sh") else 0o644
    else:
        info.mode = 0o755
    return info


def _archive(folder: Path) -> Path:
    archive = folder.with_name(folder.name + ".tar.gz")
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        tar.add(folder, arcname=folder.name, filter=_tar_filter)
    partial.replace(archive)
    return archive


def build_bundle(
    profile: TargetProfile,
    models: list[str],
    out_dir: Path,
    cache_dir: Path,
    progress: ProgressFn = silent,
    options: BuildOptions | None = None,
) -> Bundle:
    """Build ``out_dir/<target>-<kinds>/`` (and its ``.tar.gz``) for a Raspberry Pi-class target.

    Args:
        profile: an aarch64 target (rpi4, rpi5, rpi-zero-2w, aarch64-generic).
        models: ``["face"]``, ``["slm"]``, ``["face", "slm"]`` or ``["all"]``.
        out_dir: where the bundle folder and archive go.
        cache_dir: stage and wheel cache, kept between builds.
        progress: called with a line per step.
        options: precision override, wheels on/off, archive on/off, signing key.

    Returns:
        The bundle (already verified against its own manifest).

    Raises:
        BundleError: not an aarch64 target, an unknown model, an output folder that is not a bundle, pip failed.
        InputError: the signing key is missing, readable by others, or not an Ed25519 private key.
        ConversionError / ValidationError / InputError: from the model stages.
    """
    start = time.perf_counter()
    opts = options or BuildOptions()
    check_pi_target(profile)
    kinds = model_kinds(models)
    if opts.sign_key is not None:
        load_private_key(opts.sign_key)  # a bad key or mode fails now, not after the conversions
    precisions = {kind: stage_precision(kind, profile, opts.precision) for kind in kinds}
    formats = stage_formats(profile, kinds, opts.formats)
    check_twins(profile, precisions, formats, opts)  # what cannot be built fails now, not after minutes of work
    folder = Path(out_dir) / f"{profile.name}-{'-'.join(kinds)}"
    bundle = Bundle(folder, None, {})
    stage_outputs = []
    for kind in kinds:
        files, result, key, hit = run_stage(
            STAGES[kind], profile, precisions[kind], Path(cache_dir), progress, formats[kind], opts.litert_venv
        )
        bundle.stage_cache_hits[kind] = hit
        stage_outputs.append((files, result, key))
    progress(f"assembling {folder}")
    with _fresh_folder(folder):
        model_records = []
        for files, result, key in stage_outputs:
            shutil.copytree(files, folder / "models" / result.kind)
            model_records.append({**result.to_dict(), "folder": f"models/{result.kind}", "cache_key": key})
        if opts.golden:
            _golden(folder, kinds, profile, progress)
        _finish(bundle, profile, model_records, kinds, Path(cache_dir), opts, progress)
    bundle.seconds = time.perf_counter() - start
    return bundle


def _finish(
    bundle: Bundle,
    profile: TargetProfile,
    model_records: list[dict],
    kinds: list[ModelKind],
    cache_dir: Path,
    opts: BuildOptions,
    progress: ProgressFn,
    daemon: bool = True,
) -> None:
    """What every bundle gets once its models are in place: wheelhouse, install.sh and the other extras,
    manifest.json, the signature, its own verification and the archive."""
    folder = bundle.folder
    wheelhouse = None
    if opts.wheels:
        wh = prepare_wheelhouse(kinds, folder / "wheels", cache_dir, progress)
        bundle.wheel_cache_hit = wh.cache_hit
        wheelhouse = wh.to_dict()
    _copy_extras(folder, profile, daemon)
    progress("hashing files and writing manifest.json")
    bundle.manifest = _manifest(folder, profile, model_records, wheelhouse)
    manifest_bytes = (json.dumps(bundle.manifest, indent=2) + "\n").encode("utf-8")
    (folder / MANIFEST_FILE).write_bytes(manifest_bytes)
    if opts.sign_key is not None:
        progress(f"signing manifest.json with {opts.sign_key}")
        (folder / SIGNATURE_FILE).write_bytes(sign_manifest(manifest_bytes, opts.sign_key))
    verify_bundle(folder)
    if opts.archive:
        with timed(progress, f"archiving to {folder.name}.tar.gz", f"build: archive {folder.name}"):
            bundle.archive = _archive(folder)


def build_model_bundle(
    profile: TargetProfile,
    model_dir: Path,
    out_dir: Path,
    cache_dir: Path,
    progress: ProgressFn = silent,
    options: BuildOptions | None = None,
    licence: str | None = None,
) -> Bundle:
    """A bundle of a passed folder: ``out_dir/<target>-model-<name>/`` from a ``convert model`` folder, or
    ``out_dir/<target>-face-<name>/`` from a ``convert face`` folder (``converters.package.face_folder``: a
    user's own embedder, an added BlazeFace detector; with the daemon's files and the golden set, as
    ``--model face``).

    The folder is bundled as it is (not converted again), after checking that its gate passed, that it was
    made for ``profile`` (and ``options.precision``, when given) and that its files still have the sha256s
    the conversion recorded. A convert model folder gets no golden set and no daemon files.

    Args:
        profile: the target the folder was converted for (an aarch64 board).
        model_dir: the ``convert model -o`` or ``convert face -o`` folder.
        out_dir: where the bundle folder and archive go.
        cache_dir: the wheel cache, kept between builds.
        progress: called with a line per step.
        options: precision (must match the folder's), wheels on/off, archive on/off, signing key.
        licence: a convert model folder's licence for the manifest (None: what convert model recorded, else
            ``user_model.UNKNOWN_LICENCE``); refused for a face folder, whose models.json records its own.

    Returns:
        The bundle (already verified against its own manifest).

    Raises:
        InputError: no models.json (gate failed), not a convert model or face folder, changed files, another
            target or precision, a licence for a face folder, a bad signing key.
        BundleError: not an aarch64 target, an output folder that is not a bundle, pip failed.
    """
    from converters.package import face_folder, user_model

    start = time.perf_counter()
    opts = options or BuildOptions()
    check_pi_target(profile)
    if face_folder.is_face_folder(model_dir):
        if licence is not None:
            raise InputError(
                f"--licence: {model_dir} is a convert face folder; its models.json records every model's licence "
                "(a user embedder's: convert face --licence)"
            )
        face = face_folder.read_face_folder(model_dir)
        face_folder.check_target(face, profile, opts.precision)
        name, kinds = face_folder.bundle_name(face, profile), [ModelKind.FACE]

        def fill(folder: Path) -> dict:
            return face_folder.copy_face_folder(face, folder / "models" / ModelKind.FACE.value, progress)

    else:
        model = user_model.read_model_folder(model_dir)
        user_model.check_target(model, profile, opts.precision.value if opts.precision else None)
        user_model.licence_of(model, licence)  # a bad --licence fails before anything is written
        name, kinds = user_model.bundle_name(model, profile), []

        def fill(folder: Path) -> dict:
            return user_model.copy_model(model, folder / "models" / user_model.USER_KIND, licence, progress)

    if opts.sign_key is not None:
        load_private_key(opts.sign_key)
    folder = Path(out_dir) / name
    bundle = Bundle(folder, None, {})
    progress(f"assembling {folder}")
    with _fresh_folder(folder):
        record = fill(folder)
        record["folder"] = f"models/{record['kind']}"
        if opts.golden and kinds:
            _golden(folder, kinds, profile, progress)
        _finish(bundle, profile, [record], kinds, Path(cache_dir), opts, progress, daemon=bool(kinds))
    bundle.seconds = time.perf_counter() - start
    return bundle


def build_browser_site(
    profile: TargetProfile,
    models: list[str],
    out_dir: Path,
    cache_dir: Path,
    progress: ProgressFn = silent,
    search=None,
):
    """The static onnxruntime-web site for the browser profile in ``out_dir`` (fp32 models, cached stages;
    ``search``: a ``converters.package.web_search.SearchSite`` for the page's semantic search, or None: with
    ``all`` the default one, ``web_search_default.default_search``, cached too).

    Returns:
        ``converters.package.web.WebBuild``.

    Raises:
        ProfileError: the profile is not for onnxruntime-web; and whatever the model stages raise.
    """
    from converters.package.web import build_browser

    kinds = model_kinds(models)
    folders = {kind: run_stage(STAGES[kind], profile, Precision.FP32, Path(cache_dir), progress)[0] for kind in kinds}
    if search is None and "all" in models:
        from converters.package.web_search_default import default_search

        search = default_search(profile, Path(cache_dir), progress)
    progress(f"writing the browser site to {out_dir}")
    face, text = folders.get(ModelKind.FACE), folders.get(ModelKind.SLM)
    return build_browser(profile, face, Path(out_dir), progress, text=text, search=search)
