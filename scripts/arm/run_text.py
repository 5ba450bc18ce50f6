"""Generate greedily with the device text generator and write the tokens as JSON.

    python3 scripts/arm/run_text.py --model DIR --out result.json --max-new-tokens 8 [--prompt TEXT]

The same script runs on the host and in the emulated Pi (device code only: edge.text, numpy, onnxruntime,
tokenizers), so the greedy tokens can be compared, and run with N and N+k new tokens, the executed
instructions per generated token can be counted. With ``--mark``, ``generate`` is marked as region 1 for
the counting plugin (scripts/arm/insncount.c), region 0 being empty (the marks' own cost).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from marks import marker  # scripts/arm/marks.py: this script's folder is on sys.path

DEFAULT_PROMPT = "What is the capital of France?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Greedy generation with the device text generator; JSON out.")
    parser.add_argument("--model", type=Path, required=True, help="converted language model folder")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mark", action="store_true", help="mark generate() for the counting plugin")
    args = parser.parse_args(argv)
    mark = marker(args.mark)

    from edge.errors import EdgeDeployError
    from edge.text.generator import TextGenerator
    from edge.text.sampling import SamplingConfig

    try:
        with TextGenerator(args.model, threads=args.threads) as gen:
            config = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=0.0)
            mark(0, 0)
            mark(0, 1)
            mark(1, 0)
            result = gen.generate(args.prompt, config)
            mark(1, 1)
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    out = {
        "machine": platform.machine(),
        "prompt_tokens": result.prompt_tokens,
        "tokens": list(result.token_ids),
        "text": result.text,
        "stop_reason": result.stop_reason,
    }
    args.out.write_text(json.dumps(out) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
