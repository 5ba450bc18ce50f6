"""edge.bundle: verification against manifest.json and safe extraction (no services, small files)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from edge.bundle import MANIFEST_FILE, check_member, extract_bundle, parse_manifest, verify_bundle
from edge.errors import BundleError

FILES = {
    "models/face/face_embedder.onnx": b"\x08\x07embedder-bytes" * 100,
    "models/face/models.json": b'{"schema_version": 1}\n',
    "wheels/requirements.txt": b"edge-deploy[device]==0.1.0\n",
    "install.sh": b"#!/bin/sh\necho hi\n",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(files: dict[str, bytes]) -> dict:
    return {
        "schema_version": 1,
        "format": "edge-deploy-bundle",
        "target": "rpi4",
        "tool_version": "0.1.0",
        "profile": {"file": "profile/rpi4.toml"},
        "models": [{"kind": "face", "precision": "fp32"}],
        "wheelhouse": None,
        "files": [{"path": p, "size": len(d), "sha256": _sha(d)} for p, d in sorted(files.items())],
    }


def make_bundle(root: Path, files: dict[str, bytes] = FILES) -> Path:
    root.mkdir(parents=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / MANIFEST_FILE).write_text(json.dumps(_manifest(files)), encoding="utf-8")
    return root


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "rpi4-face")


def _archive(folder: Path) -> Path:
    out = folder.with_name(folder.name + ".tar.gz")
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return out


# --- folders ----------------------------------------------------------------------------------------------


def test_intact_bundle_verifies(bundle: Path) -> None:
    report = verify_bundle(bundle)
    assert (report.target, report.files, report.models) == ("rpi4", 4, ("face",))
    assert report.total_bytes == sum(len(d) for d in FILES.values())
    assert report.to_dict()["ok"] is True


def test_flipped_byte_names_the_file_and_both_hashes(bundle: Path) -> None:
    path = bundle / "models/face/face_embedder.onnx"
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle)
    found, expected = _sha(bytes(data))[:12], _sha(FILES["models/face/face_embedder.onnx"])[:12]
    assert str(err.value) == (
        f"{bundle}: 1 file does not match manifest.json:\n"
        f"  models/face/face_embedder.onnx: sha256 {found}… != manifest's {expected}…"
    )


def test_truncated_file_reports_sizes(bundle: Path) -> None:
    path = bundle / "models/face/face_embedder.onnx"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle)
    assert str(err.value) == (
        f"{bundle}: 1 file does not match manifest.json:\n"
        "  models/face/face_embedder.onnx: size 1000 bytes != manifest's 1600"
    )


def test_stray_missing_and_changed_files_are_all_listed(bundle: Path) -> None:
    (bundle / "models/face/extra.onnx").write_bytes(b"stray")
    (bundle / "install.sh").unlink()
    (bundle / "wheels/requirements.txt").write_bytes(b"evil==6.6.6\n")
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle)
    assert str(err.value) == (
        f"{bundle}: 3 files do not match manifest.json:\n"
        "  install.sh: listed in manifest.json but missing\n"
        "  models/face/extra.onnx: not listed in manifest.json (stray file)\n"
        "  wheels/requirements.txt: size 12 bytes != manifest's 27"
    )


def test_symlink_in_folder_is_refused(bundle: Path) -> None:
    (bundle / "models/face/link.onnx").symlink_to(bundle / "models/face/face_embedder.onnx")
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle)
    assert str(err.value) == (
        f"{bundle}: 1 file does not match manifest.json:\n"
        "  models/face/link.onnx: a link or special file; bundles hold regular files only"
    )


def _trusted(tmp_path: Path):
    from edge.signing import generate_keypair, load_trusted_keys

    return load_trusted_keys([generate_keypair(tmp_path / "release.key").public_path])


@pytest.mark.parametrize("name", [MANIFEST_FILE, "manifest.sig"])
def test_a_manifest_or_signature_that_is_a_link_is_refused(bundle: Path, tmp_path: Path, name: str) -> None:
    """Issue 44: the files a bundle is trusted by are read by name, never through a link."""
    real = tmp_path / f"real-{name}"
    real.write_bytes((bundle / MANIFEST_FILE).read_bytes() if name == MANIFEST_FILE else b"sig")
    (bundle / name).unlink(missing_ok=True)
    (bundle / name).symlink_to(real)
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, _trusted(tmp_path) if name != MANIFEST_FILE else ())
    assert str(err.value) == (
        f"{bundle / name}: a symbolic link; expected the file itself (bundle files are not read through links)"
    )


def test_edited_manifest_hash_is_caught(bundle: Path) -> None:
    manifest = json.loads((bundle / MANIFEST_FILE).read_text())
    manifest["files"][2]["sha256"] = "0" * 64  # models/face/models.json
    (bundle / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle)
    found = _sha(FILES["models/face/models.json"])[:12]
    assert str(err.value) == (
        f"{bundle}: 1 file does not match manifest.json:\n"
        f"  models/face/models.json: sha256 {found}… != manifest's 000000000000…"
    )


def test_missing_manifest(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    with pytest.raises(BundleError) as err:
        verify_bundle(tmp_path / "b")
    assert (
        str(err.value) == f"{tmp_path / 'b'}: no manifest.json; expected a bundle folder written by 'edge-deploy build'"
    )


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as err:
        verify_bundle(tmp_path / "nope")
    assert str(err.value) == f"{tmp_path / 'nope'}: not found; expected a bundle folder or its .tar.gz"


# --- manifest schema --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(schema_version=2), "m.json: schema_version = 2; expected 1"),
        (lambda m: m.pop("files"), "m.json: missing key 'files'"),
        (lambda m: m.update(models={}), "m.json: models has type dict; expected list"),
        (lambda m: m.update(format="zip"), "m.json: format = 'zip'; expected 'edge-deploy-bundle'"),
        (
            lambda m: m["files"][0].update(path="../etc/passwd"),
            "m.json: files[0].path = '../etc/passwd'; expected a path without empty, '.' or '..' parts",
        ),
        (
            lambda m: m["files"][0].update(path="/etc/passwd"),
            "m.json: files[0].path = '/etc/passwd'; expected a relative POSIX path",
        ),
        (lambda m: m["files"][0].update(size="12"), "m.json: files[0].size = '12'; expected a int"),
        (
            lambda m: m["files"][0].update(sha256="abc"),
            "m.json: files[0].sha256 = 'abc'; expected 64 lowercase hex digits",
        ),
        (lambda m: m["files"][0].pop("sha256"), "m.json: files[0] lacks key 'sha256'; expected path, size, sha256"),
        (
            lambda m: m["files"].append(dict(m["files"][0])),
            "m.json: files[4].path = 'install.sh' is listed twice",
        ),
    ],
)
def test_manifest_schema_errors(edit, message: str) -> None:
    manifest = _manifest(FILES)
    edit(manifest)
    with pytest.raises(BundleError) as err:
        parse_manifest(json.dumps(manifest).encode(), "m.json")
    assert str(err.value) == message


def test_manifest_not_json() -> None:
    with pytest.raises(BundleError) as err:
        parse_manifest(b"{nope", "m.json")
    assert str(err.value).startswith("m.json: not valid JSON (")


# --- archives ---------------------------------------------------------------------------------------------


def test_archive_verifies_and_extracts(bundle: Path, tmp_path: Path) -> None:
    archive = _archive(bundle)
    assert verify_bundle(archive).files == 4
    out = extract_bundle(archive, tmp_path / "x")
    assert out == tmp_path / "x" / "rpi4-face"
    assert verify_bundle(out).files == 4


def test_tampered_archive_names_the_file(bundle: Path) -> None:
    (bundle / "models/face/models.json").write_bytes(b'{"schema_version": 2}\n')
    archive = _archive(bundle)
    with pytest.raises(BundleError) as err:
        verify_bundle(archive)
    found, expected = _sha(b'{"schema_version": 2}\n')[:12], _sha(FILES["models/face/models.json"])[:12]
    assert str(err.value) == (
        f"{archive}: 1 file does not match manifest.json:\n"
        f"  models/face/models.json: sha256 {found}… != manifest's {expected}…"
    )


def test_truncated_archive_is_refused(bundle: Path) -> None:
    archive = _archive(bundle)
    archive.write_bytes(archive.read_bytes()[:300])
    with pytest.raises(BundleError) as err:
        verify_bundle(archive)
    assert str(err.value).startswith(f"{archive}: ")
    assert "damaged or truncated" in str(err.value) or "not a readable tar archive" in str(err.value)


def _evil_tar(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        top = tarfile.TarInfo("rpi4-face")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = 3 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (_member("/etc/cron.d/evil"), "member '/etc/cron.d/evil' has an absolute path; refused"),
        (
            _member("rpi4-face/../../evil"),
            "member 'rpi4-face/../../evil' has a '..' part (leaves the extraction folder); refused",
        ),
        (
            _member("rpi4-face/models", tarfile.SYMTYPE, "/etc"),
            "member 'rpi4-face/models' is a symbolic link (to '/etc'); refused",
        ),
        (
            _member("rpi4-face/passwd", tarfile.LNKTYPE, "/etc/passwd"),
            "member 'rpi4-face/passwd' is a hard link (to '/etc/passwd'); refused",
        ),
        (_member("rpi4-face/dev", tarfile.CHRTYPE), "member 'rpi4-face/dev' is a device file; refused"),
        (
            _member("rpi4-face/fifo", tarfile.FIFOTYPE),
            "member 'rpi4-face/fifo' is a FIFO; refused",
        ),
    ],
)
def test_unsafe_members_are_refused_before_extraction(tmp_path: Path, member, message: str) -> None:
    archive = _evil_tar(tmp_path / "evil.tar.gz", member, b"abc")
    for action in (lambda: extract_bundle(archive, tmp_path / "out"), lambda: verify_bundle(archive)):
        with pytest.raises(BundleError) as err:
            action()
        assert str(err.value) == f"{archive}: {message}"
    assert not (tmp_path / "out").exists()


def test_two_top_folders_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "two.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("a/x", "b/y"):
            tar.addfile(_member(name), io.BytesIO(b"abc"))
    with pytest.raises(BundleError) as err:
        extract_bundle(archive, tmp_path / "out")
    assert str(err.value) == f"{archive}: expected one top folder (the bundle); found a, b"


def test_extract_refuses_an_existing_bundle_folder(bundle: Path, tmp_path: Path) -> None:
    archive = _archive(bundle)
    (tmp_path / "out" / "rpi4-face").mkdir(parents=True)
    with pytest.raises(BundleError) as err:
        extract_bundle(archive, tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'out' / 'rpi4-face'}: already exists; remove it or extract elsewhere"


def test_check_member_accepts_plain_files_and_folders() -> None:
    check_member("a.tar", _member("rpi4-face/models/x.onnx"))
    check_member("a.tar", _member("rpi4-face/models", tarfile.DIRTYPE))


# --- issue 17, defect 9: extract wrote before verifying; './' members refused; 11 MB of error text -----------


def test_extract_writes_nothing_for_an_archive_that_fails_verification(bundle: Path, tmp_path: Path) -> None:
    (bundle / "payload.bin").write_bytes(b"\0" * 4096)  # a stray file the manifest does not list
    archive = _archive(bundle)
    with pytest.raises(BundleError) as err:
        extract_bundle(archive, tmp_path / "out")
    assert str(err.value) == (
        f"{archive}: 1 file does not match manifest.json:\n  payload.bin: not listed in manifest.json (stray file)"
    )
    assert not (tmp_path / "out").exists()


def test_members_starting_with_dot_slash_verify_and_extract(bundle: Path, tmp_path: Path) -> None:
    archive = tmp_path / "dot.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:  # what `tar -czf x.tar.gz -C parent ./rpi4-face` writes
        tar.add(bundle, arcname="./rpi4-face")
    assert verify_bundle(archive).files == 4
    assert verify_bundle(extract_bundle(archive, tmp_path / "out")).files == 4


def _many_members(path: Path, count: int) -> Path:
    with tarfile.open(path, "w") as tar:
        for i in range(count):
            tar.addfile(_member(f"rpi4-face/f{i}"), io.BytesIO(b"abc"))
    return path


def test_too_many_members_are_refused_early(tmp_path: Path) -> None:
    from edge.bundle import MAX_MEMBERS

    archive = _many_members(tmp_path / "many.tar", MAX_MEMBERS + 1)
    for action in (lambda: verify_bundle(archive), lambda: extract_bundle(archive, tmp_path / "out")):
        with pytest.raises(BundleError) as err:
            action()
        assert str(err.value) == (
            f"{archive}: more than 10000 members or 4294967296 bytes; expected a bundle (a few hundred files); "
            "refused before reading further"
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_outside_tests_200k_entry_archive_gives_one_short_error(tmp_path: Path) -> None:
    archive = _many_members(tmp_path / "200k.tar", 200_000)
    with pytest.raises(BundleError) as err:
        verify_bundle(archive)
    assert len(str(err.value)) < 300


def test_a_long_list_of_mismatches_is_capped(tmp_path: Path) -> None:
    files = {f"f{i:04}": b"x" for i in range(1000)}
    root = make_bundle(tmp_path / "b", files)
    for i in range(1000):
        (root / f"f{i:04}").unlink()
    with pytest.raises(BundleError) as err:
        verify_bundle(root)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{root}: 1000 files do not match manifest.json:"
    assert len(lines) == 22 and lines[-1] == "  … and 980 more"
