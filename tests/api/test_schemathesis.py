"""schemathesis against the service's own OpenAPI, every check, 100 examples per operation:
no server error and no status or content the schema does not declare. Mutating requests go
unsigned, so 401 is their declared answer.

The operations are listed from an app built without any I/O (`create_app` opens nothing), and
each is run against an in-process world (one parametrised test per operation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from accord.api.app import create_app
from accord.ledger.settings import Settings
from tests.api.test_app import World, build_world, post_task

_OFFLINE = create_app(Settings.from_env({"ACCORD_HOME": str(Path("/nonexistent/accord"))}))
OPERATIONS = [
    pytest.param(path, method, id=f"{method} {path}")
    for path, operations in _OFFLINE.openapi()["paths"].items()
    for method in operations
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("api-fuzz") / "home", bidders=("ada",))


@pytest.fixture(scope="module")
def api_schema(world: World) -> Any:
    app = world.app()
    post_task(TestClient(app), world.signers["req"])  # something for the reads to find
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_openapi_contract(api_schema: Any, path: str, method: str) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: Any) -> None:
        case.call_and_validate()

    run()
