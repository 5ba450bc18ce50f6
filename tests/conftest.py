"""Shared test fixtures. Heavy fixtures (converted models, brokers) live next to the tests that need them."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
