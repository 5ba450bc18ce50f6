"""The wheelhouse of a Raspberry Pi bundle: the device extra's wheels for aarch64, downloaded on the host.

pip takes platform tags literally: asking for ``manylinux2014_aarch64`` alone silently yields old versions,
so every manylinux tag a Raspberry Pi OS bookworm (glibc 2.36) accepts is listed. After the download, the
wheelhouse is proven complete by resolving the device install OFFLINE for aarch64 (``pip install --dry-run
--no-index``), the same resolution ``install.sh`` performs on the Pi.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from converters.package.stages import ModelKind
from converters.paths import REPO_ROOT
from converters.tools import run_tool
from edge import __version__
from edge.digest import file_sha256
from edge.errors import BundleError
from edge.progress import ProgressFn, silent, timed
from edge.shipped import lock_file

PYTHON_VERSION = "3.11"  # Raspberry Pi OS bookworm's python3
IMPLEMENTATION = "cp"
ABIS = ("cp311", "abi3", "none")
GLIBC_MAX_MINOR = 36  # bookworm's glibc 2.36
#: Extra requirements per model kind, beyond the device extra.
KIND_REQUIREMENTS = {ModelKind.FACE: (), ModelKind.SLM: ("tokenizers>=0.20",)}
REQUIREMENTS_FILE = "requirements.txt"
#: Folders and files of the source tree that go into edge-deploy's own wheel (setup.py maps web/, data/,
#: firmware_configs/ and the lock into it; web/node_modules is never copied).
OWN_SOURCES = (
    "pyproject.toml",
    "setup.py",
    "constraints.txt",
    "README.md",
    "edge",
    "converters",
    "edge_deploy",
    "fleet",
    "firmware_configs",
    "web",
    "data",
)
_NOT_SOURCES = ("__pycache__", "*.pyc", "node_modules")
PIP_TIMEOUT_S = 1800


def aarch64_platforms(glibc_max_minor: int = GLIBC_MAX_MINOR) -> tuple[str, ...]:
    """Every manylinux tag an aarch64 glibc ``2.<glibc_max_minor>`` system accepts (pip needs them all)."""
    return ("manylinux2014_aarch64", *(f"manylinux_2_{m}_aarch64" for m in range(17, glibc_max_minor + 1)))


@dataclass(frozen=True)
class WheelhouseSpec:
    """What to download: the requirement set and the interpreter/platform it is for."""

    requirements: tuple[str, ...]
    platforms: tuple[str, ...] = field(default_factory=aarch64_platforms)
    python_version: str = PYTHON_VERSION
    abis: tuple[str, ...] = ABIS
    #: The lock (constraints.txt): the device gets the versions the host's build and tests had.
    constraints: Path = field(default_factory=lock_file)

    def key(self) -> str:
        """Cache key: a hash of the requirement set, the platform and the lock's content."""
        lock = file_sha256(self.constraints) if self.constraints.is_file() else "no lock"
        blob = json.dumps([sorted(self.requirements), self.platforms, self.python_version, self.abis, lock])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def target_args(self) -> list[str]:
        """pip's options that select wheels for the device rather than this host, at the lock's versions.

        Raises:
            BundleError: the lock is missing.
        """
        if not self.constraints.is_file():
            raise BundleError(f"{self.constraints}: the lock is missing; expected edge-deploy's constraints.txt")
        args = ["--only-binary=:all:", "--python-version", self.python_version, "--implementation", IMPLEMENTATION]
        args += ["-c", str(self.constraints)]
        for abi in self.abis:
            args += ["--abi", abi]
        for platform in self.platforms:
            args += ["--platform", platform]
        return args

    def to_dict(self) -> dict:
        return {
            "python_version": self.python_version,
            "implementation": IMPLEMENTATION,
            "abis": list(self.abis),
            "platforms": list(self.platforms),
            "requirements": list(self.requirements),
            "constraints_sha256": file_sha256(self.constraints) if self.constraints.is_file() else None,
        }


@dataclass(frozen=True)
class Wheelhouse:
    """A filled wheelhouse folder, proven to resolve offline."""

    folder: Path
    spec: WheelhouseSpec
    install: tuple[str, ...]
    resolved: dict[str, str]
    own_wheel: Path
    cache_hit: bool

    def to_dict(self) -> dict:
        return {
            **self.spec.to_dict(),
            "install": list(self.install),
            "resolved": dict(sorted(self.resolved.items())),
            "cache_key": self.spec.key(),
            # The own wheel's cache folder is named by the hash of the sources it was built from.
            "edge_deploy_wheel": {"file": self.own_wheel.name, "sources_hash": self.own_wheel.parent.name},
        }


def device_requirements(kinds: list[ModelKind], pyproject: Path = REPO_ROOT / "pyproject.toml") -> tuple[str, ...]:
    """The base dependencies and the device extra from ``pyproject.toml``, plus what the model kinds need."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        base = data["project"]["dependencies"]
        device = data["project"]["optional-dependencies"]["device"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise BundleError(
            f"{pyproject}: cannot read [project] dependencies and optional-dependencies.device ({exc})"
        ) from exc
    extra = [r for kind in kinds for r in KIND_REQUIREMENTS.get(kind, ())]
    return tuple(dict.fromkeys([*base, *device, *extra]))


def _pip(args: list[str], what: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return run_tool(cmd, PIP_TIMEOUT_S, f"pip ({what})", BundleError)


def _check_platform_tags(folder: Path) -> None:
    """Refuse a wheel built for another machine (a host wheel would fail only on the Pi)."""
    for wheel in sorted(folder.glob("*.whl")):
        platform = wheel.stem.split("-")[-1]
        if not all(p == "any" or p.endswith("_aarch64") for p in platform.split(".")):
            raise BundleError(f"{wheel}: platform tag {platform!r}; expected an aarch64 manylinux tag or 'any'")


def _source_hash(root: Path) -> str:
    h = hashlib.sha256()
    for name in OWN_SOURCES:
        base = root / name
        paths = (
            [base]
            if base.is_file()
            else sorted(
                p
                for p in base.rglob("*")
                if p.is_file() and not {"__pycache__", "node_modules"} & set(p.parts) and p.suffix != ".pyc"
            )
        )
        for path in paths:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def own_wheel(cache_dir: Path, root: Path = REPO_ROOT, progress: ProgressFn = silent) -> tuple[Path, bool]:
    """edge-deploy's own wheel (``pip wheel --no-deps``), built from a clean copy of the source tree.

    Returns:
        The wheel and whether it came from the cache (keyed by a hash of the sources).
    """
    folder = cache_dir / "own-wheel" / _source_hash(root)
    wheels = sorted(folder.glob("edge_deploy-*.whl"))
    if wheels:
        return wheels[0], True
    line = f"building edge-deploy's own wheel (pip wheel --no-deps, sources {folder.name})"
    with timed(progress, line, "build: own wheel"), tempfile.TemporaryDirectory(prefix="edge-deploy-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in OWN_SOURCES:
            item = root / name
            if item.is_dir():
                shutil.copytree(item, src / name, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
            elif item.is_file():
                shutil.copy2(item, src / name)
        built = Path(tmp) / "wheel"
        _pip(["wheel", "--no-deps", "--no-build-isolation", "-q", str(src), "-w", str(built)], "edge-deploy's wheel")
        wheel = next(built.glob("edge_deploy-*.whl"))
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, folder / wheel.name)
    return folder / wheel.name, False


def _download(spec: WheelhouseSpec, cache_dir: Path, progress: ProgressFn) -> tuple[Path, bool]:
    folder = cache_dir / "wheels" / spec.key()
    if (folder / ".complete").is_file():
        return folder, True
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    line = f"downloading {len(spec.requirements)} device requirements for aarch64 / Python {spec.python_version}"
    with timed(progress, line, f"build: wheel download {spec.key()}"):
        _pip(["download", "-q", *spec.target_args(), "-d", str(partial), *spec.requirements], "aarch64 wheel download")
    _check_platform_tags(partial)
    (partial / ".complete").write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder, False


def check_offline(spec: WheelhouseSpec, folder: Path, install: tuple[str, ...]) -> dict[str, str]:
    """Resolve ``install`` from ``folder`` alone, for the device's platform (a dry run).

    Returns:
        Every distribution pip would install, name -> version.

    Raises:
        BundleError: pip cannot resolve it offline (the wheelhouse is incomplete), naming pip's complaint.
    """
    with tempfile.TemporaryDirectory(prefix="edge-deploy-dry-") as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--no-index", "--find-links", str(folder), "--target", str(Path(tmp) / "t")]
        _pip([*args, *spec.target_args(), "--report", str(report), *install], f"offline resolution from {folder}")
        data = json.loads(report.read_text(encoding="utf-8"))
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in data.get("install", [])}


def prepare_wheelhouse(
    kinds: list[ModelKind], dest: Path, cache_dir: Path, progress: ProgressFn = silent
) -> Wheelhouse:
    """Fill ``dest`` with the device wheels (cached) and edge-deploy's own wheel, and prove it offline.

    Args:
        kinds: the model kinds of the bundle (``"slm"`` adds tokenizers).
        dest: the bundle's wheels folder (created; gets the wheels and ``requirements.txt``).
        cache_dir: where downloads and the own wheel are kept between builds.
        progress: called with a line per step.

    Returns:
        The wheelhouse; ``cache_hit`` when nothing had to be downloaded or built.

    Raises:
        BundleError: pip failed, a wheel is not for aarch64, or the offline resolution failed.
    """
    spec = WheelhouseSpec(device_requirements(kinds))
    third, hit_third = _download(spec, Path(cache_dir), progress)
    own, hit_own = own_wheel(Path(cache_dir), progress=progress)
    dest.mkdir(parents=True, exist_ok=True)
    for wheel in [*sorted(third.glob("*.whl")), own]:
        shutil.copy2(wheel, dest / wheel.name)
    install = (f"edge-deploy[device]=={__version__}", *(r for k in kinds for r in KIND_REQUIREMENTS.get(k, ())))
    (dest / REQUIREMENTS_FILE).write_text("\n".join(install) + "\n", encoding="utf-8")
    with timed(progress, "checking that the wheelhouse resolves offline for aarch64", f"build: offline {install}"):
        resolved = check_offline(spec, dest, install)
    return Wheelhouse(dest, spec, install, resolved, own, hit_third and hit_own)
