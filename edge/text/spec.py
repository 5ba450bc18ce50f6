"""``generation.json``: what the device needs besides the graph and the tokenizer.

Written by ``converters.slm.build``; read here. Keys are constants in this one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edge.errors import InputError
from edge.text.chat import ChatFormat

GENERATION_FILE = "generation.json"
SCHEMA_VERSION = 1
#: The runtimes a text model folder may name (``runtime``); files written before it existed run onnxruntime.
RUNTIMES = ("onnxruntime", "litert")
#: The GGUF tokenizer models (``tokenizer.ggml.model``) tokenizer.json may be rebuilt from: byte-level BPE
#: ("gpt2") or SentencePiece ("llama"); files written before the key existed are byte-level BPE.
TOKENIZER_MODELS = ("gpt2", "llama")


@dataclass(frozen=True)
class GenerationSpec:
    """The parsed ``generation.json`` of a text model folder."""

    model_file: str
    tokenizer_file: str
    bos_token_id: int
    eos_token_id: int
    stop_token_ids: tuple[int, ...]
    add_bos: bool
    context_length: int
    chat_format: ChatFormat
    chat_template: str
    precision: str
    #: What the device runs by default: "onnxruntime" (``model_file``) or "litert" (``litert_file``).
    runtime: str = "onnxruntime"
    #: The LiteRT twin of ``model_file`` (``convert slm --format tflite|both``), or None.
    litert_file: str | None = None
    #: The GGUF's ``tokenizer.ggml.model`` that ``tokenizer_file`` was rebuilt from (one of TOKENIZER_MODELS).
    tokenizer_model: str = "gpt2"
    #: How many ``MatMulNBits`` of ``model_file`` run at accuracy level 4 (int8 activations, computed by each
    #: CPU family's own kernels; docs/slm.md). 0 in files written before the key existed.
    int8_activation_matmuls: int = 0

    def to_dict(self) -> dict:
        """The JSON form (as written to ``generation.json``; ``runtime`` and ``litert_file`` only with a twin,
        ``tokenizer_model`` only when it is not byte-level BPE, ``int8_activation_matmuls`` only when not 0)."""
        extra: dict[str, str | int | None] = {}
        if self.litert_file:
            extra |= {"runtime": self.runtime, "litert_file": self.litert_file}
        if self.tokenizer_model != "gpt2":  # a byte-level BPE folder reads as it did before the key existed
            extra["tokenizer_model"] = self.tokenizer_model
        if self.int8_activation_matmuls:
            extra["int8_activation_matmuls"] = self.int8_activation_matmuls
        return {
            "schema_version": SCHEMA_VERSION,
            "model_file": self.model_file,
            "tokenizer_file": self.tokenizer_file,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "stop_token_ids": list(self.stop_token_ids),
            "add_bos": self.add_bos,
            "context_length": self.context_length,
            "chat_format": self.chat_format.to_dict(),
            "chat_template": self.chat_template,
            "precision": self.precision,
            **extra,
        }


_KIND_NAMES = {int: "a whole number", str: "a string", bool: "true or false"}


def _get(data: dict, where: str, key: str, kind: type):
    value = data.get(key)
    if kind is int and isinstance(value, bool):
        value = None
    if not isinstance(value, kind):
        raise InputError(f"{where}: {key} = {data.get(key)!r}; expected {_KIND_NAMES[kind]}")
    return value


def load_spec(model_dir: Path) -> GenerationSpec:
    """Read and check ``model_dir/generation.json``.

    Raises:
        InputError: the file is missing, not JSON, of another schema version, or a key is missing/wrong.
    """
    path = Path(model_dir) / GENERATION_FILE
    where = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{where}: missing; expected the generation settings next to the model") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{where}: cannot read as JSON ({exc})") from exc
    if data.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{where}: schema_version = {data.get('schema_version')!r}; expected {SCHEMA_VERSION}")
    stops = data.get("stop_token_ids")
    if not isinstance(stops, list) or not all(isinstance(s, int) for s in stops):
        raise InputError(f"{where}: stop_token_ids = {stops!r}; expected a list of token ids")
    chat = data.get("chat_format")
    if not isinstance(chat, dict):
        raise InputError(f"{where}: chat_format = {chat!r}; expected a table")
    runtime, litert_file = data.get("runtime", "onnxruntime"), data.get("litert_file")
    if runtime not in RUNTIMES:
        raise InputError(f"{where}: runtime = {runtime!r}; expected one of {', '.join(RUNTIMES)}")
    if litert_file is not None and not isinstance(litert_file, str):
        raise InputError(f"{where}: litert_file = {litert_file!r}; expected a file name or null")
    if runtime == "litert" and litert_file is None:
        raise InputError(f"{where}: runtime = 'litert' but no litert_file; expected the .tflite file's name")
    tokenizer_model = data.get("tokenizer_model", "gpt2")
    if tokenizer_model not in TOKENIZER_MODELS:
        raise InputError(
            f"{where}: tokenizer_model = {tokenizer_model!r}; expected one of {', '.join(TOKENIZER_MODELS)}"
        )
    level4 = data.get("int8_activation_matmuls", 0)
    if isinstance(level4, bool) or not isinstance(level4, int) or level4 < 0:
        raise InputError(f"{where}: int8_activation_matmuls = {level4!r}; expected a whole number >= 0")
    return GenerationSpec(
        model_file=_get(data, where, "model_file", str),
        tokenizer_file=_get(data, where, "tokenizer_file", str),
        bos_token_id=_get(data, where, "bos_token_id", int),
        eos_token_id=_get(data, where, "eos_token_id", int),
        stop_token_ids=tuple(stops),
        add_bos=_get(data, where, "add_bos", bool),
        context_length=_get(data, where, "context_length", int),
        chat_format=ChatFormat.from_dict(chat, where),
        chat_template=_get(data, where, "chat_template", str),
        precision=_get(data, where, "precision", str),
        runtime=runtime,
        litert_file=litert_file,
        tokenizer_model=tokenizer_model,
        int8_activation_matmuls=level4,
    )
