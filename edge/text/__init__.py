"""Small language model on the device: onnxruntime + tokenizers + numpy only (no torch, no jinja2)."""

from edge.text.chat import ChatFormat
from edge.text.decoder import OnnxDecoder
from edge.text.generator import GenerationResult, TextGenerator, TextStream
from edge.text.sampling import Sampler, SamplingConfig
from edge.text.spec import GenerationSpec, load_spec

__all__ = [
    "ChatFormat",
    "GenerationResult",
    "GenerationSpec",
    "OnnxDecoder",
    "Sampler",
    "SamplingConfig",
    "TextGenerator",
    "TextStream",
    "load_spec",
]
