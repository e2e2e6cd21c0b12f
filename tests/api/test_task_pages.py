"""`GET /tasks` encodes its page itself (`tasks_body`, each spec's text once per spec): the
bytes must be those JSONResponse gives for the tasks' `task_json`, whatever the tasks hold."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from accord.api.routes.market import task_json, tasks_body
from accord.market.money import Wei
from accord.market.tasks import Task, TaskSpec, clock_state, compact_json
from accord.market.work import Part
from tests.api.test_app import World, build_world, post_task
from tests.specs import invoice_spec, single_part_spec

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SHA = "ab" * 32


def context_at(now: datetime) -> Any:
    """What `task_json` and `tasks_body` read of a context: the market's clock state."""
    return SimpleNamespace(market=SimpleNamespace(state=lambda task: clock_state(task, now)))


def with_a_file() -> TaskSpec:
    """Non-ASCII text, a control character, a file stored with the task."""
    spec = invoice_spec(title="Vérifier la facture \u2013 №7", description='tab\there "q" \x01')
    parts = (Part("doc", "extraction", {"document": {"$file": SHA}, "fields": {}}), *spec.parts)
    return dataclasses.replace(
        spec, parts=parts, files={SHA: {"name": "facture-é.txt", "bytes": 12}}
    )


def tasks() -> list[Task]:
    shared = single_part_spec()
    posted = NOW - timedelta(seconds=30)
    return [
        Task("t-open", "did:key:zA", shared, posted, "bidding", escrowed=True),
        Task("t-also-open", "did:key:zB", shared, posted, "bidding", escrowed=True),
        Task("t-revealing", "did:key:zA", invoice_spec(), NOW - timedelta(hours=1), "bidding"),
        Task(
            "t-awarded",
            "did:key:zÄ",
            with_a_file(),
            NOW - timedelta(days=1),
            "awarded",
            escrowed=True,
            winner="did:key:zWinner",
            price=Wei(10**18 + 7),
        ),
        Task("t-posted", "did:key:zC", with_a_file(), posted, "posted"),
        Task(
            "t-delivered",
            "did:key:zC",
            shared,
            NOW - timedelta(days=2),
            "delivered",
            escrowed=True,
            winner="did:key:zW",
            price=Wei(1),
            delivered_index=9,
            delivered_at=NOW - timedelta(hours=3),
            duplicates=(4, 5),
        ),
    ]


@pytest.mark.parametrize("count", [0, 1, 2, 6])
def test_a_page_is_byte_for_byte_what_json_response_gives(count: int) -> None:
    context = context_at(NOW)
    page = tasks()[:count]
    expected = JSONResponse([task_json(context, task) for task in page]).body
    assert tasks_body(context, page) == expected
    assert tasks_body(context, page) == expected  # again, from the specs' remembered text
    states = [item["state"] for item in json.loads(expected)]
    assert states == ["bidding", "bidding", "revealing", "awarded", "posted", "delivered"][:count]


def test_a_spec_text_is_its_json_and_follows_the_spec() -> None:
    spec = with_a_file()
    assert spec.json_text == compact_json(spec.to_json())
    assert json.loads(spec.json_text) == spec.to_json()
    retitled = dataclasses.replace(spec, title="another")
    assert json.loads(retitled.json_text)["title"] == "another"
    assert spec == with_a_file()  # the remembered text is no part of the spec's value


@pytest.mark.parametrize("state", ["bidding", "revealing", "awarded"])
def test_a_task_text_is_its_json_with_the_state_given(state: str) -> None:
    for task in tasks():
        expected = compact_json({**task.to_json(), "state": state})
        assert task.json_text(state) == expected
        assert task.json_text(state) == expected  # again, from the text kept
        assert task == dataclasses.replace(task)  # the kept text is no part of its value


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = build_world(tmp_path_factory.mktemp("pages-world") / "home")
    client = TestClient(world.app())
    for title in ("Check the figures", "Prüfe die Zahlen", "Check them again"):
        post_task(client, world.signers["req"], title=title)
    post_task(client, world.signers["ada"])
    return world


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"limit": 2},
        {"state": "bidding", "capability": "arithmetic", "limit": 50},
        {"state": "bidding", "limit": 1},
        {"capability": "python"},
    ],
)
def test_get_tasks_answers_the_tasks_json_and_the_next_page(
    world: World, params: dict[str, Any]
) -> None:
    response = TestClient(world.app()).get("/tasks", params=params)
    assert response.status_code == 200
    page = world.context.market.list_tasks(**params)
    expected = JSONResponse([task_json(world.context, task) for task in page.tasks])
    assert response.content == expected.body
    assert response.headers["content-type"] == expected.headers["content-type"]
    assert response.headers["content-length"] == expected.headers["content-length"]
    assert response.headers.get("accord-next-cursor") == page.next_cursor
    if page.next_cursor is None:
        assert "link" not in response.headers
    else:
        query = "&".join([*(f"{k}={v}" for k, v in params.items()), f"cursor={page.next_cursor}"])
        assert response.headers["link"] == f'</tasks?{query}>; rel="next"'
