"""The one exception family of edge-deploy.

Library code raises these; only the CLI (`edge_deploy.cli.main`) prints them and turns them into an exit
code. Every message names the file, key or value at fault and what was expected.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class EdgeDeployError(Exception):
    """Base class of every error edge-deploy raises on purpose."""

    exit_code = 1


class UsageError(EdgeDeployError):
    """The command line is wrong: an unknown command, option or choice, a missing argument (argparse's exit 2).

    Attributes:
        usage: the usage line of the command that refused it, printed before the error.
        prog: that command, e.g. ``"edge-deploy convert face"``.
    """

    exit_code = 2

    def __init__(self, message: str, usage: str = "", prog: str = "edge-deploy"):
        super().__init__(message)
        self.usage = usage
        self.prog = prog


class ProfileError(EdgeDeployError):
    """A target profile is missing, unknown or invalid."""

    exit_code = 10


class InputError(EdgeDeployError):
    """An input file (image, model, weights, folder) is missing, empty, corrupt or of the wrong kind."""

    exit_code = 3


class ConversionError(EdgeDeployError):
    """A model could not be read, rebuilt or exported."""

    exit_code = 4


class ValidationError(EdgeDeployError):
    """A converted model does not match its source, or misses the accuracy gate."""

    exit_code = 5


class BundleError(EdgeDeployError):
    """A bundle is malformed, tampered with or incomplete."""

    exit_code = 6


class InferenceError(EdgeDeployError):
    """A runtime backend failed to load or run a model."""

    exit_code = 7


class TelemetryError(EdgeDeployError):
    """The broker refused us or telemetry could not be stored."""

    exit_code = 8


class MissingDependencyError(EdgeDeployError):
    """An optional dependency (a Python module, an npm package, a side venv, a tool) is not installed; the message
    says how to install it."""

    exit_code = 9


class MissingExtraError(MissingDependencyError):
    """A command needs a Python package its pip extra brings, and it is not installed.

    Attributes:
        extra: the extra to install (``device``, ``convert`` or ``fleet``).
        module: the module that failed to import, e.g. ``"torch"``.
    """

    def __init__(self, extra: str, module: str, purpose: str, detail: str = ""):
        super().__init__(
            f"{purpose} needs the Python module '{module}' ({detail or 'not installed'}); install it with: "
            f"pip install 'edge-deploy[{extra}]'"
        )
        self.extra = extra
        self.module = module


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` naming the choices closest to ``word`` (difflib; ties all named), or ``""`` when
    none is close."""
    ratios = {choice: difflib.SequenceMatcher(None, word, choice).ratio() for choice in set(choices)}
    best = max(ratios.values(), default=0.0)
    close = sorted(choice for choice, ratio in ratios.items() if ratio == best >= 0.6)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def require(module: str, extra: str, purpose: str):
    """Import an optional dependency lazily.

    Args:
        module: importable module name, e.g. ``"onnx"``.
        extra: the pip extra that brings it, e.g. ``"convert"``.
        purpose: what it is needed for, for the message.

    Returns:
        The imported module.

    Raises:
        MissingExtraError: if the module cannot be imported.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, module, purpose, str(exc)) from exc
