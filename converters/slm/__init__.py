"""Host side of the small language model: GGUF -> HF folder -> ONNX with KV cache -> INT4/INT8 -> bundle dir.

Stages, one module each: ``gguf_source`` (read and dequantize the GGUF), ``export`` (torch -> ONNX),
``quantize`` (MatMulNBits INT4 / dynamic INT8), ``perplexity`` (the accuracy gate), ``build`` (the whole
chain for one target profile).
"""
