"""Keep the exporters' noise off the user's terminal (what they say is not ours to act on)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_torch_export() -> Iterator[None]:
    """Silence torch.onnx's 'torchvision is not installed' log lines and its FutureWarnings for the block."""
    import torch.onnx._internal.exporter._registration  # noqa: F401  (creates the logger we quiet)

    names = [n for n in logging.root.manager.loggerDict if n.startswith("torch.onnx")] + ["torch.onnx"]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)
