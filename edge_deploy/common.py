"""What every subcommand module shares: help layout, output folders, JSON output and the one place errors are
printed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

#: The first line of every command's epilog; the lines after it are kept as written (commands to copy).
EXAMPLES_HEADING = "examples:"


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped to the terminal; an examples epilog kept line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples_epilog(examples: str) -> str:
    """``examples`` (lines ``# what it does`` and ``edge-deploy ...``, any indent) under the examples heading."""
    return f"{EXAMPLES_HEADING}\n{textwrap.indent(textwrap.dedent(examples).strip(chr(10)), '  ')}\n"


def command_parser(
    sub: argparse._SubParsersAction, name: str, *, summary: str, description: str, examples: str, **kwargs
) -> argparse.ArgumentParser:
    """Register subcommand ``name``: ``summary`` (one line, in its parent's list), ``description`` (a sentence
    or two) and ``examples`` (see :func:`examples_epilog`), which ``--help`` prints after the options."""
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples_epilog(examples),
        formatter_class=HelpFormatter,
        **kwargs,
    )


@contextmanager
def output_folder(folder: Path, given_as: str, create: bool = False) -> Iterator[Path]:
    """Run a command that writes into ``folder``; if it fails, remove the folders on the way to ``folder``
    (itself included) that did not exist before and are still empty, so bad input leaves no empty folder.

    Args:
        folder: the command's output folder (for an output file: the file's folder).
        given_as: the option that named it, for the error, e.g. ``"--output out/x"``.
        create: make it (and its parents) first, e.g. for a file written into it.

    Raises:
        InputError: ``create`` and the folder cannot be made (a parent is a file, no permission).
    """
    from edge.errors import InputError

    missing = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{given_as}: cannot create the folder {folder} ({exc.strerror or exc})") from None
    try:
        yield folder
    except BaseException:
        for made in missing:
            with suppress(OSError):
                made.rmdir()  # only when empty: whatever the command wrote stays
        raise


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
