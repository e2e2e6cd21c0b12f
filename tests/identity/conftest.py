"""Fixtures shared by the identity tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

PG_ENV = "ACCORD_TEST_PG_URL"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh schema on the server at ACCORD_TEST_PG_URL (skips without one), dropped after."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"needs {PG_ENV}; run under scripts/with_postgres.sh")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        separator = "&" if "?" in base else "?"
        yield f"{base}{separator}options=-csearch_path%3D{schema}"
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()
