"""Helpers that tests and benchmarks share: a real broker, PostgreSQL and Chromium, set-up on first use,
fault injection and small test models. Imports neither tests nor benchmarks."""
