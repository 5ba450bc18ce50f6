"""What every subcommand module shares: JSON output and the one place errors are printed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence


def print_json(data: object) -> None:
    """Print ``data`` as indented JSON on stdout (every ``--json`` option uses this)."""
    print(json.dumps(data, indent=2))


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen subcommand and return its exit code; the only place errors are printed.

    ``EdgeDeployError`` prints ``Error: ...`` and returns its ``exit_code``; Ctrl-C returns 130; a reader
    that left a pipe (``edge-deploy targets | head``) is not an error.
    """
    from edge.errors import EdgeDeployError

    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
