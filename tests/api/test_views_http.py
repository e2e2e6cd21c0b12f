"""Filters and pages over HTTP and the CLI (`GET /tasks`, `GET /agents`, `accord task list`,
`accord ledger reindex`), and discovery from the credential and reputation views against the
scan of every agent it replaces (tests/api/test_app.py's world: SQLite, in-memory chains)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from accord.api.cli import app as cli_app
from accord.client import AccordClient
from accord.coordinator.service import directory_for, discover
from accord.coordinator.team import form_team, rank_candidates
from accord.identity.credential_views import VIEW_NAME as CREDENTIAL_VIEW
from accord.identity.credential_views import capabilities_of
from accord.ledger.errors import QueryError
from accord.ledger.views import encode_cursor, reading
from accord.market.discovery import fraction_text
from accord.market.projections import read_views
from accord.market.service import Market
from tests.api.test_app import World, assert_problem, build_world, post_task
from tests.directory import whole_directory
from tests.view_rows import view_rows


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = build_world(
        tmp_path_factory.mktemp("views-world") / "home", bidders=("ada", "bob", "cy")
    )
    client = TestClient(world.app())
    for _ in range(3):
        post_task(client, world.signers["req"])
    post_task(client, world.signers["ada"])
    return world


@pytest.fixture
def client(world: World) -> TestClient:
    return TestClient(world.app())


def follow(client: TestClient, path: str, params: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Every page of a paged list, following its Link headers."""
    pages = []
    response = client.get(path, params=params)
    while True:
        assert response.status_code == 200, response.text
        pages.append(response.json())
        link = response.headers.get("link")
        if link is None:
            assert "accord-next-cursor" not in response.headers
            return pages
        target, rel = link.split(";")
        assert rel.strip() == 'rel="next"'
        response = client.get(target.strip().strip("<>"))


def test_get_tasks_pages_through_the_link_header(client: TestClient, world: World) -> None:
    everything = client.get("/tasks").json()
    assert len(everything) == 4
    pages = follow(client, "/tasks", {"limit": 1})
    assert [len(page) for page in pages] == [1, 1, 1, 1]
    assert [page[0] for page in pages] == everything
    req = world.signers["req"].did
    mine = follow(client, "/tasks", {"requester": req, "state": "bidding", "limit": 2})
    assert [len(page) for page in mine] == [2, 1]
    assert all(t["requester"] == req and t["state"] == "bidding" for p in mine for t in p)
    assert client.get("/tasks", params={"capability": "python"}).json() == []


def test_the_client_follows_the_pages(client: TestClient, world: World) -> None:
    def through_the_app(request: httpx.Request) -> httpx.Response:
        answer = client.request(request.method, str(request.url), headers=request.headers)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    http = AccordClient("http://testserver", transport=httpx.MockTransport(through_the_app))
    assert http.tasks() == client.get("/tasks").json()
    rows, cursor = http.task_page(limit=3)
    assert len(rows) == 3 and cursor is not None
    rest, end = http.task_page(limit=3, cursor=cursor)
    assert len(rest) == 1 and end is None
    assert http.tasks(requester=world.signers["ada"].did)[0]["requester"] == (
        world.signers["ada"].did
    )


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"state": "open"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"cursor": encode_cursor("agents", "ada")}, "cursor"),
        ({"capability": "Not A Capability"}, "capability"),
        ({"requester": ""}, "requester"),
    ],
)
def test_a_bad_task_query_is_a_422_naming_it(
    client: TestClient, params: dict[str, Any], parameter: str
) -> None:
    """Refused by the declared OpenAPI (so a client can check it before asking) or, for what
    only the view can tell (a cursor of a position too large, say), by `QueryError`."""
    body = assert_problem(client.get("/tasks", params=params), 422)
    assert parameter in body["detail"] or body.get("reason") == parameter


def test_get_agents_pages_by_name(client: TestClient, world: World) -> None:
    everything = [a["name"] for a in client.get("/agents", params={"limit": 200}).json()]
    assert everything == sorted(everything) and {"ada", "bob", "cy", "req", "carol"} <= set(
        everything
    )
    pages = follow(client, "/agents", {"limit": 2})
    assert [a["name"] for page in pages for a in page] == everything
    assert_problem(client.get("/agents", params={"limit": 500}), 422)
    assert_problem(client.get("/agents", params={"cursor": "x"}), 422)
    other_list = client.get("/agents", params={"cursor": encode_cursor("discovery", "2")})
    assert_problem(other_list, 404)


def ranked_by_scan(world: World, capability: str, need: str) -> list[dict[str, Any]]:
    return [
        {
            "did": c.member.did,
            "name": c.member.name,
            "capabilities": list(c.member.capabilities),
            "reputation": fraction_text(c.reputation),
            "relevance": str(c.relevance),
            "description": c.member.description,
        }
        for c in rank_candidates(need, capability, whole_directory(world.context))
    ]


@pytest.mark.parametrize("need", ["", "sum numbers", "ada reference agent for arithmetic"])
def test_discovery_from_the_views_ranks_as_the_scan_of_every_agent(
    client: TestClient, world: World, need: str
) -> None:
    expected = ranked_by_scan(world, "arithmetic", need)
    assert len(expected) == 3
    pages = follow(client, "/agents", {"capability": "arithmetic", "need": need, "limit": 2})
    assert [a for page in pages for a in page] == expected
    assert client.get("/agents", params={"capability": "python"}).json() == []
    with pytest.raises(QueryError):
        discover(world.context, "arithmetic", need, cursor=encode_cursor("tasks", "1"))


def test_an_expired_or_revoked_credential_leaves_discovery_as_it_leaves_the_scan(
    tmp_path: Path,
) -> None:
    world = build_world(tmp_path / "home")
    client = TestClient(world.app())
    market = world.context.market
    ada, bob = world.signers["ada"].did, world.signers["bob"].did
    assert market.credentialed("arithmetic") == sorted([ada, bob])
    [row] = world.onboarding.credentials_of(ada)
    world.onboarding.revoke(row["id"], "test")
    assert market.credentialed("arithmetic") == [bob]
    assert (
        [a["did"] for a in client.get("/agents", params={"capability": "arithmetic"}).json()]
        == [a["did"] for a in ranked_by_scan(world, "arithmetic", "")]
        == [bob]
    )
    assert held_capabilities(market, [ada, bob]) == {ada: [], bob: ["arithmetic"]}
    world.clock.advance(timedelta(days=181).total_seconds())
    assert market.credentialed("arithmetic") == [] == ranked_by_scan(world, "arithmetic", "")
    assert not market.eligible(bob, ["arithmetic"])


def test_task_list_on_the_cli_filters_pages_and_refuses_bad_input(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCORD_HOME", str(world.settings.home))
    runner = CliRunner()
    first = runner.invoke(cli_app, ["task", "list", "--state", "bidding", "--limit", "3", "--json"])
    assert first.exit_code == 0, first.output
    page = json.loads(first.stdout)
    assert len(page["tasks"]) == 3 and page["next_cursor"]
    rest = runner.invoke(
        cli_app, ["task", "list", "--state", "bidding", "--cursor", page["next_cursor"], "--json"]
    )
    assert rest.exit_code == 0, rest.output
    assert len(json.loads(rest.stdout)["tasks"]) == 1
    table = runner.invoke(cli_app, ["task", "list", "--limit", "1"])
    assert table.exit_code == 0 and "more: --cursor" in table.stdout
    for bad in (["--state", "open"], ["--limit", "0"], ["--cursor", "zzz"]):
        refused = runner.invoke(cli_app, ["task", "list", *bad, "--json"])
        assert refused.exit_code == 2, (bad, refused.output)


def test_ledger_reindex_rebuilds_every_view_identically(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = world.context.market.ledger.store
    store_operator = world.operator.did
    with store.engine.connect() as connection:
        before = list(view_rows(connection, read_views(store_operator)))
    monkeypatch.setenv("ACCORD_HOME", str(world.settings.home))
    done = CliRunner().invoke(cli_app, ["ledger", "reindex", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["views"] == dict.fromkeys(
        ("tasks", "bids", "credentials", "reputation", "discovery"), store.size()
    )
    with store.engine.connect() as connection:
        assert list(view_rows(connection, read_views(store_operator))) == before


def test_a_team_is_formed_from_the_holders_as_from_the_whole_directory(world: World) -> None:
    """`directory_for` reads the credential view for the task's capabilities (then verifies
    each holder as it verifies any agent): the team it gives is the whole directory's team."""
    whole = whole_directory(world.context)
    ada, carol = world.signers["ada"].did, world.signers["carol"].did
    holders = directory_for(world.context, ["arithmetic"], including=[ada])
    assert {m.did for m in holders} == {m.did for m in whole if "arithmetic" in m.capabilities}
    assert carol in {m.did for m in whole} and carol not in {m.did for m in holders}
    leader = next(m for m in holders if m.did == ada)
    for need in ("", "sum numbers"):
        assert form_team(leader, ["arithmetic"], need, holders) == form_team(
            leader, ["arithmetic"], need, whole
        )
    with_carol = directory_for(world.context, ["python"], including=[carol])
    assert [(m.did, m.capabilities) for m in with_carol] == [(carol, ())]


def held_capabilities(market: Market, dids: list[str]) -> dict[str, list[str]]:
    """What each DID holds a valid, unrevoked credential for now, from the credential view."""
    with reading(market.ledger.store, CREDENTIAL_VIEW) as connection:
        return capabilities_of(connection, dids, market.clock())
