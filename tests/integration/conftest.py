"""Fixtures the integration modules share: a PostgreSQL cluster per module, a fresh database per test."""

from __future__ import annotations

import uuid

import pytest

from testsupport.postgres import Postgres, postgres_missing


@pytest.fixture(scope="module")
def pg():
    why = postgres_missing()
    if why:
        pytest.fail(why)
    server = Postgres().start()
    yield server
    server.close()


@pytest.fixture()
def pg_url(pg: Postgres) -> str:
    """A fresh database on the module's cluster, so tests don't see each other's rows."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg.psql(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + f"/{name}"
