"""The `accord` command line against a real anvil devnet, as a person or a script uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accord.ledger.devnet import find_free_port
from tests.accord_cli import AccordCli

pytestmark = pytest.mark.devnet


def test_append_anchor_verify_survive_a_devnet_restart(accord: AccordCli) -> None:
    first = accord.json("devnet", "up")
    again = accord.json("devnet", "up")
    assert first["reused"] is False and again["reused"] is True
    assert again["pid"] == first["pid"] and again["registry"] == first["registry"]

    for n in range(3):
        accord.run("ledger", "append", "--kind", "note.added", "--body", json.dumps({"n": n}))
    anchored = accord.json("ledger", "anchor")
    assert anchored["status"] == "confirmed" and anchored["size"] == 3

    accord.run("devnet", "down")
    accord.json("devnet", "up")  # from the persisted state
    report = accord.json("ledger", "verify")
    assert report["verdict"] == "PASS", report
    assert [step["status"] for step in report["steps"]] == ["pass"] * 6


def test_devnet_down_loses_nothing_and_anchors_later(accord: AccordCli) -> None:
    accord.json("devnet", "up")
    accord.run("ledger", "append", "--kind", "note.added")
    accord.json("ledger", "anchor")
    accord.run("devnet", "down")

    appended = accord.json("ledger", "append", "--kind", "note.added", "--body", '{"late": true}')
    assert appended["index"] == 1
    assert "devnet is not running" in appended["anchor_pending_reason"]

    verify = accord.run("ledger", "verify", check=1)
    assert "devnet is not running" in verify.stderr
    offline = accord.json("ledger", "verify", "--offline")
    assert offline["verdict"] == "PASS"

    accord.json("devnet", "up")
    anchored = accord.json("ledger", "anchor")
    assert (anchored["status"], anchored["size"]) == ("confirmed", 2)
    assert accord.json("ledger", "verify")["verdict"] == "PASS"


def test_external_chain_that_is_down_gives_a_clear_error(accord: AccordCli) -> None:
    accord.env["ACCORD_RPC_URL"] = f"http://127.0.0.1:{find_free_port()}"
    accord.env["ACCORD_OPERATOR_ETH_KEY"] = "0x" + "11" * 32
    result = accord.run("ledger", "anchor", check=1)
    assert "does not answer" in result.stderr
    assert "Traceback" not in result.stderr


def test_show_proof_and_bad_input(accord: AccordCli) -> None:
    for n in range(5):
        accord.run("ledger", "append", "--kind", "note.added", "--body", json.dumps({"n": n}))
    shown = accord.json("ledger", "show", "--from", "1", "--limit", "2")
    assert shown["size"] == 5 and [e["index"] for e in shown["entries"]] == [1, 2]
    proof = accord.json("ledger", "proof", "3")
    assert proof["tree_size"] == 5 and len(proof["proof"]) == 3
    assert "the proof verifies" in accord.run("ledger", "proof", "3").stdout

    for args, message in [
        (["ledger", "append", "--kind", "Bad Kind"], "dotted lower-case"),
        (["ledger", "append", "--kind", "a.b", "--body", "[1]"], "JSON object"),
        (["ledger", "append", "--kind", "a.b", "--body", "{nope"], "not JSON"),
        (["ledger", "append", "--kind", "a.b", "--body", '{"wei": 500000000000000000}'], "wei"),
        (["ledger", "proof", "9"], "not in a tree of 5"),
    ]:
        result = accord.run(*args, check=2)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert accord.json("ledger", "show")["size"] == 5  # nothing was written by bad input


def test_append_as_another_key(accord: AccordCli, tmp_path: Path) -> None:
    from accord.ledger.signing import Ed25519Signer, write_keyfile

    agent = Ed25519Signer.generate()
    keyfile = tmp_path / "agent.json"
    write_keyfile(keyfile, agent)
    entry = accord.json("ledger", "append", "--kind", "agent.joined", "--as", str(keyfile))
    assert entry["event"]["actor"] == agent.did and entry["event"]["seq"] == 1


def test_status_on_another_port_is_not_running_there_and_names_the_port(
    accord: AccordCli,
) -> None:
    port = int(accord.env["ACCORD_DEVNET_PORT"])
    up = accord.json("devnet", "up")
    accord.env["ACCORD_DEVNET_PORT"] = str(find_free_port())  # a port nothing listens on
    status = accord.json("devnet", "status")
    assert (status["running"], status["pid"], status["block_number"]) == (False, None, None)
    assert status["elsewhere"] == {"pid": up["pid"], "port": port}
    said = " ".join(accord.run("devnet", "status").stdout.split())
    assert f"this home's devnet runs on port {port} (pid {up['pid']})" in said, said
    refused = accord.run("devnet", "up", check=1)  # named at once, not after a timeout
    assert f"on port {port}, not" in " ".join(refused.stderr.split()), refused.stderr

    accord.env["ACCORD_DEVNET_PORT"] = str(port)
    here = accord.json("devnet", "status")
    assert (here["running"], here["pid"], here["elsewhere"]) == (True, up["pid"], None)


def test_status_with_an_external_chain_names_that_chain_and_hides_its_url_path(
    accord: AccordCli,
) -> None:
    port = int(accord.env["ACCORD_DEVNET_PORT"])
    accord.json("devnet", "up")
    assert accord.json("devnet", "status")["managed"] is True
    accord.env["ACCORD_RPC_URL"] = f"http://127.0.0.1:{port}/?key=secret"
    status = accord.json("devnet", "status")
    assert status["managed"] is False and status["answering"] is True
    assert status["chain_id"] == 31337 and status["block_number"] >= 1
    assert status["rpc_url"] == f"http://127.0.0.1:{port}"  # no key from the query
    said = " ".join(accord.run("devnet", "status").stdout.split())
    assert "accord manages no devnet here" in said and "secret" not in said, said

    accord.env["ACCORD_RPC_URL"] = f"http://127.0.0.1:{find_free_port()}"
    status = accord.json("devnet", "status")
    assert (status["answering"], status["block_number"]) == (False, None)
    del accord.env["ACCORD_RPC_URL"]
