"""On-device semantic search in the browser site: a sentence encoder from a passed ``convert model`` folder.

The page (``web/search.js``) tokenises with the model's ``tokenizer.json`` (BERT WordPiece, as the
``tokenizers`` package does natively), runs the encoder with onnxruntime-web and ranks the site's sentences
by cosine. The encoder must take ``input_ids`` and ``attention_mask`` (int64, ``1 x SEQ``) and give one
sentence vector per row, pooled and L2-normalised in the graph (as ``benchmarks/byom_minilm.py`` exports
all-MiniLM-L6-v2); its folder must have passed the embedding gate for the browser profile.

``converters.package.web_search_default`` makes the search of the default build (``--model all``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from converters.package.user_model import read_model_folder
from edge.digest import file_sha256
from edge.errors import BundleError, InputError
from edge.profiles import TargetProfile

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
