"""The browser site's semantic search: what ``build --search`` refuses before it copies anything.

The page itself (tokenizer and ranking equal to native, all-MiniLM-L6-v2) is tested in real Chromium in
tests/integration/test_browser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from converters.package.web_search import MAX_SENTENCES, SearchSite, copy_search, read_corpus
from edge.errors import BundleError, InputError
from edge.profiles import load_profile
from edge_deploy.cli import main


def test_the_corpus_is_one_sentence_a_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("  first sentence \n\n second one\n", encoding="utf-8")
    assert read_corpus(path) == ["first sentence", "second one"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\n \n", "no sentences; expected one sentence a line"),
        (b"\xff\xfe bad", "cannot read it as UTF-8 text"),
        (("x\n" * (MAX_SENTENCES + 1)).encode(), f"{MAX_SENTENCES + 1} sentences; expected at most {MAX_SENTENCES}"),
        (b"ok\n" + b"y" * 2001, "sentence 2 has 2001 characters; expected at most 2000"),
    ],
)
def test_a_bad_corpus_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "c.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=f"--search-corpus {path}: ") as err:
        read_corpus(path)
    assert message in str(err.value)


def _converted(tmp_path: Path, target: str, precision: str) -> Path:
    from testsupport.byom_models import write_embedder_files

    d = write_embedder_files(tmp_path)
    argv = ["convert", "model", str(d / "emb.onnx"), "--target", target, "--precision", precision,
            "--eval", str(d / "eval.npz"), "--calib", str(d / "calib.npz"), "--task", "embedding",
            "--input", "x=4x3x16x16", "-o", str(d / "net"), "--json"]  # fmt: skip
    assert main(argv) == 0
    return d / "net"


def _site(tmp_path: Path, folder: Path, tokenizer: dict | None = None) -> SearchSite:
    tok = tmp_path / "tokenizer.json"
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4}
    tok.write_text(json.dumps(tokenizer or {"model": {"type": "WordPiece", "vocab": vocab}}))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a sentence\n")
    return SearchSite(folder, tok, corpus)


def test_an_encoder_for_another_target_is_refused(tmp_path, capsys):
    folder = _converted(tmp_path, "rpi4", "int8")
    capsys.readouterr()
    with pytest.raises(BundleError, match="converted for rpi4 at int8; the site wants browser-wasm at fp32"):
        copy_search(load_profile("browser-wasm"), _site(tmp_path, folder), tmp_path / "out")


def test_an_encoder_without_token_inputs_is_refused(tmp_path, capsys):
    folder = _converted(tmp_path, "browser-wasm", "fp32")
    capsys.readouterr()
    with pytest.raises(InputError, match=r"inputs \{'x': \('float32', \[4, 3, 16, 16\]\)\}; expected input_ids"):
        copy_search(load_profile("browser-wasm"), _site(tmp_path, folder), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_passed_conversion_is_refused(tmp_path):
    with pytest.raises(InputError, match="no models.json; expected a passed 'edge-deploy convert model' folder"):
        copy_search(load_profile("browser-wasm"), _site(tmp_path, tmp_path), tmp_path / "out")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "rpi4", "--model", "face", "--search", "TMP"], "--search: the semantic search is a page of "
         "the browser site; --target rpi4 builds a device bundle (use --target browser-wasm)"),
        (["--target", "browser-wasm", "--model", "face", "--search-corpus", "c.txt"],
         "--search-corpus describes the page's search; it needs --search FOLDER"),
        (["--target", "browser-wasm", "--model", "face", "--search", "TMP"],
         "--search-tokenizer TMP/tokenizer.json: no such file; give the encoder's tokenizer.json"),
        (["--model", "TMP", "--search", "TMP"], "--search: for the browser site (--target browser-wasm --model face|slm|all)"),
    ],
)  # fmt: skip
def test_search_flags_are_checked_before_any_build(tmp_path, capsys, argv, message):
    argv = [a.replace("TMP", str(tmp_path)) for a in argv]
    assert main(["build", *argv, "-o", str(tmp_path / "dist"), "--no-wheels"]) == 3
    assert capsys.readouterr().err == "Error: " + message.replace("TMP", str(tmp_path)) + "\n"
    assert not (tmp_path / "dist").exists()
