"""An emulated Raspberry Pi on the host: device code in a Debian arm64 rootfs under qemu-user.

    guest = ArmGuest(build_rootfs(), cpu="cortex-a72")
    guest.install_wheels(wheel_dir)            # the install.sh-equivalent path, from a wheelhouse
    guest.install_edge()                       # the repo's device package: edge/ and firmware_configs/
    result = guest.run(Path("scripts/arm/run_face.py"), ["--models", str(models), ...])

The rootfs comes from ``scripts/arm/rootfs.sh`` (debootstrap --foreign + unpacked debs; ~30 s, cached).
Guest programs run as ``qemu-aarch64-static -cpu C -L ROOTFS ROOTFS/usr/bin/python3``: qemu looks every
absolute path up in ROOTFS first and falls back to the host's, so a guest reads models and writes results at
the host's own paths. The rootfs is shared by every CPU model: before each run the harness writes a
Pi-like ``/proc/cpuinfo`` and ``/sys/devices/system/cpu/*`` for the chosen model (onnxruntime's cpuinfo
segfaults on the host's x86 cpuinfo) and holds a lock for the run, so two CPU models never see each
other's files. ``-cpu`` is always passed: qemu's default ``max`` CPU has SVE, which no Pi has.

Exact instruction counts (``converters.arm.cost``) come from the TCG plugin ``scripts/arm/insncount.c`` run by
the dynamic ``qemu-aarch64`` (the static build cannot load plugins) under ``setarch x86_64 -R`` with
``PYTHONHASHSEED=0``, which makes counts repeat exactly.

This is host-side tooling (it lives in ``converters/``); nothing in ``edge/`` imports it.
"""

from __future__ import annotations

import compileall
import enum
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from converters.paths import REPO_ROOT
from converters.tools import run_tool
from edge.errors import InferenceError, InputError, MissingDependencyError
from edge.progress import ProgressFn, silent, timed

SCRIPTS = REPO_ROOT / "scripts" / "arm"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "arm"
ROOTFS_STAMP = ".edge-deploy-rootfs"
GUEST_SITE = "/opt/site"
GUEST_EDGE = "/opt/edge"
#: What the device needs, as pip names: pyproject's ``device`` extra plus tokenizers (``edge.text``).
DEVICE_PACKAGES = ("numpy", "onnxruntime", "ai-edge-litert", "opencv-python-headless", "paho-mqtt", "tokenizers")
#: pip takes platform tags literally: list every manylinux level, else it silently picks old releases.
AARCH64_PLATFORMS = ("manylinux2014_aarch64", *(f"manylinux_2_{minor}_aarch64" for minor in range(17, 37)))
_PIP_TARGET_ARGS = ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp")
_ABIS = ("--abi", "cp311", "--abi", "abi3", "--abi", "none")


def compile_site(site: Path) -> None:
    """Write the byte-code of every module in the guest's ``site`` now (host and guest are both CPython 3.11).

    pip's ``--target`` install for another platform leaves modules uncompiled, so the first guest run that
    imports one compiles it: ai-edge-litert's first decode counted 92.6 M instructions a token on the A72
    where every later run counts 97.4 M (the compile fell inside the n-token run, not the n + k one).
    """
    compileall.compile_dir(site, quiet=1)


class CpuModel(enum.Enum):
    """The Arm cores we emulate, by qemu's ``-cpu`` name."""

    CORTEX_A53 = "cortex-a53"  # Raspberry Pi Zero 2 W (and Pi 3)
    CORTEX_A72 = "cortex-a72"  # Raspberry Pi 4
    CORTEX_A76 = "cortex-a76"  # Raspberry Pi 5


#: Which core a board profile runs on.
CPU_OF_PROFILE = {"rpi4": CpuModel.CORTEX_A72, "rpi5": CpuModel.CORTEX_A76, "rpi-zero-2w": CpuModel.CORTEX_A53}

# What Raspberry Pi OS shows in /proc/cpuinfo per core: (Features, variant, part, revision, BogoMIPS).
_CPUINFO = {
    CpuModel.CORTEX_A53: ("fp asimd evtstrm crc32 cpuid", "0x0", "0xd03", "4", "38.40"),
    CpuModel.CORTEX_A72: ("fp asimd evtstrm crc32 cpuid", "0x0", "0xd08", "3", "108.00"),
    CpuModel.CORTEX_A76: (
        "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
        "0x4",
        "0xd0b",
        "1",
        "108.00",
    ),
}


def cpu_model(cpu: str | CpuModel, given_as: str = "cpu =") -> CpuModel:
    """``cpu`` as a CpuModel.

    Args:
        cpu: a core name (``cortex-a72``) or a CpuModel.
        given_as: how the error names where the value came from (``"--cpu"`` for a flag).

    Raises:
        InputError: for a name qemu's Pi cores do not have, listing the known ones.
    """
    if isinstance(cpu, CpuModel):
        return cpu
    try:
        return CpuModel(cpu)
    except ValueError:
        known = ", ".join(m.value for m in CpuModel)
        raise InputError(f"{given_as} {cpu!r}; expected one of {known}") from None


def cpuinfo_text(cpu: CpuModel, cores: int) -> str:
    """A Raspberry Pi OS-like /proc/cpuinfo for ``cores`` cores of model ``cpu``."""
    features, variant, part, revision, bogomips = _CPUINFO[cpu]
    blocks = [
        f"processor\t: {i}\nBogoMIPS\t: {bogomips}\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
        f"CPU architecture: 8\nCPU variant\t: {variant}\nCPU part\t: {part}\nCPU revision\t: {revision}\n"
        for i in range(cores)
    ]
    return "\n".join(blocks) + "\n"


def build_rootfs(rootfs: Path | None = None, timeout: float = 1800) -> Path:
    """Build (or reuse) the Debian bookworm arm64 rootfs with ``scripts/arm/rootfs.sh``.

    Args:
        rootfs: where it lives; default ``<repo>/.cache/arm/rootfs``.
        timeout: seconds allowed for a first build (apt + debootstrap download).

    Returns:
        The rootfs folder (it carries the stamp file).

    Raises:
        InferenceError: the script failed or timed out; the message carries its last lines.
    """
    rootfs = Path(rootfs) if rootfs else DEFAULT_CACHE / "rootfs"
    if (rootfs / ROOTFS_STAMP).is_file():
        return rootfs
    script = SCRIPTS / "rootfs.sh"
    run_tool(["bash", script, rootfs], timeout, f"{script} {rootfs}", InferenceError)
    return rootfs


def download_wheels(dest: Path, packages: Sequence[str] = DEVICE_PACKAGES, timeout: float = 900) -> Path:
    """Download cp311 aarch64 wheels of ``packages`` (and their dependencies) into ``dest``.

    Uses the host's pip with every manylinux aarch64 tag listed. Skipped when ``dest`` already has a wheel
    for each package.

    Raises:
        InferenceError: pip failed (its last lines are in the message).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    have = {_dist_name(w.name) for w in dest.glob("*.whl")}
    if all(_canon(p) in have for p in packages):
        return dest
    platforms = [a for tag in AARCH64_PLATFORMS for a in ("--platform", tag)]
    cmd = [_host_pip(), "download", "-q", *_PIP_TARGET_ARGS, *_ABIS, *platforms, "-d", str(dest), *packages]
    run_tool(cmd, timeout, f"pip downloading aarch64 wheels into {dest}", InferenceError)
    return dest


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_name(wheel_file: str) -> str:
    return _canon(wheel_file.split("-", 1)[0])


def run_both(
    guest: ArmGuest,
    script: Path,
    args_for: Callable[[Path], list[str]],
    outputs: tuple[Path, Path],
    timeout: float,
    host_python: Path | None = None,
    host_extra: Sequence[str] = (),
) -> tuple[dict, dict]:
    """Run a ``scripts/arm`` script on the host (this interpreter) and in the guest; read both JSON results.

    Args:
        guest: a prepared guest.
        script: the script (host path).
        args_for: its arguments, given the JSON file it is to write.
        outputs: (host result file, guest result file).
        timeout: seconds for each run.
        host_python: the host interpreter (default: this one).
        host_extra: arguments given to the host run only.

    Returns:
        (host result, guest result).

    Raises:
        InferenceError: either run failed or timed out (the message carries the end of its stderr).
    """
    host_out, guest_out = outputs
    run_tool(
        [host_python or sys.executable, script, *args_for(host_out), *host_extra],
        timeout,
        f"{script.name} on the host",
        InferenceError,
    )
    guest.run(script, args_for(guest_out), timeout=timeout)
    return read_result(host_out, script), read_result(guest_out, script)


def _host_pip() -> str:
    venv_pip = Path(sys.executable).with_name("pip")
    return str(venv_pip) if venv_pip.is_file() else "pip"


def read_result(path: Path, script: Path) -> dict:
    """The JSON result ``script`` (a guest script of scripts/arm) wrote to ``path``.

    Raises:
        InferenceError: the file is missing or not JSON (the script failed before writing it).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InferenceError(f"{path}: no readable result from {script.name} ({exc})") from exc


class ArmGuest:
    """One emulated aarch64 machine: a rootfs, a CPU model, and a way to run Python in it.

    Args:
        rootfs: a folder built by ``scripts/arm/rootfs.sh`` (see ``build_rootfs``).
        cpu: qemu's core name, ``"cortex-a72"`` (Pi 4), ``"cortex-a76"`` (Pi 5) or ``"cortex-a53"``.
        cores: cores the guest's /proc/cpuinfo and /sys files show (at most the host's).
        timeout: default seconds a guest program may run.

    Raises:
        InputError: the rootfs is missing or unfinished, or the CPU model is unknown.
        MissingDependencyError: (from ``run``) qemu-user-static, or for counting qemu-user, is not installed.
    """

    def __init__(self, rootfs: Path, cpu: str | CpuModel = "cortex-a72", cores: int = 4, timeout: float = 900):
        self.rootfs = Path(rootfs).resolve()
        self.cpu = cpu_model(cpu)
        self.cores = max(1, min(int(cores), os.cpu_count() or 1))
        self.timeout = timeout
        if not (self.rootfs / ROOTFS_STAMP).is_file():
            raise InputError(
                f"{self.rootfs}: not a finished arm64 rootfs (no {ROOTFS_STAMP}); build it with "
                f"scripts/arm/rootfs.sh {self.rootfs}"
            )

    @property
    def python(self) -> Path:
        """The guest's interpreter, as a host path."""
        return self.rootfs / "usr" / "bin" / "python3"

    def install_wheels(self, wheel_dir: Path, packages: Sequence[str] | None = None, timeout: float = 600) -> None:
        """Install aarch64 wheels into the guest's ``/opt/site`` with the host's pip (no network).

        This is what a bundle's install.sh does on a Pi (``pip install --no-index --find-links wheels``),
        run on the host with the aarch64 platform tags. Re-installing the same wheel set is skipped.

        Args:
            wheel_dir: folder of cp311 aarch64 wheels (a bundle's ``wheels/`` or ``download_wheels``).
            packages: what to install; default every distribution that has a wheel in ``wheel_dir``.
            timeout: seconds pip may take.

        Raises:
            InputError: ``wheel_dir`` has no wheels; InferenceError: pip failed.
        """
        wheel_dir = Path(wheel_dir).resolve()
        wheels = sorted(w.name for w in wheel_dir.glob("*.whl"))
        if not wheels:
            raise InputError(f"{wheel_dir}: no .whl files; expected cp311 aarch64 wheels")
        wanted = sorted(packages) if packages else sorted({_dist_name(w) for w in wheels})
        stamp = self.rootfs / GUEST_SITE.lstrip("/") / ".edge-deploy-wheels"
        key = "\n".join([*wheels, "--", *wanted]) + "\n"
        site = stamp.parent
        if stamp.is_file() and stamp.read_text(encoding="utf-8") == key:
            compile_site(site)  # a site installed before byte-code was written here
            return
        platforms = [a for tag in AARCH64_PLATFORMS for a in ("--platform", tag)]
        cmd = [_host_pip(), "install", "-q", "--no-index", "--find-links", str(wheel_dir), "--target", str(site)]
        cmd += [*_PIP_TARGET_ARGS, *_ABIS, *platforms, *wanted]
        with self._machine(self.timeout):  # no guest runs on a half-installed site
            shutil.rmtree(site, ignore_errors=True)
            site.mkdir(parents=True)
            run_tool(cmd, timeout, f"pip installing {', '.join(wanted)} from {wheel_dir} into {site}", InferenceError)
            compile_site(site)
            stamp.write_text(key, encoding="utf-8")

    def install_edge(self, repo: Path = REPO_ROOT) -> Path:
        """Copy the device package (``edge/`` and ``firmware_configs/`` only) to the guest's ``/opt/edge``.

        Skipped when the copy is already of the same files; done under the rootfs lock, so a guest that
        is running meanwhile never sees a half-copied package.

        Returns:
            The host path of the copy.

        Raises:
            InputError: ``repo`` lacks ``edge/`` or ``firmware_configs/``.
        """
        dest = self.rootfs / GUEST_EDGE.lstrip("/")
        parts = [Path(repo) / "edge", Path(repo) / "firmware_configs"]
        for part in parts:
            if not part.is_dir():
                raise InputError(f"{repo}: no {part.name}/ folder; expected an edge-deploy checkout")
        digest = _tree_digest(parts)
        stamp = dest / ".edge-deploy-source"
        with self._machine(self.timeout):
            if stamp.is_file() and stamp.read_text(encoding="utf-8") == digest:
                return dest
            shutil.rmtree(dest, ignore_errors=True)
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            for part in parts:
                shutil.copytree(part, dest / part.name, ignore=ignore)
            # Byte-code now (host and guest are both CPython 3.11): a guest compiling it on first import
            # would execute ~100 M more instructions in that run than in the next, and spoil the counts.
            compileall.compile_dir(dest / "edge", quiet=1)
            stamp.write_text(digest, encoding="utf-8")
        return dest

    def command(
        self, script: Path, args: Sequence[str] = (), plugin: Path | None = None, plugin_log: Path | None = None
    ) -> list[str]:
        """The host command line that runs ``python3 script args`` in the guest.

        With ``plugin`` (a TCG plugin .so) it runs the dynamic ``qemu-aarch64`` under ``setarch x86_64 -R``
        (no address randomisation, for repeatable counts), the plugin writing to ``plugin_log``.
        """
        if plugin is None:
            prefix = [_which("qemu-aarch64-static", "qemu-user-static")]
        else:
            qemu = _which("qemu-aarch64", "qemu-user")
            prefix = [_which("setarch", "util-linux"), "x86_64", "-R", qemu, "-plugin", str(plugin), "-d", "plugin"]
            prefix += ["-D", str(plugin_log)] if plugin_log else []
        # -0: the guest's argv[0] is its own /usr/bin/python3, so sys.prefix and sys.path are guest paths.
        guest = ["-cpu", self.cpu.value, "-L", str(self.rootfs), "-0", "/usr/bin/python3", str(self.python)]
        return [*prefix, *guest, "-s", str(script), *args]

    def program_command(
        self, program: Path, args: Sequence[str] = (), plugin: Path | None = None, plugin_log: Path | None = None
    ) -> list[str]:
        """The host command line that runs an aarch64 executable (e.g. a static llama-bench) in the guest.

        Same qemu, ``-cpu`` and plugin options as ``command``; no interpreter.
        """
        python = self.command(Path("-"), (), plugin, plugin_log)
        return [*python[: python.index("-0")], str(program), *args]

    def run_program(
        self,
        program: Path,
        args: Sequence[str] = (),
        timeout: float | None = None,
        plugin: Path | None = None,
        plugin_log: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run an aarch64 executable in the guest and wait for it (see ``run``; raises as it does)."""
        return self._run(self.program_command(Path(program), args, plugin, plugin_log), program, None, timeout, True)

    def run(
        self,
        script: Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = True,
        plugin: Path | None = None,
        plugin_log: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run a Python script in the guest and wait for it.

        Args:
            script: the script, as a host path (the guest sees host paths that the rootfs lacks).
            args: its arguments.
            env: extra environment for the guest (added to PATH, HOME, LANG, PYTHONPATH, PYTHONHASHSEED=0).
            timeout: seconds; default the guest's.
            check: raise when the script fails.
            plugin: a TCG plugin to load (see ``command``); ``plugin_log``: where its output goes.

        Returns:
            The CompletedProcess (text stdout/stderr).

        Raises:
            InferenceError: the script timed out, or (``check``) exited non-zero or died of a signal; the
                message names the script, the CPU and the end of its stderr.
        """
        return self._run(self.command(Path(script), args, plugin, plugin_log), script, env, timeout, check)

    def _run(
        self,
        cmd: list[str],
        script: Path,
        env: Mapping[str, str] | None,
        timeout: float | None,
        check: bool,
    ) -> subprocess.CompletedProcess:
        timeout = self.timeout if timeout is None else timeout
        guest_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{GUEST_SITE}:{GUEST_EDGE}",
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            **(env or {}),
        }
        what = f"{Path(script).name} on emulated {self.cpu.value}"
        with self._machine(timeout):
            return run_tool(cmd, timeout, what, InferenceError, env=guest_env, check=check)

    def _machine(self, timeout: float) -> _MachineLock:
        return _MachineLock(self, timeout)

    def write_system_files(self) -> None:
        """Write the Pi-like /proc/cpuinfo and /sys cpu files of this CPU model into the rootfs."""
        proc = self.rootfs / "proc"
        if proc.is_symlink():  # debootstrap --foreign links it to the host's /proc
            proc.unlink()
        proc.mkdir(exist_ok=True)
        (proc / "cpuinfo").write_text(cpuinfo_text(self.cpu, self.cores), encoding="ascii")
        cpus = self.rootfs / "sys" / "devices" / "system" / "cpu"
        cpus.mkdir(parents=True, exist_ok=True)
        span = "0" if self.cores == 1 else f"0-{self.cores - 1}"
        for name in ("possible", "present", "online"):
            (cpus / name).write_text(span + "\n", encoding="ascii")
        # Empty site dirs, so that qemu's fallback to host paths never shows the guest the host's packages.
        for site in ("usr/local/lib/python3.11/dist-packages", "usr/lib/python3/dist-packages"):
            (self.rootfs / site).mkdir(parents=True, exist_ok=True)


class _MachineLock:
    """Holds the rootfs for one run: its system files describe one CPU model at a time."""

    def __init__(self, guest: ArmGuest, timeout: float) -> None:
        self.guest = guest
        self.timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> _MachineLock:
        path = self.guest.rootfs / ".edge-deploy-lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise InferenceError(
                        f"{path}: another guest held the rootfs for more than {self.timeout:.0f} s"
                    ) from None
                time.sleep(0.05)
        self._fd = fd
        self.guest.write_system_files()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            # flock is not fair: pause so that a guest waiting in another process (polling every 50 ms)
            # gets its turn before this process's next run takes the lock again.
            time.sleep(0.25)


def _tree_digest(folders: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                h.update(str(path.relative_to(folder.parent)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest() + "\n"


def _which(program: str, package: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise MissingDependencyError(
            f"{program} not found; install the Debian package: apt-get install -y {package} "
            "(scripts/arm/rootfs.sh does it when run as root)"
        )
    return found


def prepare_guest(
    cpu: str | CpuModel,
    rootfs: Path | None = None,
    wheel_dir: Path | None = None,
    progress: ProgressFn = silent,
) -> ArmGuest:
    """A ready guest: rootfs built, device wheels installed, the repo's ``edge`` package copied in.

    Args:
        cpu: qemu core name (``"cortex-a72"`` for a Pi 4, ``"cortex-a76"`` for a Pi 5).
        rootfs: rootfs folder; default ``.cache/arm/rootfs``.
        wheel_dir: aarch64 wheels (e.g. a bundle's ``wheels/``); default: downloaded into
            ``.cache/arm/wheels``.
        progress: called with a line per stage.

    Raises:
        InferenceError: the rootfs build or a pip step failed; MissingDependencyError: no qemu.
    """
    progress("arm64 rootfs (scripts/arm/rootfs.sh, cached)")
    guest = ArmGuest(build_rootfs(rootfs), cpu)
    if wheel_dir is None:
        progress("aarch64 wheels of the device extra (cached in .cache/arm/wheels)")
        wheel_dir = download_wheels(DEFAULT_CACHE / "wheels")
    with timed(progress, f"installing the wheels of {wheel_dir} into the guest's {GUEST_SITE}", "arm: install wheels"):
        guest.install_wheels(wheel_dir)
        guest.install_edge()
    return guest
