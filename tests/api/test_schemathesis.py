"""schemathesis against the service's own OpenAPI, every check: no server error and no status
or content the schema does not declare. Reads get 50 examples each. Mutating requests are
signed (RFC 9421) by the world's requester, 25 examples each, so that they reach the body's
validation and the handler: unsigned, 20 of the 22 mutating operations answered all 100
examples 401 at the signature check, before the body was read. Unsigned and badly signed
requests are tests/api/test_auth.py's, the rate limits tests/api/test_rate_limits.py's (here
they are set high: registration challenges are limited per address before any signature).

A mutating request that the schema allows may still be refused (400, 422) for what a schema
does not say: whether a signature inside the body verifies, whether a capability exists, an
amount's or a duration's grammar. So schemathesis's "schema-valid data is accepted" check
(positive_data_acceptance) runs on the reads only.

The operations are listed from an app built without any I/O (`create_app` opens nothing), and
each is run against an in-process world (one parametrised test per operation).

Why 50 and 25 (they were 100 and 50, the file's 62 s of CPU the suite's largest): the examples
are derandomized, and with coverage.py recording accord's branch arcs per operation, the 100/50
run reached 2755 arcs and the 50/25 run 2753. The two it missed are `GET /tasks?window=revealing`
(market/views.py), which tests/market/test_views.py and tests/api/test_task_pages.py check
row for row; the other per-operation differences were the request-nonce purge
(api/auth.py PurgeSchedule), which runs every so many requests to the shared world whatever
they hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.identity.http_signatures import sign_request
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
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
    high = 1e9  # no 429: the limits are tests/api/test_rate_limits.py's
    app = world.app(ApiConfig(rate=high, burst=high, challenge_rate=high, challenge_burst=high))
    post_task(TestClient(app), world.signers["req"])  # something for the reads to find
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def signed_as(signer: Signer) -> Any:
    """A requests auth hook (schemathesis sends ASGI calls through requests) that signs the
    prepared request as it is sent: method, URL, body and its content type."""

    def sign(request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body or b""
        headers = sign_request(
            signer,
            str(request.method),
            str(request.url),
            body.encode() if isinstance(body, str) else body,
            content_type=request.headers.get("Content-Type"),
        )
        request.headers.update(headers)
        return request

    return sign


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_openapi_contract(api_schema: Any, world: World, path: str, method: str) -> None:
    operation = api_schema[path][method]
    reads = method == "get"
    call: dict[str, Any] = (
        {}
        if reads
        else {
            "auth": signed_as(world.signers["req"]),
            "excluded_checks": [positive_data_acceptance],
        }
    )

    @given(case=operation.as_strategy())
    @settings(
        max_examples=50 if reads else 25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: Any) -> None:
        case.call_and_validate(**call)

    run()
