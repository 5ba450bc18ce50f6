"""The one exception family of edge-deploy.

Library code raises these; only the CLI (`edge_deploy.cli.main`) prints them and turns them into an exit
code. Every message names the file, key or value at fault and what was expected.
"""

from __future__ import annotations


class EdgeDeployError(Exception):
    """Base class of every error edge-deploy raises on purpose."""

    exit_code = 1


class ProfileError(EdgeDeployError):
    """A target profile is missing, unknown or invalid."""

    exit_code = 2


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
    """An optional dependency is not installed; the message names the pip extra to install."""

    exit_code = 9


def require(module: str, extra: str, purpose: str):
    """Import an optional dependency lazily.

    Args:
        module: importable module name, e.g. ``"onnx"``.
        extra: the pip extra that brings it, e.g. ``"convert"``.
        purpose: what it is needed for, for the message.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: if the module cannot be imported.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{purpose} needs the Python module '{module}' ({exc}); install it with: pip install 'edge-deploy[{extra}]'"
        ) from exc
