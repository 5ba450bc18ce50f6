"""``face recognize``'s inputs and --save-annotated: refused with one line, before any model loads."""

from __future__ import annotations

from edge_deploy.cli import main


def test_an_empty_folder_and_a_pattern_matching_nothing_are_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["face", "recognize", "no-models", str(empty), "-g", "g.npz"]) == 3
    assert capsys.readouterr().err == (
        f"Error: {empty}: a folder with no image file; expected .jpg, .jpeg, .png, .bmp, .webp files in it\n"
    )
    assert main(["face", "recognize", "no-models", str(tmp_path / "*.jpg"), "-g", "g.npz"]) == 3
    assert capsys.readouterr().err == (
        f"Error: {tmp_path}/*.jpg: the pattern matches no image file (.jpg, .jpeg, .png, .bmp, .webp)\n"
    )


def test_an_annotated_folder_that_cannot_be_made_is_refused_and_nothing_is_left(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "annotated"
    argv = ["face", "recognize", "no-models", "a.jpg", "-g", "g.npz", "--save-annotated", str(target)]
    assert main(argv) == 3
    assert capsys.readouterr().err == (
        f"Error: --save-annotated {target}: cannot create the folder {target} (Not a directory)\n"
    )
    # made before the models are read: a missing models folder then fails, and the new empty folder goes again
    made = tmp_path / "new" / "annotated"
    assert (
        main(["face", "recognize", str(tmp_path / "no-models"), "a.jpg", "-g", "g.npz", "--save-annotated", str(made)])
        == 3
    )
    assert "no-models" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
