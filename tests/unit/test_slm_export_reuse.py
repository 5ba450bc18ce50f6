"""A kept fp32 export is reused only when its stamp matches exactly (converters/slm/build.py)."""

from __future__ import annotations

import json

from converters.slm.build import EXPORT_STAMP, _export_is_current

KEY = {"gguf_sha256": "ab" * 32, "torch": "2.13.0", "export.py": "cd" * 32}


def _kept(tmp_path, stamp: object | None, model: bool = True):
    fp32 = tmp_path / "fp32" / "model.onnx"
    fp32.parent.mkdir()
    if model:
        fp32.write_bytes(b"onnx")
    if stamp is not None:
        (fp32.parent / EXPORT_STAMP).write_text(stamp if isinstance(stamp, str) else json.dumps(stamp))
    return fp32


def test_a_finished_export_with_the_same_key_is_reused(tmp_path) -> None:
    assert _export_is_current(_kept(tmp_path, KEY), KEY)


def test_a_changed_gguf_exporter_or_torch_is_exported_again(tmp_path) -> None:
    for field in KEY:
        (tmp_path / field).mkdir()
        assert not _export_is_current(_kept(tmp_path / field, {**KEY, field: "changed"}), KEY), field


def test_an_unfinished_or_unreadable_export_is_exported_again(tmp_path) -> None:
    for name, stamp, model in (("no-stamp", None, True), ("no-model", KEY, False), ("bad-json", "{", True)):
        (tmp_path / name).mkdir()
        assert not _export_is_current(_kept(tmp_path / name, stamp, model), KEY), name
