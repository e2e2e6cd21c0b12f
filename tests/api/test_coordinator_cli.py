"""`accord task run` and `accord conversation …` in a subprocess against a real anvil devnet:
an awarded two-capability task done by a team of reference agents (with a nested sub-team),
replayed from the ledger, and bad input refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.accord_cli import AccordCli
from tests.specs import INVOICE, invoice_request

pytestmark = pytest.mark.devnet


def _no_traceback(result: object) -> None:
    stderr = getattr(result, "stderr", "")
    assert "Traceback" not in stderr, stderr


def test_task_run_and_conversations(accord: AccordCli, tmp_path: Path) -> None:
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

    # the spec file names the invoice by a path beside it; the CLI stores it by sha256
    (tmp_path / "invoice.txt").write_text(INVOICE)
    request = invoice_request(
        bidding="1h",  # the windows close when the test advances the market's clock
        reveal="1h",
        # discovery ranks by the words of the need: bob (arithmetic, extraction) matches more
        # of them than carol (arithmetic), so carol is left for the arithmetic member's sub-team
        description="arithmetic and extraction",
    )
    for part in request["parts"]:
        if part["capability"] == "extraction":
            part["input"]["document"] = {"$file": "invoice.txt"}
    spec_file = tmp_path / "task.json"
    spec_file.write_text(json.dumps(request))
    task = accord.json("task", "post", "--spec", str(spec_file))
    task_id = task["task_id"]
    accord.json("bid", "commit", task_id, "--agent", "alice", "--price", "0.1eth")
    accord.json("bid", "commit", task_id, "--agent", "bob", "--price", "0.2eth")

    # not awarded yet: refused in one line, nothing started
    early = accord.run("task", "run", task_id, check=1)
    assert "award" in " ".join(early.stderr.split()), early.stderr
    _no_traceback(early)
    assert accord.json("task", "show", task_id)["state"] == "bidding"
    assert accord.json("conversation", "list") == []

    accord.advance(3600)
    accord.json("bid", "reveal", task_id, "--agent", "alice")
    accord.json("bid", "reveal", task_id, "--agent", "bob")
    accord.advance(3600)
    award = accord.json("task", "award", task_id)
    winner = award["winner"]
    assert winner in (dids["alice"], dids["bob"])

    live = accord.run("task", "run", task_id, "--timeout", "30")
    _no_traceback(live)
    text = " ".join(live.stdout.split())
    assert "assigns" in text and "reports" in text and "concludes" in text, live.stdout
    assert "(async, triggers set)" in text and "and waits" in text, live.stdout
    assert f"{task_id} delivered" in text, live.stdout
    assert " t00 " in live.stdout, live.stdout  # numbered from t00, as `conversation show` is

    shown = accord.json("task", "show", task_id)
    assert shown["state"] == "delivered", shown
    [digest] = shown["spec"]["files"]
    assert accord.run("task", "file", task_id, digest).stdout == INVOICE

    # the requester's deliverable: every part's output and producer, written out on request
    result = accord.json("task", "result", task_id, "--out", str(tmp_path / "result"))
    outputs = {entry["part"]: entry["output"] for entry in result["parts"]}
    assert outputs["lines-sum"] == "2585.50" and outputs["invoice-fields"]["total"] == "3128.46"
    assert result["checks"] is None and result["leader"] == winner
    written = json.loads((tmp_path / "result" / "invoice-dates.json").read_text())
    assert written == {"issue_date": "2026-10-14", "due_date": "2026-11-13"}
    human = " ".join(accord.run("task", "result", task_id).stdout.split())
    assert "lines-sum (arithmetic) by" in human and "checks: run at settlement" in human

    conversations = accord.json("conversation", "list")
    assert isinstance(conversations, list) and conversations
    for row in conversations:
        assert {"conv_id", "task_id", "parent", "state", "members"} <= set(row)
        assert row["task_id"] == task_id and row["state"] == "closed"
        assert isinstance(row["members"], list) and len(row["members"]) >= 2
    ids = {row["conv_id"] for row in conversations}
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
    assert [row["conv_id"] for row in filtered] == [row["conv_id"] for row in conversations]

    replay = accord.json("conversation", "show", top["conv_id"])
    assert replay["conv_id"] == top["conv_id"] and replay["state"] == "closed"
    kinds = [m["message"]["kind"] for m in replay["messages"]]
    assert kinds[0] == "discuss" and kinds[-1] == "conclude"
    assert kinds.index("assign_sync") < kinds.index("assign_async")
    assert [m["turn"] for m in replay["messages"]] == list(range(len(kinds)))
    human = accord.run("conversation", "show", children[0]["conv_id"])
    assert "every move checked" in human.stdout and children[0]["conv_id"] in human.stdout

    # bad input: clear one-line errors, no traceback
    missing = accord.run("conversation", "show", "nosuch", check=1)
    assert "no conversation" in " ".join(missing.stderr.split()), missing.stderr
    _no_traceback(missing)
    again = accord.run("task", "run", task_id, check=1)
    assert again.stderr.strip() and "error" in again.stderr
    _no_traceback(again)

    # settling anchors the log: the audit right after it passes step 2 (and every other)
    settled = accord.json("task", "settle", task_id)
    assert settled["already_settled"] is False and settled["held"] == {}, settled
    audited = accord.run("audit", task_id, "--json", check=None)
    report = json.loads(audited.stdout)
    assert audited.returncode == 0 and report["verdict"] == "PASS", report
