"""The problem handlers of the service (`accord.api.problems`) for a database that is away: a
request whose database is unreachable, or whose connection the server cut, answers 503
problem+json with Retry-After and without the driver's text, never a bare 500."""

from __future__ import annotations

import os

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import create_engine, text

from accord.api.problems import PROBLEM_MEDIA_TYPE, install_problem_handlers
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from tests.ledger.conftest import PG_ENV, PG_SKIP_REASON


def served(reader: FastAPI) -> TestClient:
    install_problem_handlers(reader)
    return TestClient(reader, raise_server_exceptions=False)


def assert_unavailable(answer: Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body = answer.json()
    assert body["type"].endswith("unavailable") and "retry" in body["detail"]
    assert "SELECT" not in body["detail"] and answer.headers["retry-after"] == "1"


def test_an_unreachable_database_is_503() -> None:
    engine = make_engine(f"postgresql+psycopg://accord@127.0.0.1:{find_free_port()}/none")
    app = FastAPI()

    @app.get("/count")
    def count() -> int:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT 1")).scalar_one())

    assert_unavailable(served(app).get("/count"))


@pytest.mark.postgres
def test_a_connection_the_server_cut_is_503_then_the_next_request_reconnects() -> None:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(PG_SKIP_REASON)
    engine = make_engine(url)
    app = FastAPI()

    @app.get("/pid")
    def pid() -> int:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())

    client = served(app)
    first = client.get("/pid")
    assert first.status_code == 200
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first.json()})
    finally:
        admin.dispose()
    assert_unavailable(client.get("/pid"))  # the pooled connection was busy-fresh: not pinged
    again = client.get("/pid")
    assert again.status_code == 200 and again.json() != first.json()
    engine.dispose()
