"""A gallery of known people: name -> descriptors, enrolment from folders, matching, and a versioned file.

The file is a NumPy ``.npz`` (no pickles) holding ``schema_version`` (int), ``names`` (unicode [P]),
``owner`` (int64 [N], index into names) and ``descriptors`` (float32 [N, D]; D is the embedder's descriptor
size: dlib's 128, or a user's embedder's, ``edge.face.embed.FaceEmbedder.descriptor_size``).
"""

from __future__ import annotations

import io
import math
import tokenize
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import numpy as np
from numpy.typing import ArrayLike

from edge.errors import EdgeDeployError, InputError
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.imageio import DEFAULT_MAX_PIXELS, IMAGE_SUFFIXES, load_image  # enroll_folder skips other suffixes

GALLERY_SCHEMA_VERSION = 1
DESCRIPTOR_SIZE = 128
#: Longest descriptor a gallery takes (a user's embedder; dlib's is 128).
MAX_DESCRIPTOR_SIZE = 4096
_KEYS = ("schema_version", "names", "owner", "descriptors")
#: Most descriptors a gallery file may hold (51 MB of float32), and most bytes all its arrays may take.
MAX_DESCRIPTORS = 100_000
MAX_GALLERY_BYTES = 64 << 20
#: The dtype kinds each key may have ('i'/'u' integers, 'f' real floats, 'U' text): no objects, no complex.
_KINDS = {"schema_version": "iu", "names": "U", "owner": "iu", "descriptors": "f"}


def _npy_header(path: Path, key: str, fh: IO[bytes], size: int) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Read one member's .npy header and check it against the key's rules and the member's real size."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    try:
        version = np.lib.format.read_magic(fh)
        if version not in readers:
            raise ValueError(f"format version {version}; expected 1.0 or 2.0")
        shape, fortran, dtype = readers[version](fh)
    except (ValueError, SyntaxError, tokenize.TokenError) as exc:  # numpy tokenizes old-format headers
        raise InputError(f"{path}: key '{key}' is not a NumPy array ({exc})") from None
    if dtype.kind not in _KINDS[key] or dtype.hasobject:
        raise InputError(f"{path}: key '{key}' has dtype {dtype}; expected {_KIND_TEXT[_KINDS[key]]}")
    declared = math.prod(shape) * dtype.itemsize
    if declared != size - fh.tell() or declared > MAX_GALLERY_BYTES:
        raise InputError(
            f"{path}: key '{key}' declares {shape} {dtype} ({declared} bytes) in a member of {size} bytes; "
            f"expected a consistent array of at most {MAX_GALLERY_BYTES} bytes"
        )
    return shape, fortran, dtype


_KIND_TEXT = {"iu": "integers", "U": "unicode text", "f": "real floating point (float32)"}


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The four arrays of a gallery file, each member checked (name, size, header) before it is read."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            names = [i.filename.removesuffix(".npy") for i in infos]
            unknown = sorted(set(names) - set(_KEYS)) or ([n for n in names if names.count(n) > 1][:1])
            if unknown or len(infos) > len(_KEYS):
                raise InputError(f"{path}: member {unknown[0]!r} is not part of a gallery; it holds {', '.join(_KEYS)}")
            if sum(i.file_size for i in infos) > MAX_GALLERY_BYTES + 4096 * len(infos):
                raise InputError(
                    f"{path}: members unpack to {sum(i.file_size for i in infos)} bytes; expected at most "
                    f"{MAX_GALLERY_BYTES} (a gallery of up to {MAX_DESCRIPTORS} descriptors)"
                )
            data = {}
            for info, key in zip(infos, names, strict=True):
                with zf.open(info) as fh:
                    shape, fortran, dtype = _npy_header(path, key, fh, info.file_size)
                    raw = fh.read(info.file_size)
                flat = np.frombuffer(raw, dtype=dtype, count=math.prod(shape))
                data[key] = flat.reshape(shape, order="F" if fortran else "C")
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise InputError(f"{path}: not a gallery file (expected NumPy .npz: {exc})") from None
    return data


class _Analyzer(Protocol):
    def analyze(self, rgb: np.ndarray) -> list: ...


@dataclass(frozen=True)
class Match:
    """Result of a gallery look-up: the nearest person's name, or None when nobody is within threshold."""

    name: str | None
    distance: float


@dataclass
class EnrollmentReport:
    """What ``enroll_folder`` did: descriptors added per person, and files skipped with the reason."""

    enrolled: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DESCRIPTOR_SIZE:
        raise InputError(f"gallery: descriptor size {size!r}; expected a whole number in 1..{MAX_DESCRIPTOR_SIZE}")
    return size


def _check_descriptors(values: ArrayLike, what: str, size: int = DESCRIPTOR_SIZE) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != size:
        raise InputError(f"{what}: descriptors of shape {np.shape(values)}; expected ({size},) or (N, {size})")
    if arr.shape[0] == 0:
        raise InputError(f"{what}: no descriptors; expected at least one of shape ({size},)")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{what}: descriptors contain NaN or infinity")
    return arr


class Gallery:
    """Known people and their face descriptors (several per person are kept; the nearest one counts).

    Args:
        descriptor_size: the length of every descriptor (the embedder's: dlib's 128 by default).
    """

    def __init__(self, descriptor_size: int = DESCRIPTOR_SIZE) -> None:
        self.descriptor_size = _check_size(descriptor_size)
        self._people: dict[str, np.ndarray] = {}
        # every descriptor in one array (enrolment order) and its owner's index in _names: match() is one
        # vectorised distance computation, not a Python loop over people (built on first match after an add)
        self._stacked: tuple[np.ndarray, np.ndarray, list[str]] | None = None

    @property
    def names(self) -> list[str]:
        """Enrolled names, sorted."""
        return sorted(self._people)

    def __len__(self) -> int:
        return len(self._people)

    def descriptors(self, name: str) -> np.ndarray:
        """float32 [k, D] of one person. Raises InputError for an unknown name."""
        if name not in self._people:
            raise InputError(f"gallery: no person named '{name}'; enrolled: {', '.join(self.names) or 'none'}")
        return self._people[name].copy()

    def add(self, name: str, descriptors: np.ndarray, what: str | None = None) -> None:
        """Add one descriptor [D] or several [N, D] to a person (created if new); D = ``descriptor_size``.

        Args:
            name: the person.
            descriptors: float [D] or [N, D], N >= 1.
            what: how to name the source in error messages (default: the person).

        Raises:
            InputError: for an empty name or descriptors of the wrong shape.
        """
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"gallery: person name {name!r}; expected a non-empty string")
        arr = _check_descriptors(descriptors, what or f"gallery person '{name}'", self.descriptor_size)
        old = self._people.get(name, np.zeros((0, self.descriptor_size), np.float32))
        self._people[name] = np.concatenate([old, arr])
        self._stacked = None

    def match(self, descriptor: np.ndarray, threshold: float = DLIB_SAME_PERSON_THRESHOLD) -> Match:
        """The nearest enrolled person, if within ``threshold`` (Euclidean, ``<=`` as face_recognition).

        Args:
            descriptor: float [D].
            threshold: largest distance still counted as the same person.

        Returns:
            Match(name, distance); name is None when the nearest person is farther than the threshold
            or the gallery is empty (distance is then ``inf``).

        Raises:
            InputError: if the descriptor is not [D].
        """
        query = _check_descriptors(descriptor, "gallery.match", self.descriptor_size)
        if query.shape[0] != 1:
            raise InputError(
                f"gallery.match: got {query.shape[0]} descriptors; expected one of shape ({self.descriptor_size},)"
            )
        if not self._people:
            return Match(None, math.inf)
        if self._stacked is None:
            names = list(self._people)
            self._stacked = (*self._flat(names), names)
        stored, owners, names = self._stacked
        dists = np.linalg.norm(stored - query, axis=1)
        nearest = int(np.argmin(dists))  # the first of equal distances, in enrolment order, as the loop was
        best = float(dists[nearest])
        return Match(names[owners[nearest]] if best <= threshold else None, best)

    def enroll_folder(
        self, folder: str | Path, pipeline: _Analyzer, max_pixels: int = DEFAULT_MAX_PIXELS
    ) -> EnrollmentReport:
        """Enrol every person of ``folder``: one sub-folder per person, named after them, holding photos.

        Each photo must show the person; when it shows several faces the largest is taken. Photos with
        no face, unreadable files and files of other types are skipped and listed in the report.

        Args:
            folder: the gallery folder.
            pipeline: anything with ``analyze(rgb) -> list[Face]``, e.g. FacePipeline.
            max_pixels: photos declaring more pixels are skipped without being decoded.

        Returns:
            EnrollmentReport with descriptors added per person and skipped files with reasons.

        Raises:
            InputError: if the folder is missing, has no sub-folder, or no photo yielded a face.
        """
        root = Path(folder)
        if not root.is_dir():
            raise InputError(f"{root}: not a folder; expected one sub-folder of photos per person")
        people = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not people:
            raise InputError(f"{root}: no sub-folders; expected one sub-folder of photos per person")
        report = EnrollmentReport()
        for person in people:
            for path in sorted(p for p in person.iterdir() if p.is_file() and not p.name.startswith(".")):
                reason = self._enroll_photo(person.name, path, pipeline, max_pixels)
                if reason is None:
                    report.enrolled[person.name] = report.enrolled.get(person.name, 0) + 1
                else:
                    report.skipped.append((str(path), reason))
        if not report.enrolled:
            raise InputError(f"{root}: no face found in any photo ({len(report.skipped)} files skipped)")
        return report

    def _enroll_photo(self, name: str, path: Path, pipeline: _Analyzer, max_pixels: int) -> str | None:
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            return f"not an image suffix ({', '.join(IMAGE_SUFFIXES)})"
        try:
            rgb = load_image(path, max_pixels)
            # A tight face crop (a common gallery photo) has the face touching the frame, where BlazeFace finds
            # nothing: look again with a plain border (the evaluation set pads its Tom Hanks crop the same way).
            faces = pipeline.analyze(rgb) or pipeline.analyze(with_border(rgb))
        except EdgeDeployError as exc:
            return str(exc)
        if not faces:
            return "no face found (also with a border around the photo)"

        def area(face) -> float:
            x1, y1, x2, y2 = face.detection.box
            return (x2 - x1) * (y2 - y1)

        self.add(name, max(faces, key=area).descriptor)
        return None

    def _flat(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every descriptor of ``names``, person after person in that order, float32 [N, D], and for each the
        index of its owner in ``names`` (int64 [N]): the file's layout, and what match() searches."""
        if not names:
            return np.zeros((0, self.descriptor_size), np.float32), np.zeros(0, np.int64)
        owner = np.concatenate([np.full(len(self._people[n]), i, np.int64) for i, n in enumerate(names)])
        return np.concatenate([self._people[n] for n in names]), owner

    def save(self, path: str | Path) -> Path:
        """Write the gallery to ``path`` (.npz content, whatever the suffix). Returns the path.

        Raises:
            InputError: if the file can't be written (a folder, a missing parent folder, a full disk).
        """
        path = Path(path)
        names = self.names
        desc, owner = self._flat(names)
        buf = io.BytesIO()
        np.savez(
            buf,
            schema_version=np.array(GALLERY_SCHEMA_VERSION, np.int64),
            names=np.array(names, dtype=np.str_),
            owner=owner.astype(np.int64),
            descriptors=desc.astype(np.float32),
        )
        try:
            path.write_bytes(buf.getvalue())
        except OSError as exc:
            raise InputError(f"{path}: cannot write the gallery ({exc.strerror})") from None
        return path

    @classmethod
    def load(cls, path: str | Path, descriptor_size: int = DESCRIPTOR_SIZE) -> Gallery:
        """Read a gallery written by ``save``, of descriptors of ``descriptor_size`` (the embedder's).

        Raises:
            InputError: naming the file (and key) when it is missing, not a gallery, of another schema
                version, or a key is missing or of the wrong shape.
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such gallery file")
        data = _read_npz(path)
        return cls._from_arrays(path, data, _check_size(descriptor_size))

    @classmethod
    def _from_arrays(cls, path: Path, data: dict[str, np.ndarray], size: int = DESCRIPTOR_SIZE) -> Gallery:
        for key in _KEYS:
            if key not in data:
                raise InputError(f"{path}: key '{key}' missing; a gallery file holds {', '.join(_KEYS)}")
        version = data["schema_version"]
        if version.shape != () or not np.issubdtype(version.dtype, np.integer):
            raise InputError(f"{path}: key 'schema_version' has shape {version.shape}; expected an integer")
        if int(version) != GALLERY_SCHEMA_VERSION:
            raise InputError(f"{path}: schema_version = {int(version)}; expected {GALLERY_SCHEMA_VERSION}")
        names, owner, desc = data["names"], data["owner"], data["descriptors"]
        if names.ndim != 1 or names.dtype.kind != "U":
            raise InputError(f"{path}: key 'names' is {names.dtype} {names.shape}; expected 1-D strings")
        if desc.ndim == 2 and desc.shape[0] > MAX_DESCRIPTORS:
            raise InputError(f"{path}: {desc.shape[0]} descriptors; expected at most {MAX_DESCRIPTORS}")
        if desc.ndim != 2 or desc.shape[1] != size:
            raise InputError(f"{path}: key 'descriptors' has shape {desc.shape}; expected (N, {size})")
        if owner.shape != (desc.shape[0],) or owner.dtype.kind not in "iu":
            raise InputError(f"{path}: key 'owner' has shape {owner.shape}; expected ({desc.shape[0]},) integers")
        if owner.size and (owner.min() < 0 or owner.max() >= len(names)):
            raise InputError(f"{path}: key 'owner' has indices outside 0..{len(names) - 1}")
        gallery = cls(size)
        for i, name in enumerate(names.tolist()):
            gallery.add(name, desc[owner == i], what=f"{path}: person '{name}'")
        return gallery


def with_border(rgb: np.ndarray) -> np.ndarray:
    """``rgb`` centred on a plain grey canvas half its shorter side larger on every side (a copy)."""
    pad = min(rgb.shape[:2]) // 2
    return np.pad(rgb, ((pad, pad), (pad, pad), (0, 0)), constant_values=128)
