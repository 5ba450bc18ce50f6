"""edge.face.gallery: matching, the versioned file, and folder errors (enrolment itself: integration)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from edge.errors import InputError
from edge.face.gallery import GALLERY_SCHEMA_VERSION, Gallery, Match


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=128)
    return (v / np.linalg.norm(v) * 0.5).astype(np.float32)


def _gallery() -> Gallery:
    g = Gallery()
    g.add("alice", np.stack([_unit(1), _unit(2)]))
    g.add("bob", _unit(3))
    return g


def test_match_takes_the_nearest_descriptor_of_the_nearest_person():
    g = _gallery()
    q = _unit(2) + 0.01
    m = g.match(q)
    assert m.name == "alice"
    assert m.distance == pytest.approx(float(np.linalg.norm(_unit(2) - q)), rel=1e-6)


def test_match_is_the_nearest_over_every_descriptor_and_sees_later_additions():
    rng = np.random.default_rng(7)
    g, people = Gallery(), {}
    for i in range(30):  # 1 to 4 descriptors a person
        people[f"p{i}"] = (rng.normal(size=(1 + i % 4, 128)) * 0.1).astype(np.float32)
        g.add(f"p{i}", people[f"p{i}"])
    for q in (rng.normal(size=(20, 128)) * 0.1).astype(np.float32):
        dist = {n: float(np.min(np.linalg.norm(d - q, axis=1))) for n, d in people.items()}
        nearest = min(dist, key=lambda n: dist[n])
        assert g.match(q, threshold=10.0) == Match(nearest, dist[nearest])
    g.add("p3", q)  # a later addition (to an existing person) is matched at once
    assert g.match(q) == Match("p3", 0.0)
    g.add("zed", q + 1.0)
    assert g.match(q + 1.0) == Match("zed", 0.0)


def test_threshold_is_inclusive_as_face_recognition():
    g = Gallery()
    base = np.zeros(128, np.float32)
    g.add("carol", base)
    at = base.copy()
    at[0] = 0.5  # exactly representable: distance 0.5
    assert g.match(at, threshold=0.5) == Match("carol", 0.5)
    assert g.match(at, threshold=0.4999) == Match(None, 0.5)


def test_unknown_and_empty():
    assert _gallery().match(-_unit(1)).name is None
    m = Gallery().match(_unit(1))
    assert m.name is None and math.isinf(m.distance)


def test_add_and_match_reject_bad_shapes():
    g = Gallery()
    with pytest.raises(InputError) as err:
        g.add("dave", np.zeros(64))
    assert str(err.value) == "gallery person 'dave': descriptors of shape (64,); expected (128,) or (N, 128)"
    with pytest.raises(InputError) as err:
        g.add("", np.zeros(128))
    assert str(err.value) == "gallery: person name ''; expected a non-empty string"
    with pytest.raises(InputError) as err:
        g.add("erin", np.zeros((0, 128)))
    assert str(err.value) == "gallery person 'erin': no descriptors; expected at least one of shape (128,)"
    with pytest.raises(InputError) as err:
        _gallery().match(np.zeros((2, 128)))
    assert str(err.value) == "gallery.match: got 2 descriptors; expected one of shape (128,)"
    with pytest.raises(InputError) as err:
        _gallery().descriptors("zed")
    assert str(err.value) == "gallery: no person named 'zed'; enrolled: alice, bob"


def test_save_load_round_trip_is_exact(tmp_path):
    g = _gallery()
    path = g.save(tmp_path / "people.gallery")  # the suffix is the caller's: no .npz appended
    assert path.is_file() and path.name == "people.gallery"
    back = Gallery.load(path)
    assert back.names == ["alice", "bob"]
    assert np.array_equal(back.descriptors("alice"), g.descriptors("alice"))
    assert back.match(_unit(3)) == Match("bob", 0.0)


def _write(path, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return path


def _valid_arrays() -> dict:
    return {
        "schema_version": np.array(GALLERY_SCHEMA_VERSION),
        "names": np.array(["alice"]),
        "owner": np.zeros(2, np.int64),
        "descriptors": np.zeros((2, 128), np.float32),
    }


def test_missing_key(tmp_path):
    arrays = _valid_arrays()
    del arrays["owner"]
    path = _write(tmp_path / "g.npz", **arrays)
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert (
        str(err.value) == f"{path}: key 'owner' missing; a gallery file holds schema_version, names, owner, descriptors"
    )


def test_wrong_descriptor_shape(tmp_path):
    path = _write(tmp_path / "g.npz", **(_valid_arrays() | {"descriptors": np.zeros((2, 64), np.float32)}))
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value) == f"{path}: key 'descriptors' has shape (2, 64); expected (N, 128)"


def test_owner_shape_and_range(tmp_path):
    path = _write(tmp_path / "g.npz", **(_valid_arrays() | {"owner": np.zeros(3, np.int64)}))
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value) == f"{path}: key 'owner' has shape (3,); expected (2,) integers"
    path = _write(tmp_path / "h.npz", **(_valid_arrays() | {"owner": np.array([0, 5])}))
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value) == f"{path}: key 'owner' has indices outside 0..0"


def test_person_without_descriptors(tmp_path):
    path = _write(tmp_path / "g.npz", **(_valid_arrays() | {"names": np.array(["alice", "bob"])}))
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value) == f"{path}: person 'bob': no descriptors; expected at least one of shape (128,)"


def test_other_schema_version(tmp_path):
    path = _write(tmp_path / "g.npz", **(_valid_arrays() | {"schema_version": np.array(99)}))
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value) == f"{path}: schema_version = 99; expected {GALLERY_SCHEMA_VERSION}"


def test_not_a_gallery_file(tmp_path):
    path = tmp_path / "g.npz"
    path.write_text("names,descriptors\n")
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value).startswith(f"{path}: not a gallery file (expected NumPy .npz: ")
    with pytest.raises(InputError) as err:
        Gallery.load(tmp_path / "none.npz")
    assert str(err.value) == f"{tmp_path / 'none.npz'}: no such gallery file"


def test_enroll_folder_errors_before_any_model_runs(tmp_path):
    g = Gallery()
    with pytest.raises(InputError) as err:
        g.enroll_folder(tmp_path / "missing", pipeline=None)
    assert str(err.value) == f"{tmp_path / 'missing'}: not a folder; expected one sub-folder of photos per person"
    (tmp_path / "loose.jpg").write_bytes(b"x")
    with pytest.raises(InputError) as err:
        g.enroll_folder(tmp_path, pipeline=None)
    assert str(err.value) == f"{tmp_path}: no sub-folders; expected one sub-folder of photos per person"


def test_corrupt_zip(tmp_path):
    path = tmp_path / "g.npz"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(InputError) as err:
        Gallery.load(path)
    assert str(err.value).startswith(f"{path}: not a gallery file (expected NumPy .npz: ")


# --- issue 17, defect 6: members read before keys were checked; complex accepted; a 4.66 TiB header ---------


def _load_error(path) -> str:
    with pytest.raises(InputError) as info:
        Gallery.load(path)
    return str(info.value)


def test_an_unknown_member_is_refused_before_it_is_read(tmp_path) -> None:
    import resource

    from tests.hostile_files import zip_bomb_gallery

    path = zip_bomb_gallery(tmp_path / "bomb.npz", unpacked=64 << 20)  # the slow tier uses the 1.5 GiB one
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert (
        _load_error(path)
        == f"{path}: member 'bomb' is not part of a gallery; it holds schema_version, names, owner, descriptors"
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024  # KiB


@pytest.mark.slow
def test_the_outside_tests_zip_bomb_is_refused(tmp_path) -> None:
    """The exact file: 1.5 MB that unpacked to 1.6 GB RSS and was accepted."""
    import resource

    from tests.hostile_files import zip_bomb_gallery

    path = zip_bomb_gallery(tmp_path / "bomb.npz")
    assert path.stat().st_size < 2 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert "member 'bomb' is not part of a gallery" in _load_error(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024


def test_complex_descriptors_are_refused(tmp_path) -> None:
    from tests.hostile_files import gallery_arrays

    arrays = gallery_arrays()
    arrays["descriptors"] = arrays["descriptors"].astype(np.complex64) + 1j
    path = tmp_path / "c.npz"
    np.savez(path, **arrays)
    assert _load_error(path) == f"{path}: key 'descriptors' has dtype complex64; expected real floating point (float32)"


def test_a_header_claiming_terabytes_is_refused_from_the_header(tmp_path) -> None:
    from tests.hostile_files import huge_header_gallery

    path = huge_header_gallery(tmp_path / "h.npz")
    assert _load_error(path) == (
        f"{path}: key 'descriptors' declares (10000000000, 128) float32 (5120000000000 bytes) in a member of "
        "640 bytes; expected a consistent array of at most 67108864 bytes"
    )


def test_object_arrays_are_refused_without_unpickling(tmp_path) -> None:
    from tests.hostile_files import gallery_arrays

    arrays = gallery_arrays()
    arrays["names"] = np.array([object()], dtype=object)
    path = tmp_path / "o.npz"
    np.savez(path, **arrays)
    assert _load_error(path) == f"{path}: key 'names' has dtype object; expected unicode text"


def test_a_gallery_of_another_descriptor_size(tmp_path):
    """A user embedder's gallery (64-d here) is written and read at its size; a 128-d file is refused at 64."""
    g = Gallery(64)
    g.add("ann", np.ones(64))
    assert Gallery.load(g.save(tmp_path / "user.npz"), 64).descriptors("ann").shape == (1, 64)
    with pytest.raises(InputError) as err:
        g.add("bob", np.zeros(128))
    assert str(err.value) == "gallery person 'bob': descriptors of shape (128,); expected (64,) or (N, 64)"
    path = _gallery().save(tmp_path / "dlib.npz")
    with pytest.raises(InputError) as err:
        Gallery.load(path, 64)
    assert str(err.value) == f"{path}: key 'descriptors' has shape (3, 128); expected (N, 64)"
    with pytest.raises(InputError) as err:
        Gallery(0)
    assert str(err.value) == "gallery: descriptor size 0; expected a whole number in 1..4096"
