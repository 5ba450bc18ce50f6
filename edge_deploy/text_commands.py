"""``edge-deploy generate``: stream an answer from a converted small LM (device side)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from edge_deploy.common import command_parser, print_json


def _cmd_generate(args: argparse.Namespace) -> int:
    from edge.runtime import default_threads
    from edge.text import SamplingConfig, TextGenerator

    config = SamplingConfig(
        max_new_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    model_file = Path(args.model_file) if args.model_file else None
    threads = args.threads or default_threads()
    with TextGenerator(Path(args.model_dir), threads=threads, model_file=model_file) as generator:
        caveat = generator.host_caveat
        if caveat:
            print(f"warning: {caveat}", file=sys.stderr)
        stream = generator.stream(args.prompt, config, chat=not args.raw)
        for piece in stream:
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
        result = stream.result
    if args.json:
        print_json(dataclasses.asdict(result))
    else:
        print()
        print(
            f"[{result.prompt_tokens} prompt tokens, {len(result.token_ids)} generated, stop: {result.stop_reason}; "
            f"time to first token {result.time_to_first_token_s * 1000:.0f} ms, "
            f"decode {result.decode_tokens_per_s:.1f} tokens/s]",
            file=sys.stderr,
        )
    return 0


def add_generate(sub: argparse._SubParsersAction) -> None:
    p = command_parser(
        sub,
        "generate",
        summary="stream an answer from a converted small language model",
        description="Stream an answer from a folder written by 'edge-deploy convert slm': the model's chat "
        "template, prefill, then token-by-token decode with a KV cache on onnxruntime (LiteRT for a .tflite "
        "--model-file). Reports time to first token and decode speed. Greedy unless --temperature is set.",
        examples="""
        edge-deploy generate out/slm "What is the capital of France?" --max-tokens 32
        # sampled, repeatable with the same seed
        edge-deploy generate out/slm "Write a haiku about the sea." --temperature 0.7 --top-p 0.9 --seed 1
        # a folder whose default is the LiteRT twin (convert slm --format tflite): run its ONNX model instead
        edge-deploy generate out/slm-litert "Hello" --model-file out/slm-litert/model.onnx
        """,
    )
    p.add_argument("model_dir", help="folder from: edge-deploy convert slm")
    p.add_argument("prompt", help="the user's message")
    p.add_argument("--max-tokens", type=int, default=128, help="most tokens to generate (128)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1.0)")
    p.add_argument("--seed", type=int, help="sampling seed, for repeatable samples")
    p.add_argument("--raw", action="store_true", help="no chat template: continue PROMPT as plain text")
    p.add_argument("--threads", type=int, help="intra-op threads (default: all CPUs)")
    p.add_argument("--json", action="store_true", help="print only the result as JSON")
    p.add_argument("--model-file", help="run this model (.onnx, or .tflite on LiteRT) with the folder's tokenizer")
    p.set_defaults(func=_cmd_generate)
