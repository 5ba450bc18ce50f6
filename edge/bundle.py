"""Bundles on the device: check one against its ``manifest.json`` (and its signature), extract one safely.

A bundle is a folder (or a ``.tar.gz`` of one folder) written by ``edge-deploy build``. Its
``manifest.json`` lists every other file with its size and sha256; :func:`verify_bundle` refuses a bundle
with a missing, changed, truncated or stray file, naming each one::

    dist/rpi4-face: 1 file does not match manifest.json:
      models/face/face_embedder.onnx: sha256 0a1b2c3d4e5f… != manifest's 9f8e7d6c5b4a…

:func:`extract_bundle` refuses absolute paths, ``..``, links and device files before writing anything, then
extracts with tarfile's ``filter="data"``. Standard library only, except for checking a signature
(``edge.signing``, which imports ``cryptography`` when it is used): install.sh imports this module from the
bundle's wheel with the system's Python.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from edge.errors import BundleError
from edge.payload import PayloadError, parse_json
from edge.signing import SIGNATURE_FILE, PublicKey, check_signature

MANIFEST_FILE = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1
BUNDLE_FORMAT = "edge-deploy-bundle"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_BLOCK = 1 << 20
#: Bounds of what verify/extract read: a real bundle has a few hundred files and a few hundred MB.
MAX_MANIFEST_BYTES = 16 << 20
MAX_MEMBERS = 10_000
MAX_BUNDLE_BYTES = 4 << 30
#: At most this many mismatches are listed one by one; the rest are counted.
MAX_LISTED_PROBLEMS = 20
#: Top-level manifest keys and their JSON types (checked on every read).
_MANIFEST_KEYS: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "format": str,
    "target": str,
    "tool_version": str,
    "profile": dict,
    "models": list,
    "wheelhouse": (dict, type(None)),
    "files": list,
}


@dataclass(frozen=True)
class FileEntry:
    """One file of a bundle as its manifest lists it (path relative to the bundle folder, POSIX style)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class VerifyReport:
    """A bundle that passed :func:`verify_bundle`."""

    bundle: str
    target: str
    tool_version: str
    files: int
    total_bytes: int
    models: tuple[str, ...]
    manifest: dict[str, Any]
    signed_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "ok": True,
            "target": self.target,
            "tool_version": self.tool_version,
            "files": self.files,
            "total_bytes": self.total_bytes,
            "models": list(self.models),
            "signed_by": self.signed_by,
        }


def read_bundle_file(path: Path | str, max_bytes: int) -> bytes:
    """Read a file of a bundle by its name, never through a link: at most ``max_bytes`` of a regular file.

    The files a device trusts by name (the manifest, its signature, ``models.json``, the golden set) must be the
    files themselves: a symbolic link could make the reader take any file on the device for them.

    Raises:
        BundleError: ``path`` is a symbolic link or not a regular file (naming it).
        OSError: it can't be opened (``FileNotFoundError`` when it is missing).
    """
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO is refused below instead of hanging the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BundleError(f"{path}: a symbolic link; expected the file itself (bundle files are not read "
                              "through links)") from None  # fmt: skip
        raise
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BundleError(f"{path}: not a regular file; expected the file itself")
        return fh.read(max_bytes)


def _short(digest: str) -> str:
    return digest[:12] + "…"


def _relpath_problem(path: str) -> str | None:
    """Why ``path`` cannot be a bundle member path, or None when it can."""
    if not path or path.startswith("/") or "\\" in path or re.match(r"^[A-Za-z]:", path):
        return "expected a relative POSIX path"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "expected a path without empty, '.' or '..' parts"
    return None


def _check_file_entry(where: str, i: int, raw: Any) -> FileEntry:
    if not isinstance(raw, dict):
        raise BundleError(f"{where}: files[{i}] = {raw!r}; expected an object with path, size, sha256")
    for key, kind in (("path", str), ("size", int), ("sha256", str)):
        if key not in raw:
            raise BundleError(f"{where}: files[{i}] lacks key '{key}'; expected path, size, sha256")
        if not isinstance(raw[key], kind) or isinstance(raw[key], bool):
            raise BundleError(f"{where}: files[{i}].{key} = {raw[key]!r}; expected a {kind.__name__}")
    problem = _relpath_problem(raw["path"])
    if problem:
        raise BundleError(f"{where}: files[{i}].path = {raw['path']!r}; {problem}")
    if raw["path"] in (MANIFEST_FILE, SIGNATURE_FILE):
        raise BundleError(
            f"{where}: files[{i}].path = {raw['path']!r}; the manifest does not list itself or its signature"
        )
    if raw["size"] < 0:
        raise BundleError(f"{where}: files[{i}].size = {raw['size']}; expected 0 or more bytes")
    if not _SHA256.match(raw["sha256"]):
        raise BundleError(f"{where}: files[{i}].sha256 = {raw['sha256']!r}; expected 64 lowercase hex digits")
    return FileEntry(raw["path"], raw["size"], raw["sha256"])


def parse_manifest(data: bytes, where: str) -> tuple[dict[str, Any], dict[str, FileEntry]]:
    """Check a manifest's schema.

    Args:
        data: the bytes of ``manifest.json``.
        where: how to name the file in errors.

    Returns:
        The manifest as a dict, and its file entries by path.

    Raises:
        BundleError: not JSON, wrong schema version or format, a missing or mistyped key, a bad file entry.
    """
    try:
        manifest = parse_json(data, where, MAX_MANIFEST_BYTES)
    except PayloadError as exc:
        raise BundleError(str(exc)) from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{where}: a JSON {type(manifest).__name__}; expected an object")
    if manifest.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise BundleError(
            f"{where}: schema_version = {manifest.get('schema_version')!r}; expected {MANIFEST_SCHEMA_VERSION}"
        )
    for key, kind in _MANIFEST_KEYS.items():
        if key not in manifest:
            raise BundleError(f"{where}: missing key '{key}'")
        if not isinstance(manifest[key], kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise BundleError(f"{where}: {key} has type {type(manifest[key]).__name__}; expected {names}")
    if manifest["format"] != BUNDLE_FORMAT:
        raise BundleError(f"{where}: format = {manifest['format']!r}; expected {BUNDLE_FORMAT!r}")
    entries: dict[str, FileEntry] = {}
    for i, raw in enumerate(manifest["files"]):
        entry = _check_file_entry(where, i, raw)
        if entry.path in entries:
            raise BundleError(f"{where}: files[{i}].path = {entry.path!r} is listed twice")
        entries[entry.path] = entry
    return manifest, entries


def _hash_stream(stream: IO[bytes]) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    for block in iter(lambda: stream.read(_BLOCK), b""):
        h.update(block)
        size += len(block)
    return size, h.hexdigest()


def _compare(expected: dict[str, FileEntry], found: dict[str, tuple[int, str | None]], links: list[str]) -> list[str]:
    """Every mismatch between the manifest and the files found, sorted by path."""
    problems: dict[str, str] = {}
    for path, entry in expected.items():
        if path not in found:
            problems[path] = f"{path}: listed in {MANIFEST_FILE} but missing"
            continue
        size, digest = found[path]
        if size != entry.size:
            problems[path] = f"{path}: size {size} bytes != manifest's {entry.size}"
        elif digest != entry.sha256:
            problems[path] = f"{path}: sha256 {_short(digest or '')} != manifest's {_short(entry.sha256)}"
    for path in found:
        if path not in expected and path not in (MANIFEST_FILE, SIGNATURE_FILE):
            problems[path] = f"{path}: not listed in {MANIFEST_FILE} (stray file)"
    for path in links:
        problems[path] = f"{path}: a link or special file; bundles hold regular files only"
    return [problems[p] for p in sorted(problems)]


def _scan_folder(root: Path, expected: dict[str, FileEntry]) -> tuple[dict[str, tuple[int, str | None]], list[str]]:
    """Sizes (and, where the size matches, sha256) of the regular files under ``root``; links apart."""
    found: dict[str, tuple[int, str | None]] = {}
    links: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in list(dirnames):
            if (base / name).is_symlink():
                links.append((base / name).relative_to(root).as_posix())
                dirnames.remove(name)
        for name in filenames:
            path = base / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if not stat.S_ISREG(mode):
                links.append(rel)
                continue
            size = path.lstat().st_size
            entry = expected.get(rel)
            digest = None
            if entry is not None and entry.size == size:
                with path.open("rb") as f:
                    digest = _hash_stream(f)[1]
            found[rel] = (size, digest)
    return found, links


def _raise_problems(where: str, problems: list[str]) -> None:
    if problems:
        noun = "file does not" if len(problems) == 1 else "files do not"
        listed = problems[:MAX_LISTED_PROBLEMS]
        if len(problems) > len(listed):
            listed.append(f"… and {len(problems) - len(listed)} more")
        raise BundleError(f"{where}: {len(problems)} {noun} match {MANIFEST_FILE}:\n  " + "\n  ".join(listed))


def _signature_of(root: Path) -> bytes | None:
    path = root / SIGNATURE_FILE
    try:
        return read_bundle_file(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read ({exc.strerror})") from None


def _verify_folder(root: Path, trusted: tuple[PublicKey, ...]) -> VerifyReport:
    manifest_path = root / MANIFEST_FILE
    try:
        data = read_bundle_file(manifest_path, MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        hint = "expected a bundle folder written by 'edge-deploy build'"
        raise BundleError(f"{root}: no {MANIFEST_FILE}; {hint}") from None
    except OSError as exc:
        raise BundleError(f"{manifest_path}: cannot read ({exc.strerror})") from None
    # The signature first: until it verifies, nothing the manifest says is believed.
    signed_by = check_signature(str(root), data, _signature_of(root), trusted) if trusted else None
    manifest, expected = parse_manifest(data, str(manifest_path))
    found, links = _scan_folder(root, expected)
    _raise_problems(str(root), _compare(expected, found, links))
    return _report(str(root), manifest, expected, signed_by)


def _report(
    where: str, manifest: dict[str, Any], expected: dict[str, FileEntry], signed_by: str | None = None
) -> VerifyReport:
    kinds = tuple(str(m.get("kind", "?")) for m in manifest["models"] if isinstance(m, dict))
    return VerifyReport(
        bundle=where,
        target=manifest["target"],
        tool_version=manifest["tool_version"],
        files=len(expected),
        total_bytes=sum(e.size for e in expected.values()),
        models=kinds,
        manifest=manifest,
        signed_by=signed_by,
    )


def check_member(where: str, member: tarfile.TarInfo) -> None:
    """Refuse a tar member that could write outside the extraction folder or is not a plain file/folder.

    Raises:
        BundleError: an absolute path, a ``..`` part, a symbolic or hard link, a device or FIFO.
    """
    name = member.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise BundleError(f"{where}: member {name!r} has an absolute path; refused")
    if ".." in PurePosixPath(name).parts:
        raise BundleError(f"{where}: member {name!r} has a '..' part (leaves the extraction folder); refused")
    if member.issym():
        raise BundleError(f"{where}: member {name!r} is a symbolic link (to {member.linkname!r}); refused")
    if member.islnk():
        raise BundleError(f"{where}: member {name!r} is a hard link (to {member.linkname!r}); refused")
    if not (member.isfile() or member.isdir()):
        if member.ischr() or member.isblk():
            kind = "a device file"
        elif member.isfifo():
            kind = "a FIFO"
        else:
            kind = "not a regular file or folder"
        raise BundleError(f"{where}: member {name!r} is {kind}; refused")


def member_path(member: tarfile.TarInfo) -> str:
    """A member's path with ``./`` and empty parts removed (``./b/x`` and ``b/x`` are the same file)."""
    return "/".join(PurePosixPath(member.name).parts)


def _members(where: str, tar: tarfile.TarFile) -> tuple[str, list[tarfile.TarInfo]]:
    """All members, each checked, within ``MAX_MEMBERS`` and ``MAX_BUNDLE_BYTES``; and the single top
    folder they all live in (a ``.`` entry, as ``tar -C dir .`` writes, is ignored)."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        check_member(where, member)
        members.append(member)
        total += member.size
        if len(members) > MAX_MEMBERS or total > MAX_BUNDLE_BYTES:
            raise BundleError(
                f"{where}: more than {MAX_MEMBERS} members or {MAX_BUNDLE_BYTES} bytes; expected a bundle "
                "(a few hundred files); refused before reading further"
            )
    members = [m for m in members if member_path(m)]
    tops = {member_path(m).split("/")[0] for m in members}
    if len(tops) != 1:
        found = ", ".join(sorted(tops)[:10]) or "nothing"
        raise BundleError(f"{where}: expected one top folder (the bundle); found {found}")
    top = tops.pop()
    for member in members:
        if member_path(member) == top and not member.isdir():
            raise BundleError(f"{where}: member {member.name!r} is a file; expected the bundle's top folder")
    return top, members


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path}: not a readable tar archive ({exc})") from exc


def _verify_tar(path: Path, trusted: tuple[PublicKey, ...]) -> VerifyReport:
    where = str(path)
    with _open_tar(path) as tar:
        try:
            top, members = _members(where, tar)
            files = {member_path(m)[len(top) + 1 :]: m for m in members if m.isfile()}
            if MANIFEST_FILE not in files:
                raise BundleError(
                    f"{where}: no {top}/{MANIFEST_FILE}; expected a bundle written by 'edge-deploy build'"
                )
            data = tar.extractfile(files[MANIFEST_FILE]).read()  # type: ignore[union-attr]
            signed_by = None
            if trusted:
                sig_member = files.get(SIGNATURE_FILE)
                sig = tar.extractfile(sig_member).read() if sig_member else None  # type: ignore[union-attr]
                signed_by = check_signature(where, data, sig, trusted)
            manifest, expected = parse_manifest(data, f"{where}:{top}/{MANIFEST_FILE}")
            found: dict[str, tuple[int, str | None]] = {}
            for rel, member in files.items():
                entry = expected.get(rel)
                if entry is not None and entry.size == member.size:
                    found[rel] = _hash_stream(tar.extractfile(member))  # type: ignore[arg-type]
                else:
                    found[rel] = (member.size, None)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise BundleError(f"{where}: the archive is damaged or truncated ({exc})") from exc
    _raise_problems(where, _compare(expected, found, []))
    return _report(where, manifest, expected, signed_by)


def verify_bundle(path: Path | str, trusted: tuple[PublicKey, ...] = ()) -> VerifyReport:
    """Check a bundle folder or ``.tar.gz`` against its manifest (and its signature, given trusted keys).

    Every file the manifest lists must be present with its size and sha256; no other file may be present
    (``manifest.json`` and ``manifest.sig`` aside); no links or special files. With ``trusted`` keys the
    bundle must carry a ``manifest.sig`` by one of them that verifies over ``manifest.json`` (checked first).

    Args:
        path: a bundle folder, or a tar archive (any compression tarfile reads) holding one bundle folder.
        trusted: the public keys to require a signature by (``edge.signing.load_trusted_keys``); none: the
            signature is not checked.

    Returns:
        What was checked.

    Raises:
        BundleError: listing every file that is missing, changed, truncated or stray, or naming the manifest
            key or tar member at fault; an unsigned bundle, one signed by a key not in ``trusted``, or a
            signature that does not verify (naming the bundle and the key id).
    """
    path = Path(path)
    if path.is_dir():
        return _verify_folder(path, tuple(trusted))
    if path.is_file():
        return _verify_tar(path, tuple(trusted))
    raise BundleError(f"{path}: not found; expected a bundle folder or its .tar.gz")


def extract_bundle(archive: Path | str, dest: Path | str, trusted: tuple[PublicKey, ...] = ()) -> Path:
    """Extract a bundle archive into ``dest``, after verifying it against its manifest (nothing is written
    for an archive with an unsafe member, a stray or changed file, or too many members).

    Args:
        archive: the ``.tar.gz`` written by ``edge-deploy build``.
        dest: the folder to extract into (created); the bundle lands in ``dest/<top folder>``.
        trusted: keys to require a signature by (see :func:`verify_bundle`).

    Returns:
        The extracted bundle folder (its archive verified; :func:`verify_bundle` re-checks the folder).

    Raises:
        BundleError: an unreadable archive, a member with an absolute path, ``..``, a link or a device, more
            than one top folder, too many members or bytes, any file that does not match the manifest
            (checked before anything is written), or a bundle folder that already exists in ``dest``.
    """
    archive, dest = Path(archive), Path(dest)
    where = str(archive)
    # every member checked and hashed against the manifest (and the signature) before anything is written
    _verify_tar(archive, tuple(trusted))
    with _open_tar(archive) as tar:
        try:
            top, members = _members(where, tar)
            target = dest / top
            if target.exists():
                raise BundleError(f"{target}: already exists; remove it or extract elsewhere")
            dest.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise BundleError(f"{where}: refused by tarfile's data filter ({exc})") from exc
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise BundleError(f"{where}: cannot extract into {dest} ({exc})") from exc
    return target
