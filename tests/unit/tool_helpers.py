"""Helpers for tests of external-tool failures: a tool that never finishes, and the CLI's printed error."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_deploy.common import run


def never_finishing_tool(folder: Path) -> Path:
    """An executable that ignores its arguments and sleeps for a minute (a hung converter or interpreter)."""
    tool = folder / "hung-tool"
    tool.write_text("#!/bin/sh\nexec sleep 60\n", encoding="ascii")
    tool.chmod(0o755)
    return tool


def printed_error(call: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``call`` as a subcommand behind the CLI's one error handler; its exit code and what it printed."""

    def subcommand(_args: argparse.Namespace) -> int:
        call()
        return 0

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=subcommand)
    capsys.readouterr()
    code = run(parser, [])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err
