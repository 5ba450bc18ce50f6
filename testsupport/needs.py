"""Install on first use what only some tests and benchmarks need (side venvs, the browser): run its idempotent
set-up script, which is instant when everything is there and otherwise prints what it installs and for whom."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The per-need set-up scripts (scripts/setup.sh installs only what the main job uses).
ONNX2TF = "setup_onnx2tf.sh"  # .venv-onnx2tf: ONNX -> TFLite
LITERT_TORCH = "setup_litert_torch.sh"  # .venv-litert-torch: the language model -> TFLite
WEB = "setup_web.sh"  # Chromium, chromedriver, Node.js/npm, onnxruntime-web, selenium


def install_on_first_use(script: str, who: str, timeout_s: float = 1800) -> None:
    """Run ``scripts/<script> WHO``; its progress lines go to stderr as they come.

    Raises:
        RuntimeError: if the script fails or runs over ``timeout_s``, naming it (its own output says why).
    """
    path = REPO / "scripts" / script
    try:
        done = subprocess.run(["bash", str(path), who], cwd=REPO, stdout=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{path} (for {who}) did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{path} (for {who}) failed with exit code {done.returncode}; its output is above")
