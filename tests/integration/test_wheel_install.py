"""The edge-deploy wheel a bundle ships: installed (non-editable) it finds its target profiles."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_wheel_install_loads_every_profile_outside_the_repository(tmp_path: Path) -> None:
    from converters.package.wheelhouse import own_wheel

    wheel, _ = own_wheel(tmp_path / "cache")  # the wheel a bundle ships, built from a clean copy of the sources
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    names = set(zipfile.ZipFile(wheel).namelist())
    profiles = sorted(p.name for p in (REPO / "firmware_configs").glob("*.toml"))
    data = "edge_deploy-0.1.0.data/data/share/edge-deploy/firmware_configs/"
    assert {data + p for p in profiles} <= names
    assert {"edge/daemon/edge-deploy.service", "edge/daemon/edge-deploy.example.toml"} <= names
    assert {"edge/bundle_files/install.sh", "edge/bundle_files/README.device.md"} <= names

    # The new venv's own pip: the test's pip would first uninstall the editable edge-deploy it runs from.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), *pip[1:], "install", "--no-deps", "--no-index", str(wheel)], check=True
    )
    probe = (
        "from edge.profiles import DEFAULT_PROFILE_DIR, available_targets, load_all; "
        "print(DEFAULT_PROFILE_DIR); print(','.join(p.name for p in load_all()))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout.split()
    assert out[0] == str(venv / "share" / "edge-deploy" / "firmware_configs")
    assert out[1] == ",".join(p.removesuffix(".toml") for p in profiles)
