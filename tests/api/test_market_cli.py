"""`accord task|bid` in a subprocess against a real anvil devnet: one full auction, and bad
input refused clearly without touching the ledger."""

from __future__ import annotations

import json

import pytest

from tests.accord_cli import AccordCli

pytestmark = pytest.mark.devnet

ETH = 10**18
FIGURES = '{"kind": "figures", "figures": ["120.50", "33.20", "9.99"], "operation": "sum"}'
SUM = '"163.69"'
"""The output the sum of FIGURES must give (`--expect`): this service has no judge."""


def test_post_bid_reveal_award_and_bad_input(accord: AccordCli) -> None:
    accord.json("devnet", "up")
    dids = {}
    for name in ("alice", "bob"):
        dids[name] = accord.json("agent", "new", name)["did"]
        done = accord.json("agent", "onboard", name, "--capability", "arithmetic", "--items", "5")
        assert done["results"][0]["passed"] is True

    task = accord.json(
        "task",
        "post",
        "--title",
        "Add numbers",
        "--budget",
        "0.5eth",
        "--capability",
        "arithmetic",
        "--input",
        FIGURES,
        "--expect",
        SUM,
        # the windows close when the test advances the market's clock, never by themselves
        "--bidding",
        "1h",
        "--reveal",
        "1h",
    )
    task_id = task["task_id"]
    assert task["state"] == "bidding" and task["escrowed"] is True
    assert task["spec"]["budget"] == str(ETH // 2)

    accord.json("bid", "commit", task_id, "--agent", "alice", "--price", "0.1eth")
    accord.json("bid", "commit", task_id, "--agent", "bob", "--price", "0.2eth")
    sealed = accord.json("task", "bids", task_id)
    assert isinstance(sealed, list) and len(sealed) == 2
    assert {bid["bidder"] for bid in sealed} == {dids["alice"], dids["bob"]}
    assert all(bid["price"] is None and bid["revealed"] is False for bid in sealed)

    # a second bid while bidding is open is refused, the ledger untouched (the other bad input
    # is tried after the award: only what needs an open window runs inside one, so a slow
    # machine does not overrun it)
    size = accord.ledger_size()
    second = accord.run("bid", "commit", task_id, "--agent", "alice", "--price", "0.1eth", check=1)
    assert "second-bid" in " ".join(second.stderr.split()), second.stderr
    assert accord.ledger_size() == size

    accord.advance(3600)  # the bidding window closes
    revealed = accord.json("bid", "reveal", task_id, "--agent", "alice")
    assert revealed["price"] == str(ETH // 10)
    accord.json("bid", "reveal", task_id, "--agent", "bob")

    # --wait: awarded once the reveal window has closed (what it says while it waits:
    # tests/api/test_award_wait.py)
    accord.advance(3600)
    waited = accord.run("task", "award", task_id, "--wait", "--json")
    assert "Traceback" not in waited.stderr, waited.stderr
    award = json.loads(waited.stdout)
    # both score quality 3/4 (prior reputation 1/2, exam 5/5): alice wins and, by the
    # second-score rule, is paid where her score meets bob's: bob's price, 0.2 ETH
    assert award["winner"] == dids["alice"] and award["expired"] is False
    assert (award["rule"], award["price"], award["bids"]) == ("second-score", str(ETH // 5), 2)

    bids = accord.json("task", "bids", task_id)
    assert sorted(int(bid["price"]) for bid in bids) == [ETH // 10, ETH // 5]
    shown_bids = accord.run("task", "bids", task_id).stdout
    for name in ("alice", "bob"):  # each bidder by its registered name beside its DID
        [row] = [line for line in shown_bids.splitlines() if dids[name] in line]
        assert name in row, shown_bids
    assert "2 bids on" in shown_bids, shown_bids
    assert "0.1 ETH" in shown_bids and "0.2 ETH" in shown_bids, shown_bids

    # bad input: each refused in one line, the ledger untouched
    size = accord.ledger_size()
    post = ("task", "post", "--title", "t", "--capability", "arithmetic", "--expect", SUM)
    post = (*post, "--input", FIGURES)
    cases = [
        # no check that can reject a wrong answer, and no judge to decide a rejected review
        ((*post[:-4], *post[-2:], "--budget", "1eth"), 2, "cannot reject a wrong answer"),
        ((*post, "--budget", "1eth", "--expect", "{"), 2, "--expect is not JSON"),
        ((*post, "--budget", "0.5"), 2, "whole number of wei"),
        ((*post, "--budget=-1eth"), 2, "not an amount"),
        ((*post, "--budget", "1eth", "--bidding", "5x"), 2, "not a duration"),
        (
            ("task", "post", "--title", "t", "--budget", "1eth", "--capability", "Bad Cap"),
            2,
            "missing --input",
        ),
        (
            (
                "task",
                "post",
                "--title",
                "t",
                "--budget",
                "1eth",
                "--capability",
                "Bad Cap",
                "--input",
                FIGURES,
            ),
            2,
            "$.parts[0].capability: unknown capability 'Bad Cap'",
        ),
        (
            (
                *post[:-1],
                '{"kind": "figures", "figures": ["x"], "operation": "sum"}',
                "--budget",
                "1eth",
            ),
            2,
            "$.parts[0].input.figures[0]",
        ),
        ((*post, "--budget", "1eth", "--spec", "task.json"), 2, "either --spec"),
        (("task", "post", "--spec", "/nonexistent/task.json"), 2, "cannot read the spec"),
        ((*post, "--budget", "1eth", "--rule", "nonsense"), 2, "--rule"),
        (("task", "show", "nosuch"), 2, "no task"),
        (("bid", "reveal", "task-nosuch", "--agent", "alice"), 2, "no task 'task-nosuch'"),
    ]
    for args, code, message in cases:
        result = accord.run(*args, check=code)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
    assert accord.ledger_size() == size

    listed = accord.json("task", "list")
    assert [(row["task_id"], row["state"]) for row in listed["tasks"]] == [(task_id, "awarded")]
    assert listed["next_cursor"] is None
    shown = accord.json("task", "show", task_id)
    assert (shown["state"], shown["winner"], shown["price"]) == (
        "awarded",
        dids["alice"],
        str(ETH // 5),
    )
    again = accord.run("task", "award", task_id, check=1)
    assert "awarded" in again.stderr and "Traceback" not in again.stderr

    accord.json("ledger", "anchor")
    report = accord.json("ledger", "verify")
    assert report["verdict"] == "PASS", report


def test_a_command_that_starts_the_devnet_says_so(accord: AccordCli) -> None:
    port = accord.env["ACCORD_DEVNET_PORT"]
    post = ("task", "post", "--title", "t", "--budget", "0.1eth", "--capability", "arithmetic")
    post = (*post, "--expect", SUM)
    started = f"note: the devnet was not running: started it at http://127.0.0.1:{port}"

    fresh = accord.run(*post, "--input", FIGURES, "--json")
    assert started in " ".join(fresh.stderr.split()), fresh.stderr
    assert json.loads(fresh.stdout)["escrowed"] is True  # stdout: one JSON document still

    running = accord.run(*post, "--input", FIGURES)
    assert "not running" not in running.stderr, running.stderr

    accord.run("devnet", "down")
    restarted = accord.run(*post, "--input", FIGURES)
    assert started in " ".join(restarted.stderr.split()), restarted.stderr
    assert "posted" in restarted.stdout
    assert accord.json("devnet", "status")["running"] is True


def test_a_bid_over_the_budget_is_refused_before_it_is_sent(accord: AccordCli) -> None:
    accord.json("agent", "new", "alice")  # no credential: the market would refuse her anyway
    post = ("task", "post", "--title", "t", "--budget", "0.5eth", "--capability", "arithmetic")
    post = (*post, "--expect", SUM)
    task = accord.json(*post, "--input", FIGURES, "--bidding", "1h")  # open all the test long
    size = accord.ledger_size()
    over = accord.run(
        "bid", "commit", task["task_id"], "--agent", "alice", "--price", "0.6eth", check=1
    )
    assert " ".join(over.stderr.split()) == (
        f"error: bid rejected (over-budget): price 0.6 ETH exceeds the budget of task "
        f"{task['task_id']} (0.5 ETH)"
    )
    assert accord.ledger_size() == size
    assert not (accord.home / "bids" / task["task_id"]).exists()  # no salt kept for a reveal
    # the whole budget may be asked: that bid goes to the market (which checks credentials)
    whole = accord.run(
        "bid", "commit", task["task_id"], "--agent", "alice", "--price", "0.5eth", check=1
    )
    assert "bid rejected (not-eligible)" in " ".join(whole.stderr.split()), whole.stderr
