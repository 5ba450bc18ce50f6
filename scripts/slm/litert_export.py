"""Convert an HF llama folder to a TFLite decoder with litert-torch's generative API (prefill + decode).

Runs **inside .venv-litert-torch** (see scripts/setup_litert_torch.sh), started by
``converters/slm/tflite.py`` as ``python scripts/slm/litert_export.py ARGS``; it imports only what that
venv has (litert_torch, torch, safetensors), never edge-deploy itself. The model is litert-torch's own
SmolLM2 re-authoring (``examples/smollm/smollm.py``: its attention with an external KV cache and its
rotary/mask layers) with every size read from our folder's ``config.json`` and checked, fed our
``model.safetensors`` (HF tensor names). On success the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

QUANTIZE_CHOICES = ("none", "dynamic_int8", "weight_only_int8")


def alias_tflite_schema() -> None:
    """Let litert-torch 0.10.0's generative converter import without TensorFlow.

    ``litert_torch/generative/layers/lora.py`` (imported by ``generative/utilities/converter.py``) does
    ``from tensorflow.lite.python import schema_py_generated`` at module level, although the package does
    not depend on TensorFlow and converts through ``litert_converter``. That module is the generated TFLite
    flatbuffer schema, shipped identically as ``ai_edge_litert.schema_py_generated``: we register it under the
    TensorFlow name (only LoRA code uses it; we convert no LoRA). Nothing else named ``tensorflow`` exists,
    so litert-torch's own ``import tensorflow`` probes still fail and it keeps its TensorFlow-free path.
    """
    import importlib.machinery
    import importlib.util
    import types

    import torch._dynamo  # noqa: F401  (its import-time find_spec scan must not see the alias)

    if importlib.util.find_spec("tensorflow") is not None:
        return
    from ai_edge_litert import schema_py_generated

    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so the submodule lookups below resolve through sys.modules
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        sys.modules[name] = module
    sys.modules["tensorflow.lite.python"].schema_py_generated = schema_py_generated
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema_py_generated


def model_config(hf_config: dict, kv_cache_max_len: int, where: str = "config.json"):
    """litert-torch's SmolLM2 config with every size taken from the HF ``config.json`` (at ``where``)."""
    from litert_torch.generative.examples.smollm import smollm

    config = smollm.get_model_config_v2()
    attn = config.block_config(0).attn_config
    heads = hf_config["num_attention_heads"]
    attn.num_heads = heads
    attn.num_query_groups = hf_config.get("num_key_value_heads", heads)
    attn.head_dim = hf_config.get("head_dim", hf_config["hidden_size"] // heads)
    attn.rotary_base = int(hf_config.get("rope_theta", 10000.0))
    config.block_config(0).ff_config.intermediate_size = hf_config["intermediate_size"]
    for norm in (
        config.block_config(0).pre_attention_norm_config,
        config.block_config(0).post_attention_norm_config,
        config.final_norm_config,
    ):
        norm.epsilon = float(hf_config["rms_norm_eps"])
    config.vocab_size = hf_config["vocab_size"]
    config.num_layers = hf_config["num_hidden_layers"]
    config.embedding_dim = hf_config["hidden_size"]
    config.max_seq_len = max(kv_cache_max_len, 2048)
    config.lm_head_share_weight_with_embedding = bool(hf_config.get("tie_word_embeddings", False))
    if hf_config.get("hidden_act", "silu") != "silu":
        raise SystemExit(f"{where}: hidden_act = {hf_config.get('hidden_act')!r}; expected 'silu'")
    return config


def build(hf_dir: str, kv_cache_max_len: int):
    """The litert-torch model with the folder's weights (mask cache sized to the KV cache)."""
    from litert_torch.generative.examples.smollm import smollm
    from litert_torch.generative.utilities import model_builder

    where = os.path.join(hf_dir, "config.json")
    with open(where, encoding="utf-8") as f:
        hf_config = json.load(f)
    config = model_config(hf_config, kv_cache_max_len, where)
    names = model_builder.TENSOR_NAMES
    if not config.lm_head_share_weight_with_embedding:
        names = model_builder.TENSOR_NAMES_WITH_SEPARATE_LM_HEAD
    return model_builder.build_decoder_only_model(
        checkpoint_path=hf_dir,
        config=config,
        tensor_names=names,
        model_class=smollm.SmolLM2,
        mask_cache_size=kv_cache_max_len,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf-dir", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--name", default="model")
    parser.add_argument("--kv-cache-max-len", type=int, required=True)
    parser.add_argument("--prefill-len", type=int, action="append", required=True)
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none")
    args = parser.parse_args(argv)

    import torch

    alias_tflite_schema()
    from litert_torch.generative.utilities import converter, export_config

    torch.set_num_threads(max(1, int(os.environ.get("EDGE_LITERT_THREADS", "1"))))
    start = time.perf_counter()
    model = build(args.hf_dir, args.kv_cache_max_len)
    loaded = time.perf_counter()
    os.makedirs(args.out_dir, exist_ok=True)
    # Prefill returns logits too: the device needs the last prompt token's logits to pick the first token.
    config = export_config.ExportConfig(output_logits_on_prefill=True)
    path = converter.convert_to_tflite(
        model,
        output_path=args.out_dir,
        output_name_prefix=args.name,
        prefill_seq_len=args.prefill_len,
        kv_cache_max_len=args.kv_cache_max_len,
        quantize=args.quantize,
        export_config=config,
    )
    end = time.perf_counter()
    record = {
        "path": path,
        "quantize": args.quantize,
        "kv_cache_max_len": args.kv_cache_max_len,
        "prefill_lens": args.prefill_len,
        "load_s": round(loaded - start, 2),
        "convert_s": round(end - loaded, 2),
        "bytes": os.path.getsize(path),
        "torch": torch.__version__,
    }
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
