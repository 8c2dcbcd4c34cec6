"""PostgreSQL for the data-layer tests: a fresh, empty schema per test on the server named by
``CLAWLET_TEST_POSTGRES_URL`` (``postgresql+psycopg://user:pw@127.0.0.1:PORT/db``; the role needs
CREATE on that database).

``scripts/test`` starts a throw-away server (``scripts/test-postgres``) and sets the variable;
without it, or without the ``psycopg`` driver, the PostgreSQL cases are skipped with a message.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

# Read at import: the autouse ``clawlet_home`` fixture (tests/conftest.py) removes every CLAWLET_*
# variable from the environment before a test's own fixtures run.
POSTGRES_URL = os.environ.get("CLAWLET_TEST_POSTGRES_URL", "")

if not POSTGRES_URL:
    SKIP_REASON = (
        "PostgreSQL not configured: run scripts/test (it starts a throw-away server) or set "
        "CLAWLET_TEST_POSTGRES_URL=postgresql+psycopg://user:pw@127.0.0.1:PORT/db"
    )
elif importlib.util.find_spec("psycopg") is None:
    SKIP_REASON = "CLAWLET_TEST_POSTGRES_URL is set but psycopg is not installed (pip install psycopg)"
else:
    SKIP_REASON = ""

requires_postgres = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)
"""Marks a test that needs the PostgreSQL server."""

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=[requires_postgres, pytest.mark.slow]),
]
"""Parameters for a ``database_url`` fixture: a SQLite file, and PostgreSQL when configured (a
server: ``slow``, out of the fast set)."""


@contextmanager
def fresh_schema_url(prefix: str = "clawlet_test") -> Iterator[str]:
    """A URL whose connections work in a new, empty schema ``<prefix>_<random>`` (its
    ``search_path``), dropped with everything in it afterwards, so no test sees another's rows."""
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={schema}"})
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.begin() as conn:  # not forever behind a connection the test left open
                conn.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()
