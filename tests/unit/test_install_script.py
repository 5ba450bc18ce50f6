"""install.sh's argument checks (issue 17, defect 9: a --prefix with '&' wrote a broken config, exit 0)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

INSTALL = Path(__file__).resolve().parents[2] / "edge" / "bundle_files" / "install.sh"


@pytest.mark.parametrize("bad", ["a&b", 'a"b', "a#b", "a b", "a\\b", "a\nb"])
def test_a_prefix_that_would_break_the_config_is_refused(tmp_path: Path, bad: str) -> None:
    prefix = tmp_path / bad
    run = subprocess.run(["sh", str(INSTALL), "--prefix", str(prefix)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert run.stderr == (
        f"install.sh: error: --prefix '{prefix}': expected a path of letters, digits and / . _ + - only\n"
    )
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
