"""Text generation on the device: tokenizer + ONNX decoder with KV cache + sampler.

Usage::

    with TextGenerator(Path("bundle/slm"), threads=4) as gen:
        stream = gen.stream("What is the capital of France?", SamplingConfig(max_new_tokens=32))
        for piece in stream:
            print(piece, end="", flush=True)
        print(stream.result.decode_tokens_per_s)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge.errors import InferenceError, InputError, require
from edge.text.decoder import OnnxDecoder
from edge.text.sampling import Sampler, SamplingConfig
from edge.text.spec import GenerationSpec, load_spec

#: A SentencePiece byte-fallback token (``<0xE2>``): one raw byte of text outside the vocabulary.
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def unsettled_ids(tokenizer: Any) -> frozenset[int]:
    """Ids whose text may still change once later tokens arrive, in a SentencePiece tokenizer.

    Its ``ByteFallback`` decoder turns a whole run of consecutive byte tokens into UTF-8 if the run is valid,
    and into one U+FFFD per byte if not: ``<0x4E>`` alone reads "N", followed by ``<0xD6>`` both read as
    U+FFFD. A run is settled only once a token of another kind follows (special tokens, skipped when
    decoding, do not end a run). Byte-level BPE (gpt2) decodes byte by byte and needs none of this.

    Args:
        tokenizer: a ``tokenizers.Tokenizer``.

    Returns:
        The ids of byte tokens and special tokens.
    """
    ids = {index for token, index in tokenizer.get_vocab().items() if BYTE_TOKEN.fullmatch(token)}
    ids |= {index for index, added in tokenizer.get_added_tokens_decoder().items() if added.special}
    return frozenset(ids)


def settled_count(ids: Sequence[int], unsettled: frozenset[int]) -> int:
    """How many leading ``ids`` decode to text that no later token changes (all but a trailing unsettled run)."""
    end = len(ids)
    while end and ids[end - 1] in unsettled:
        end -= 1
    return end


class Decoder(Protocol):
    """What the generator drives (``OnnxDecoder``, ``LiteRtDecoder``): the cache is the decoder's own type,
    handed back to it untouched."""

    def empty_cache(self) -> Any:
        """A zero-length cache for one sequence."""
        ...

    def forward(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, position_ids: np.ndarray, cache: Any
    ) -> tuple[np.ndarray, Any]:
        """One step: logits ``[batch, seq, vocab]`` and the updated cache."""
        ...


Prompt = str | Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class GenerationResult:
    """One finished generation.

    Attributes:
        text: the generated text (stop token excluded).
        token_ids: the generated token ids (stop token excluded).
        prompt_tokens: length of the prompt in tokens.
        stop_reason: ``"stop_token"``, ``"max_tokens"`` or ``"context"``.
        time_to_first_token_s: prefill plus choosing the first token.
        decode_tokens_per_s: decode steps (one token each, after the first) per second; 0 if none ran.
    """

    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    stop_reason: str
    time_to_first_token_s: float
    decode_tokens_per_s: float


class TextStream:
    """An iterator of text pieces; :attr:`result` is available once it is exhausted."""

    def __init__(self, pieces: Iterator[str], holder: list[GenerationResult]) -> None:
        self._pieces = pieces
        self._holder = holder

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    @property
    def result(self) -> GenerationResult:
        """The finished generation.

        Raises:
            InferenceError: the stream has not been read to its end.
        """
        if not self._holder:
            raise InferenceError("the text stream has not finished; read it to the end before asking its result")
        return self._holder[0]


class TextGenerator:
    """Generate text with a converted small language model folder.

    Args:
        model_dir: a folder with ``generation.json``, the ONNX model and ``tokenizer.json``.
        threads: onnxruntime (or LiteRT) intra-op threads.
        max_context: cap the context below the model's own (memory on small boards); None for the model's.
        model_file: run this model instead of the one generation.json names (its ``model_file``, or its
            ``litert_file`` when its ``runtime`` is "litert"; same tokenizer and chat template); a ``.tflite``
            file runs on LiteRT, anything else on onnxruntime.

    Raises:
        InputError: the folder, generation.json or tokenizer.json is missing or invalid.
        InferenceError: the runtime cannot load the model.
        MissingDependencyError: a ``.tflite`` model without ai-edge-litert installed.
    """

    def __init__(
        self, model_dir: str | Path, threads: int = 1, max_context: int | None = None, model_file: Path | None = None
    ) -> None:
        tokenizers = require("tokenizers", "device", "tokenizing text for the language model")
        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise InputError(f"{self.model_dir}: no such folder; expected a converted language model folder")
        self.spec: GenerationSpec = load_spec(self.model_dir)
        tok_path = self.model_dir / self.spec.tokenizer_file
        if not tok_path.is_file():
            raise InputError(f"{tok_path}: missing; expected the tokenizer next to {self.spec.model_file}")
        try:
            self.tokenizer = tokenizers.Tokenizer.from_file(str(tok_path))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise InputError(f"{tok_path}: not a valid tokenizer.json ({exc})") from exc
        spm = self.spec.tokenizer_model == "llama"
        self._unsettled = unsettled_ids(self.tokenizer) if spm else frozenset()
        added = self.tokenizer.get_added_tokens_decoder().values()
        self._reserved = tuple(sorted({token.content for token in added if token.special}))
        self.context = self.spec.context_length
        if max_context is not None:
            if max_context < 2:
                raise InputError(f"max_context = {max_context}; expected at least 2")
            self.context = min(self.context, max_context)
        default = self.spec.litert_file if self.spec.runtime == "litert" else self.spec.model_file
        path = Path(model_file) if model_file is not None else self.model_dir / str(default)
        self.decoder: Decoder | None
        if path.suffix == ".tflite":
            from edge.text.litert_decoder import LiteRtDecoder

            self.decoder = LiteRtDecoder(path, threads)
            self.context = min(self.context, self.decoder.context_length)  # its fixed KV buffer
        else:
            self.decoder = OnnxDecoder(path, threads)

    @property
    def host_caveat(self) -> str | None:
        """Why this CPU may answer differently from the target the model was gated for, or None
        (``host_caveat``)."""
        return host_caveat(self.model_dir, self.spec, isinstance(self.decoder, OnnxDecoder))

    def close(self) -> None:
        """Release the runtime session."""
        self.decoder = None

    def __enter__(self) -> TextGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prompt_text(self, prompt: Prompt, chat: bool = True) -> str:
        """The text the model sees: a string as a single user turn (or raw when ``chat`` is False),
        a list of messages through the chat template.

        Raises:
            InputError: an empty prompt or conversation, or a message holding one of the tokenizer's special
                tokens (``<|im_end|>``, a SentencePiece ``</s>``...), which would be read as structure.
        """
        if isinstance(prompt, str):
            if not prompt.strip():
                raise InputError("prompt is empty; expected some text")
            if not chat:
                return prompt
            return self.spec.chat_format.render([{"role": "user", "content": prompt}], reserved=self._reserved)
        if len(prompt) == 0:
            raise InputError("messages is empty; expected at least one message")
        return self.spec.chat_format.render(prompt, reserved=self._reserved)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens such as ``<|im_start|>`` are recognised)."""
        ids = self.tokenizer.encode(text).ids
        return [self.spec.bos_token_id, *ids] if self.spec.add_bos else ids

    def stream(self, prompt: Prompt, config: SamplingConfig | None = None, chat: bool = True) -> TextStream:
        """Start generating; iterate the returned stream for text pieces as they are made.

        Raises:
            InputError: empty or over-long prompt, bad sampling settings.
        """
        config = config or SamplingConfig()
        sampler = Sampler(config)
        ids = self.encode(self.prompt_text(prompt, chat))
        if len(ids) >= self.context:
            raise InputError(f"prompt is {len(ids)} tokens; expected fewer than the context of {self.context} tokens")
        holder: list[GenerationResult] = []
        return TextStream(self._run(ids, config, sampler, holder), holder)

    def generate(self, prompt: Prompt, config: SamplingConfig | None = None, chat: bool = True) -> GenerationResult:
        """Generate to the end and return the result (see :meth:`stream`)."""
        stream = self.stream(prompt, config, chat)
        for _ in stream:
            pass
        return stream.result

    def _run(
        self, ids: list[int], config: SamplingConfig, sampler: Sampler, holder: list[GenerationResult]
    ) -> Iterator[str]:
        if self.decoder is None:
            raise InferenceError(f"{self.model_dir}: the generator is closed")
        stops = set(self.spec.stop_token_ids) | set(config.stop_token_ids)
        start = time.perf_counter()
        logits, cache = self.decoder.forward(
            np.array([ids]), np.ones((1, len(ids)), np.int64), np.arange(len(ids))[None], self.decoder.empty_cache()
        )
        token = sampler(logits[0, -1])
        first = time.perf_counter()
        new: list[int] = []
        steps = 0
        emitted = ""
        reason = "max_tokens"
        while True:
            if token in stops:
                reason = "stop_token"
                break
            new.append(token)
            text = self.tokenizer.decode(new[: settled_count(new, self._unsettled)], skip_special_tokens=True)
            if not text.endswith("\ufffd"):  # hold back half a UTF-8 character
                piece, emitted = text[len(emitted) :], text
                if piece:
                    yield piece
            total = len(ids) + len(new)
            if len(new) >= config.max_new_tokens or total >= self.context:
                reason = "max_tokens" if len(new) >= config.max_new_tokens else "context"
                break
            logits, cache = self.decoder.forward(
                np.array([[token]]), np.ones((1, total), np.int64), np.array([[total - 1]]), cache
            )
            token = sampler(logits[0, -1])
            steps += 1
        end = time.perf_counter()
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        if len(text) > len(emitted):
            yield text[len(emitted) :]
        rate = steps / (end - first) if steps and end > first else 0.0
        holder.append(GenerationResult(text, tuple(new), len(ids), reason, first - start, rate))


def host_caveat(model_dir: Path, spec: GenerationSpec, on_onnxruntime: bool, kernels: Any = None) -> str | None:
    """A sentence for the user when this CPU computes the model's level-4 projections differently from the
    target it was gated for, else None.

    Said of a model whose ``MatMulNBits`` run at accuracy level 4 (generation.json ``int8_activation_matmuls``:
    the rpi4 and browser builds), run on onnxruntime on an x86 CPU without VNNI, where onnxruntime's
    int8-activation kernels gave other answers than the Pi's (docs/slm.md). ``kernels``: an
    ``edge.cpu.Int8Kernels`` (default: this CPU's).
    """
    from edge.cpu import int8_kernels

    kernels = kernels or int8_kernels()
    count = spec.int8_activation_matmuls
    if not count or not on_onnxruntime or kernels.kind not in ("x86-avx2", "x86-sse"):
        return None
    return (
        f"{model_dir}: {count} of this model's MatMulNBits run at accuracy level 4 (int8 activations), and on "
        f"this x86 CPU without VNNI ({kernels.describe()}) onnxruntime's kernels for them answer differently "
        "from the target the model was gated for (docs/slm.md: the rpi4 build answered the France prompt wrongly "
        "on an AVX2-only PC); convert it for --target x86_64-host to run it here"
    )
