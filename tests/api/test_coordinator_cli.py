"""`accord task run` and `accord conversation …` in a subprocess against a real anvil devnet:
an awarded two-capability task done by a team of reference agents (with a nested sub-team),
replayed from the ledger, and bad input refused clearly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.devnet import find_free_port
from tests.api.test_market_cli import Accord, sleep_until

pytestmark = pytest.mark.devnet


@pytest.fixture
def accord(tmp_path: Path) -> Iterator[Accord]:
    cli = Accord(tmp_path / "home", find_free_port())
    try:
        yield cli
    finally:
        cli.run("devnet", "down", check=None)


def _no_traceback(result: object) -> None:
    stderr = getattr(result, "stderr", "")
    assert "Traceback" not in stderr, stderr


def test_task_run_and_conversations(accord: Accord) -> None:
    accord.json("devnet", "up")
    dids = {}
    for name, caps in (
        ("alice", ("arithmetic", "extraction")),
        ("bob", ("arithmetic", "extraction")),
        ("carol", ("arithmetic",)),
    ):
        dids[name] = accord.json("agent", "new", name)["did"]
        flags = [arg for cap in caps for arg in ("--capability", cap)]
        done = accord.json("agent", "onboard", name, *flags, "--items", "5")
        assert all(r["passed"] is True for r in done["results"]), done

    task = accord.json(
        "task",
        "post",
        "--title",
        "Arithmetic and extraction",
        "--description",
        "arithmetic and extraction",
        "--budget",
        "0.5eth",
        "--capability",
        "arithmetic",
        "--capability",
        "extraction",
        "--bidding",
        "20s",
        "--reveal",
        "12s",
    )
    task_id = task["id"]
    accord.json("bid", "commit", task_id, "--agent", "alice", "--price", "0.1eth")
    accord.json("bid", "commit", task_id, "--agent", "bob", "--price", "0.2eth")

    # not awarded yet: refused in one line, nothing started
    early = accord.run("task", "run", task_id, check=1)
    assert "award" in " ".join(early.stderr.split()), early.stderr
    _no_traceback(early)
    assert accord.json("task", "show", task_id)["state"] == "bidding"
    assert accord.json("conversation", "list") == []

    sleep_until(task["bidding_ends"])
    accord.json("bid", "reveal", task_id, "--agent", "alice")
    accord.json("bid", "reveal", task_id, "--agent", "bob")
    sleep_until(task["reveal_ends"])
    award = accord.json("task", "award", task_id)
    winner = award["winner"]
    assert winner in (dids["alice"], dids["bob"])

    live = accord.run("task", "run", task_id, "--timeout", "30")
    _no_traceback(live)
    text = " ".join(live.stdout.split())
    assert "assigns" in text and "reports" in text and "concludes" in text, live.stdout
    assert "(async, triggers set)" in text and "and waits" in text, live.stdout
    assert f"{task_id} delivered" in text, live.stdout

    shown = accord.json("task", "show", task_id)
    assert shown["state"] == "delivered", shown

    conversations = accord.json("conversation", "list")
    assert isinstance(conversations, list) and conversations
    for row in conversations:
        assert {"id", "task", "parent", "state", "members"} <= set(row)
        assert row["task"] == task_id and row["state"] == "closed"
        assert isinstance(row["members"], list) and len(row["members"]) >= 2
    ids = {row["id"] for row in conversations}
    [top] = [row for row in conversations if row["parent"] is None]
    assert top["leader"] == winner and winner in top["members"]
    # carol (arithmetic only) is not on the top team: the arithmetic member teams up with her
    children = [row for row in conversations if row["parent"] is not None]
    assert children, conversations
    for child in children:
        assert child["parent"] in ids and child["depth"] == 1
        assert child["leader"] in top["members"]
    assert any(dids["carol"] in child["members"] for child in children)
    assert dids["carol"] not in top["members"]
    filtered = accord.json("conversation", "list", "--task", task_id)
    assert [row["id"] for row in filtered] == [row["id"] for row in conversations]

    replay = accord.json("conversation", "show", top["id"])
    assert replay["id"] == top["id"] and replay["state"] == "closed"
    kinds = [m["message"]["kind"] for m in replay["messages"]]
    assert kinds[0] == "discuss" and kinds[-1] == "conclude"
    assert kinds.index("assign_sync") < kinds.index("assign_async")
    assert [m["turn"] for m in replay["messages"]] == list(range(len(kinds)))
    human = accord.run("conversation", "show", children[0]["id"])
    assert "every move checked" in human.stdout and children[0]["id"] in human.stdout

    # bad input: clear one-line errors, no traceback
    missing = accord.run("conversation", "show", "nosuch", check=1)
    assert "no conversation" in " ".join(missing.stderr.split()), missing.stderr
    _no_traceback(missing)
    again = accord.run("task", "run", task_id, check=1)
    assert again.stderr.strip() and "error" in again.stderr
    _no_traceback(again)
