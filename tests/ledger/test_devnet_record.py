"""The devnet is remembered: `accord devnet up` records its port, RPC URL and identity in
ACCORD_HOME; later commands find it without ACCORD_DEVNET_PORT; and a chain whose id, history
or registry code is not the recorded one is named as such by `ledger verify` and `audit`
(never read as a log whose anchors are missing). `accord` runs in a subprocess on real anvil."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accord.ledger.devnet import (
    ChainMismatchError,
    Devnet,
    DevnetError,
    DevnetRecord,
    check_record,
    find_free_port,
    read_record,
    rpc_call,
)
from tests.accord_cli import AccordCli

pytestmark = pytest.mark.devnet


def _home(accord: AccordCli) -> Path:
    return Path(accord.env["ACCORD_HOME"])


def _anchored_log(accord: AccordCli) -> dict[str, object]:
    up = accord.json("devnet", "up")
    for n in range(3):
        accord.run("ledger", "append", "--kind", "note.added", "--body", json.dumps({"n": n}))
    accord.run("ledger", "append", "--kind", "task.posted", "--subject", "task-1")
    assert accord.json("ledger", "anchor")["status"] == "confirmed"
    return up


def test_later_commands_find_the_recorded_devnet_without_the_port(accord: AccordCli) -> None:
    port = int(accord.env["ACCORD_DEVNET_PORT"])
    up = _anchored_log(accord)
    record = read_record(_home(accord) / "devnet.json")
    assert record is not None
    assert (record.port, record.rpc_url) == (port, f"http://127.0.0.1:{port}")
    assert (record.chain_id, record.registry) == (up["chain_id"], up["registry"])
    assert record.registry_code_hash is not None and record.block_hash.startswith("0x")

    del accord.env["ACCORD_DEVNET_PORT"]  # later commands: only the record says where
    status = accord.json("devnet", "status")
    assert status["running"] is True and status["port"] == port
    assert status["recorded"] == record.to_json()
    assert accord.json("ledger", "verify")["verdict"] == "PASS"
    again = accord.json("devnet", "up")
    assert again["reused"] is True and again["rpc_url"] == record.rpc_url


def test_a_devnet_started_afresh_is_named_another_history(accord: AccordCli) -> None:
    _anchored_log(accord)
    accord.run("devnet", "down")
    (_home(accord) / "devnet" / "state.json").unlink()  # the chain's state is lost

    refused = accord.run("devnet", "up", check=1)
    assert "another history" in refused.stderr and "devnet.json" in refused.stderr
    assert accord.json("devnet", "status")["running"] is False  # the refused start stopped it
    # An anvil started afresh all the same (outside `devnet up`) is named by the reads too.
    Devnet(_home(accord) / "devnet", int(accord.env["ACCORD_DEVNET_PORT"])).up()
    # under --json the error is a JSON object on stdout, not a report of missing anchors
    verify = accord.run("ledger", "verify", "--json", check=1)
    failure = json.loads(verify.stdout)
    assert set(failure) == {"error", "code"} and failure["code"] == 1
    assert "another history" in failure["error"] and "Traceback" not in verify.stderr
    audit = accord.run("audit", "task-1", "--json", check=1)
    assert "another history" in json.loads(audit.stdout)["error"]
    assert "Traceback" not in audit.stderr
    assert accord.json("ledger", "verify", "--offline")["verdict"] == "PASS"


def test_other_registry_code_and_another_chain_id_are_named(accord: AccordCli) -> None:
    up = _anchored_log(accord)
    rpc_url = str(up["rpc_url"])
    rpc_call(rpc_url, "anvil_setCode", params=[up["registry"], "0x6001600055"])
    verify = accord.run("ledger", "verify", check=1)
    assert "other code at the recorded registry" in verify.stderr
    audit = accord.run("audit", "task-1", check=1)
    assert "other code at the recorded registry" in audit.stderr

    rpc_call(rpc_url, "anvil_setChainId", params=[1337])
    verify = accord.run("ledger", "verify", check=1)
    assert "chain id 1337, not the recorded 31337" in verify.stderr


def test_check_record_names_the_first_difference(accord: AccordCli) -> None:
    up = accord.json("devnet", "up")
    record = read_record(_home(accord) / "devnet.json")
    assert record is not None
    check_record(record, str(up["rpc_url"]))
    for changed, what in (
        (DevnetRecord(**{**record.__dict__, "chain_id": 1}), "chain id"),
        (DevnetRecord(**{**record.__dict__, "block_hash": "0x" + "00" * 32}), "history"),
        (DevnetRecord(**{**record.__dict__, "block_number": 10**6}), "history"),
        (DevnetRecord(**{**record.__dict__, "registry_code_hash": "0x00"}), "registry code"),
    ):
        with pytest.raises(ChainMismatchError) as raised:
            check_record(changed, str(up["rpc_url"]))
        assert raised.value.what == what
    with pytest.raises(DevnetError, match="does not answer"):
        check_record(record, f"http://127.0.0.1:{find_free_port()}")


def test_a_malformed_record_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "devnet.json"
    path.write_text('{"port": "8545"}')
    with pytest.raises(DevnetError, match="malformed"):
        read_record(path)
    path.write_text("nope")
    with pytest.raises(DevnetError, match="not JSON"):
        read_record(path)
    assert read_record(tmp_path / "absent.json") is None
