"""The short soak (issue 17): benchmarks/soak.py's run at 2,000 frames with the broker flapping every 5 s.

The full run (20,000 frames, a flap every 30 s) writes docs/benchmarks.md; this one checks the same
properties on every CI run: every result delivered exactly once, RSS growth after warm-up < 5 %, fds and
threads not rising, a clean exit on SIGTERM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_short_soak_under_a_flapping_broker(face_fp32_models: Path, tmp_path: Path) -> None:
    from benchmarks.soak import report, soak

    result = soak(face_fp32_models, frames=2000, flap_s=5.0, down_s=1.5, out=tmp_path)
    print(report(result, "tests/integration/test_soak.py"))
    assert result.flaps >= 2  # the broker really went away while frames were processed
    assert (result.missing, result.duplicated) == (0, 0)
    assert result.problems() == []
