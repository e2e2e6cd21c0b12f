"""`accord.client` and the CLI's `--server URL`: uvicorn on 127.0.0.1 over an in-memory world
(a posted task with bids, a logged team conversation); each read command run with `--server`
through typer's CliRunner prints exactly what the same command prints from the local store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from accord.api import coordinator_cli, market_cli
from accord.api.cli import app
from accord.client import AccordClient, ApiError
from accord.ledger.devnet import find_free_port
from accord.ledger.settings import Settings
from accord.market.wiring import MarketContext
from tests.api.test_app import World, build_world, commitment_json
from tests.api.test_stream import part_tuples, team_runner
from tests.serving import serve
from tests.specs import INVOICE_CHECKS, invoice_parts

runner = CliRunner()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("client-world") / "home")


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[tuple[str, str, str]]:
    """The service's URL, a task with two sealed bids, and a finished conversation."""
    # the bidders hold arithmetic only: the task is the invoice's two arithmetic parts
    parts = [p for p in invoice_parts() if p["capability"] == "arithmetic"]
    sums = ("sum-right", "tax-right")  # the checks on those two parts
    with serve(world.app(), ws="none") as base:
        with AccordClient(base, signer=world.signers["req"]) as client:
            task_id = str(
                client.request(
                    "POST",
                    "/tasks",
                    json={
                        "title": "Sum [these] figures",
                        "budget": "0.5eth",
                        # the state read here and through the server must not change between
                        # the two reads: no window closes while the test runs, however slow
                        "bidding": "1h",
                        "parts": parts,
                        "checks": [c for c in INVOICE_CHECKS if c["id"] in sums],
                    },
                )["task_id"]
            )
        for name in ("ada", "bob"):
            signer = world.signers[name]
            with AccordClient(base, signer=signer) as client:
                client.commit(task_id, commitment_json(signer, task_id, 10**17))
        team = team_runner(world, delay=0)
        conversation = team.run_task(task_id, team.directory[0], part_tuples(parts), "t", "both")
        yield base, task_id, conversation.conv_id


@pytest.fixture
def local(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's local commands open the world's market instead of a devnet's."""

    def open_market(settings: Settings) -> MarketContext:
        del settings
        return world.context

    monkeypatch.setattr(market_cli, "open_market", open_market)
    monkeypatch.setattr(coordinator_cli, "open_market", open_market)
    monkeypatch.setenv("ACCORD_HOME", str(world.settings.home))
    monkeypatch.delenv("ACCORD_SERVER", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def cli(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


@pytest.mark.usefixtures("local")
@pytest.mark.parametrize(
    "command",
    [
        ("task", "list"),
        ("task", "show", "{task}"),
        ("task", "bids", "{task}"),
        ("conversation", "list"),
        ("conversation", "list", "--task", "{task}"),
        ("conversation", "show", "{conv}"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_remote_output_is_the_local_output(
    server: tuple[str, str, str], command: tuple[str, ...], as_json: bool
) -> None:
    base, task_id, conv_id = server
    args = [part.format(task=task_id, conv=conv_id) for part in command]
    if as_json:
        args.append("--json")
    here = cli(*args).output
    there = cli(*args, "--server", base).output
    assert there == here
    if as_json:
        assert json.loads(here)
    else:
        assert len(here.splitlines()) >= 3


@pytest.mark.usefixtures("local")
def test_server_from_the_environment(
    server: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, task_id, _ = server
    here = cli("task", "show", task_id, "--json").output
    monkeypatch.setenv("ACCORD_SERVER", base)
    monkeypatch.setattr(market_cli, "open_market", _no_local_store)
    assert cli("task", "show", task_id, "--json").output == here


def _no_local_store(settings: Settings) -> MarketContext:
    raise AssertionError("the local store was opened although --server was given")


@pytest.mark.usefixtures("local")
def test_remote_errors_are_one_clear_line(server: tuple[str, str, str]) -> None:
    base, _, _ = server
    missing = cli("task", "show", "task-none", "--server", base, code=2)
    assert "Not found (404)" in missing.output and "task-none" in missing.output
    assert "Traceback" not in missing.output
    cli("conversation", "show", "conv-none", "--server", base, code=2)
    away = cli("task", "list", "--server", f"http://127.0.0.1:{find_free_port()}", code=1)
    assert "cannot reach the accord service" in away.output
    cli("task", "list", "--server", "localhost:1", code=2)


def test_client_signed_calls_and_problems(world: World, server: tuple[str, str, str]) -> None:
    base, task_id, conv_id = server
    ada = world.signers["ada"]
    with AccordClient(base) as client:
        assert client.health()["status"] == "ok"
        assert any(t["task_id"] == task_id for t in client.tasks())
        bidders = {b["bidder"] for b in client.bids(task_id)}
        assert bidders == {ada.did, world.signers["bob"].did}
        assert client.conversation(conv_id)["state"] == "closed"
        assert client.conversations(task_id)[0]["conv_id"] == conv_id
        assert client.checkpoints()["log_id"]
        with pytest.raises(ApiError) as unsigned:
            client.commit(task_id, commitment_json(ada, task_id, 10**17))
        assert unsigned.value.status == 401 and "not signed" in str(unsigned.value)
    with AccordClient(base, signer=ada) as client, pytest.raises(ApiError) as again:
        client.commit(task_id, commitment_json(ada, task_id, 10**17))
    assert again.value.status == 409 and again.value.reason == "second-bid"
    assert str(again.value).startswith("Conflict (409): ")
    carol = world.signers["carol"]
    with AccordClient(base, signer=carol) as client, pytest.raises(ApiError) as other:
        client.commit(task_id, commitment_json(ada, task_id, 10**17))
    assert other.value.status == 403 and "bids only for itself" in str(other.value)


def limited_app(refusals: int, header: str) -> FastAPI:
    """An app whose /limited answers 429 (`Retry-After: header`) `refusals` times, then 200;
    `app.state.calls` counts the calls of each method."""
    calls = {"GET": 0, "POST": 0}
    limited = FastAPI()
    limited.state.calls = calls

    @limited.api_route("/limited", methods=["GET", "POST"])
    def answer(request: Request) -> JSONResponse:
        calls[request.method] += 1
        if calls[request.method] <= refusals:
            return JSONResponse(
                {"title": "Too Many Requests", "detail": "slow down", "status": 429},
                status_code=429,
                headers={"Retry-After": header},
            )
        return JSONResponse({"ok": True})

    return limited


def test_a_rate_limited_read_waits_as_retry_after_says_and_a_write_is_not_sent_twice() -> None:
    app = limited_app(refusals=2, header="0")
    with serve(app, ws="none") as base, AccordClient(base) as client:
        assert client.get("/limited") == {"ok": True}
        assert app.state.calls["GET"] == 3
        with pytest.raises(ApiError) as refused:
            client.request("POST", "/limited")
        assert refused.value.status == 429 and "retry after 0 s" in str(refused.value)
        assert app.state.calls["POST"] == 1


def test_a_read_still_limited_past_its_wait_is_an_error_naming_the_pause() -> None:
    app = limited_app(refusals=99, header="3600")
    with serve(app, ws="none") as base, AccordClient(base, rate_limit_wait=60) as client:
        with pytest.raises(ApiError) as refused:
            client.get("/limited")
        assert refused.value.status == 429 and "retry after 3600 s" in str(refused.value)
        assert app.state.calls["GET"] == 1  # an hour's pause is past the wait: not slept


def test_retry_after_reads_seconds_and_http_dates() -> None:
    from accord.client import retry_after

    assert retry_after({"Retry-After": "7"}) == 7.0
    assert retry_after({}) == 1.0 and retry_after({"Retry-After": "soon"}) == 1.0
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after({"Retry-After": date}, now=1445412470.0) == 10.0
    assert retry_after({"Retry-After": date}, now=1445412490.0) == 0.0
