"""The outcome store's backends for tests: ``store_url`` is a fresh, empty store, once a SQLite file and once a
PostgreSQL database of its own (made on the server ``KEVLIKE_TEST_PG_URL`` names, dropped afterwards).

``.ci/run`` starts Debian's PostgreSQL and exports ``KEVLIKE_TEST_PG_URL``
(``eval "$(bash .ci/run postgres)"`` does only that, here too). Without the variable the PostgreSQL cases are
skipped, saying so; under CI (``CI`` set) they fail instead, since CI must run them.

Use: ``from stores import store_url`` in a test module, then a ``store_url`` argument."""

from __future__ import annotations

import os
import uuid

import pytest

PG_VAR = "KEVLIKE_TEST_PG_URL"


def _pg_database(base_url: str):
    """A new database on the server of ``base_url``: (its URL, a function that drops it)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"kevlike_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(base_url).set(database=name).render_as_string(hide_password=False)

    def drop():
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
    return url, drop


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A SQLAlchemy URL of an empty outcome store: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fb.db'}"
        return
    base = os.environ.get(PG_VAR)
    if not base:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_VAR} is not set under CI: .ci/run starts PostgreSQL and exports it")
        pytest.skip(f"{PG_VAR} is not set (no PostgreSQL server): eval \"$(bash .ci/run postgres)\" starts one")
    url, drop = _pg_database(base)
    try:
        yield url
    finally:
        drop()
