"""What every subcommand module shares: help layout, output folders, JSON output and the one place errors are
printed."""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn

from edge.errors import MissingExtraError, UsageError, did_you_mean

#: The first line of every command's epilog; the lines after it are kept as written (commands to copy).
EXAMPLES_HEADING = "examples:"


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped to the terminal; an examples epilog kept line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


#: The third-party modules each pip extra brings (pyproject.toml), by import name. ``convert`` and ``fleet``
#: include ``device``; numpy is the base install's.
EXTRA_MODULES = {
    "device": ("onnxruntime", "ai_edge_litert", "cv2", "paho", "tokenizers", "cryptography", "msgspec"),
    "convert": (
        "onnx",
        "onnxscript",
        "torch",
        "gguf",
        "safetensors",
        "jinja2",
        "skimage",
        "face_recognition_models",
        "matplotlib",
        "tflite",
    ),
    "fleet": ("psycopg",),
}


#: What a command of an extra imports first, looked for before it starts: torch is imported deep inside the
#: converters, after output folders are made.
EXTRA_FIRST = {"convert": ("onnx", "torch")}


def check_extra(command: str, extra: str | None) -> None:
    """Look for the modules :data:`EXTRA_FIRST` lists for ``extra`` (found, not imported: torch takes seconds).

    Raises:
        MissingExtraError: one of them is not installed, naming the extra and its pip command.
    """
    import importlib.util

    if extra is None:
        return
    for module in EXTRA_FIRST.get(extra, ()):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(extra, module, command, f"No module named {module!r}")


def missing_extra(exc: ImportError, command: str, command_extra: str = "device") -> MissingExtraError | None:
    """``exc`` as the extra that brings its module, when that is one of :data:`EXTRA_MODULES` (else None).

    Args:
        exc: the failed import.
        command: the command that needed it, e.g. ``"edge-deploy convert face"``.
        command_extra: the extra the command needs as a whole: a module of ``device`` missing from a
            ``convert`` command names ``convert``, which brings both.
    """
    module = (exc.name or "").split(".")[0]
    extra = next((name for name, modules in EXTRA_MODULES.items() if module in modules), None)
    if extra is None:
        return None
    if extra == "device":
        extra = command_extra
    return MissingExtraError(extra, module, command, str(exc))


#: argparse's messages for missing required arguments (checked before it reports unknown ones).
_REQUIRED = ("the following arguments are required", "one of the arguments ")


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of exiting, reports an unknown option before a missing
    one, and suggests the nearest command, choice or option ("did you mean")."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage(), self.prog)

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            raise argparse.ArgumentError(
                action,
                f"invalid choice: {value!r}{did_you_mean(str(value), choices)} "
                f"(choose from {', '.join(map(repr, choices))})",
            )

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        self._check_option_before_command(args)
        try:
            parsed, extras = super().parse_known_args(args, copy.copy(namespace))
        except UsageError as exc:
            if not str(exc).startswith(_REQUIRED):
                raise
            extras = self._extras_without_required(args, namespace)  # a typo of a required option is the news
            if not extras:
                raise
            self._unrecognized(extras)
        if extras:
            self._unrecognized(extras)
        return parsed, extras

    def _check_option_before_command(self, args: list[str]) -> None:
        """Refuse a group's unknown option given before its command (``edge-deploy --target rpi4``), naming the
        commands that take it, rather than reading its value as the command."""
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        flag = args[0].split("=", 1)[0] if args else ""
        known = self._parse_optional(args[0]) if flag.startswith("-") else None
        if not commands or known is None or known[0] is not None:
            return
        takers = [name for name, sub in _walk(self) if flag in sub._option_string_actions]
        if takers:
            self.error(f"{flag} goes after the command; the commands that take it: {', '.join(takers)}")
        self._unrecognized([flag])

    def _extras_without_required(self, args: list[str], namespace) -> list[str]:
        """What :meth:`parse_known_args` leaves over when no argument is required."""
        items: list[Any] = [*self._actions, *self._mutually_exclusive_groups]
        required = [item for item in items if item.required]
        for item in required:
            item.required = False
        try:
            return super().parse_known_args(args, copy.copy(namespace))[1]
        except UsageError:
            return []
        finally:
            for item in required:
                item.required = True

    def _unrecognized(self, extras: list[str]) -> NoReturn:
        options = [o for a in self._actions for o in a.option_strings]
        flags = [e.split("=", 1)[0] for e in extras if e.startswith("-") and len(e) > 1]
        hint = did_you_mean(flags[0], options).replace("'", "") if flags else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """``(command path, parser)`` for every subcommand under ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from _walk(sub, (*path, name))


def add_commands(parser: argparse.ArgumentParser, dest: str, metavar: str) -> argparse._SubParsersAction:
    """The subcommands of ``parser``; without one, ``parser`` prints its help (exit 0)."""

    def print_help(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(func=print_help)
    return parser.add_subparsers(dest=dest, metavar=metavar)


def examples_epilog(examples: str) -> str:
    """``examples`` (lines ``# what it does`` and ``edge-deploy ...``, any indent) under the examples heading."""
    return f"{EXAMPLES_HEADING}\n{textwrap.indent(textwrap.dedent(examples).strip(chr(10)), '  ')}\n"


def command_parser(
    sub: argparse._SubParsersAction,
    name: str,
    *,
    summary: str,
    description: str,
    examples: str,
    extra: str | None = None,
    **kwargs,
) -> argparse.ArgumentParser:
    """Register subcommand ``name``: ``summary`` (one line, in its parent's list), ``description`` (a sentence
    or two) and ``examples`` (see :func:`examples_epilog`), which ``--help`` prints after the options.
    ``extra``: the pip extra it needs when not ``device`` (its subcommands inherit it), for a failed import."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples_epilog(examples),
        formatter_class=HelpFormatter,
        **kwargs,
    )
    parser.set_defaults(_command=parser.prog)
    if extra is not None:
        parser.set_defaults(_extra=extra)
    return parser


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
    """Print ``data`` as indented JSON on stdout (every ``--json`` option uses this). A float that is not finite
    (a distance to an empty gallery is inf) prints as null: JSON has no Infinity or NaN."""
    print(json.dumps(_finite(data), indent=2, allow_nan=False))


def _finite(data: object) -> object:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(value) for value in data]
    return data


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen subcommand and return its exit code; the only place errors are printed.

    A usage error prints the command's usage, the error and where the examples are, and returns 2; a failed
    import of a pip extra's module names the extra (9); any other ``EdgeDeployError`` prints ``Error: ...`` and
    returns its ``exit_code``; Ctrl-C returns 130; a reader that left a pipe (``edge-deploy targets | head``) is
    not an error.
    """
    from edge.errors import EdgeDeployError

    args = None
    try:
        args = parser.parse_args(argv)
        check_extra(getattr(args, "_command", parser.prog), getattr(args, "_extra", None))
        return int(args.func(args))
    except ImportError as exc:
        command = getattr(args, "_command", parser.prog)
        missing = missing_extra(exc, command, getattr(args, "_extra", "device"))
        if missing is None:
            raise
        print(f"Error: {missing}", file=sys.stderr)
        return missing.exit_code
    except UsageError as exc:
        print(f"{exc.usage}{exc.prog}: error: {exc}\n(examples: {exc.prog} --help)", file=sys.stderr)
        return exc.exit_code
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
