"""Which board we run on (``/proc/device-tree/model``) and its SoC state (temperature, clock, throttling).

Everything here reads files that may be absent (a workstation, a container): absent or unreadable values
are None, never an error. Only an explicit override that names an unknown target is an error.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.profiles import DEFAULT_PROFILE_DIR, TargetProfile, detect_target, load_profile

DEVICE_TREE_MODEL = Path("/proc/device-tree/model")

#: Relative to the sysfs root: where the values live.
THERMAL_TEMP = Path("sys/class/thermal/thermal_zone0/temp")  # millidegrees Celsius
CPU_CLOCK = Path("sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")  # kHz
#: The Raspberry Pi firmware driver's throttling word (hex), on Pi kernels since 2018; the glob covers
#: the platform bus names of different SoCs (``soc``, ``scb``, ``soc@107c000000``).
THROTTLED_GLOB = "sys/devices/platform/*/*firmware/get_throttled"

#: Bits of the Pi firmware's throttling word (``vcgencmd get_throttled``), as documented by Raspberry Pi.
THROTTLE_BITS: dict[int, str] = {
    0: "under_voltage",
    1: "arm_frequency_capped",
    2: "throttled",
    3: "soft_temperature_limit",
    16: "under_voltage_occurred",
    17: "arm_frequency_capped_occurred",
    18: "throttled_occurred",
    19: "soft_temperature_limit_occurred",
}

VCGENCMD_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class BoardInfo:
    """The board as detected: its device-tree model string and the profile that claims it (or was forced)."""

    model: str | None
    profile: TargetProfile | None
    source: str  # "override", "device-tree" or "unknown"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "model": self.model,
            "profile": self.profile.name if self.profile else None,
            "source": self.source,
        }


@dataclass(frozen=True)
class ThrottleState:
    """The Pi firmware's throttling word, decoded."""

    raw: int
    flags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view: the word as hex and the names of its set bits."""
        return {"raw": hex(self.raw), "flags": list(self.flags)}


@dataclass(frozen=True)
class SocState:
    """SoC readings at one moment; each None where the board does not expose it."""

    temperature_c: float | None
    cpu_mhz: float | None
    throttled: ThrottleState | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (None -> null)."""
        return {
            "temperature_c": self.temperature_c,
            "cpu_mhz": self.cpu_mhz,
            "throttled": self.throttled.to_dict() if self.throttled else None,
        }


def read_device_tree_model(device_tree_model: Path = DEVICE_TREE_MODEL) -> str | None:
    """The board's model string (``Raspberry Pi 4 Model B Rev 1.4``), or None without a device tree."""
    try:
        raw = device_tree_model.read_bytes()
    except OSError:
        return None
    text = raw.rstrip(b"\x00\n").decode("utf-8", "replace").strip()
    return text or None


def detect_board(
    device_tree_model: Path = DEVICE_TREE_MODEL,
    override: str | None = None,
    profile_dir: Path = DEFAULT_PROFILE_DIR,
) -> BoardInfo:
    """Detect the board and its target profile.

    Args:
        device_tree_model: the device-tree model file (a different path in tests).
        override: a target name (``"rpi4"``) from a flag or config; wins over detection.
        profile_dir: where the profiles live.

    Returns:
        BoardInfo; ``profile`` is None when no profile claims the model and no override is given.

    Raises:
        ProfileError: if ``override`` names no known target.
    """
    model = read_device_tree_model(device_tree_model)
    if override is not None:
        return BoardInfo(model=model, profile=load_profile(override, profile_dir), source="override")
    profile = detect_target(device_tree_model, profile_dir) if model else None
    return BoardInfo(model=model, profile=profile, source="device-tree" if profile else "unknown")


def _read_number(path: Path) -> float | None:
    try:
        return float(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # sysfs files can be absent or fail with EIO/EAGAIN on some boards


def parse_throttled(text: str) -> ThrottleState | None:
    """Decode ``throttled=0x50005`` (vcgencmd) or ``50005`` (sysfs); None if it is not a hex word."""
    value = text.strip()
    if value.startswith("throttled="):
        value = value[len("throttled=") :]
    try:
        raw = int(value, 16)
    except ValueError:
        return None
    flags = tuple(name for bit, name in sorted(THROTTLE_BITS.items()) if raw >> bit & 1)
    return ThrottleState(raw=raw, flags=flags)


def _vcgencmd_throttled(vcgencmd: str | None) -> ThrottleState | None:
    exe = shutil.which(vcgencmd) if vcgencmd else None
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "get_throttled"], capture_output=True, text=True, timeout=VCGENCMD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_throttled(done.stdout) if done.returncode == 0 else None


def read_throttled(sysfs_root: Path = Path("/"), vcgencmd: str | None = "vcgencmd") -> ThrottleState | None:
    """The throttling word from the firmware's sysfs file, else from ``vcgencmd get_throttled``, else None."""
    for path in sorted(sysfs_root.glob(THROTTLED_GLOB)):
        try:
            state = parse_throttled(path.read_text(encoding="ascii"))
        except (OSError, UnicodeDecodeError):
            state = None
        if state is not None:
            return state
    return _vcgencmd_throttled(vcgencmd)


def read_soc_state(sysfs_root: Path = Path("/"), vcgencmd: str | None = "vcgencmd") -> SocState:
    """Read SoC temperature (C), CPU0 clock (MHz) and throttling flags; each None when absent.

    Args:
        sysfs_root: the filesystem root holding ``sys/`` (a fake tree in tests).
        vcgencmd: the vcgencmd program to ask for throttling when sysfs lacks it; None to never run it.
    """
    milli_c = _read_number(sysfs_root / THERMAL_TEMP)
    khz = _read_number(sysfs_root / CPU_CLOCK)
    return SocState(
        temperature_c=None if milli_c is None else milli_c / 1000.0,
        cpu_mhz=None if khz is None else khz / 1000.0,
        throttled=read_throttled(sysfs_root, vcgencmd),
    )
