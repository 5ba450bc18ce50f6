"""converters.face.build: what build_face_models runs, stage by stage."""

from __future__ import annotations

from pathlib import Path

from edge.profiles import load_profile


def test_build_face_models_adds_the_detector_once_per_folder(monkeypatch, tmp_path: Path) -> None:
    """At fp32 ``convert_face`` adds the detector to ``out_dir`` itself, so ``build_face_models`` must not add it
    again (a user's detector was converted twice); a quantized build's own folder gets it once more."""
    from converters.face import build

    added: list[Path] = []
    monkeypatch.setattr(build, "add_detector", lambda folder, *_: added.append(folder))
    for quant, expected in ((None, []), ("quantized", [tmp_path])):
        made = build.FaceModels(None, quant, [])  # type: ignore[arg-type]
        monkeypatch.setattr(build, "_build_face_models", lambda *_, made=made: made)
        added.clear()
        assert build.build_face_models(load_profile("rpi4"), tmp_path) is made
        assert added == expected
