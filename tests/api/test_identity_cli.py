"""`accord capability|agent|credential` in a subprocess with its own ACCORD_HOME (no chain)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from accord.identity.challenges import get_capability, validate_input, validate_output
from tests.accord_cli import AccordCli


def state(accord: AccordCli) -> str:
    """A digest of everything under ACCORD_HOME except SQLite's WAL bookkeeping."""
    digest = hashlib.sha256()
    with sqlite3.connect(accord.home / "accord.db") as db:
        for table in ("identity_agents", "identity_credentials", "ledger_entries"):
            digest.update(repr(db.execute(f"SELECT * FROM {table}").fetchall()).encode())
    for path in sorted(accord.home.rglob("*")):
        if path.is_file() and not path.name.startswith("accord.db"):
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def accord(tmp_path: Path) -> AccordCli:
    """`accord` with no devnet: these commands need no chain."""
    return AccordCli(tmp_path / "home")


def test_capability_list(accord: AccordCli) -> None:
    rows = accord.json("capability", "list")
    assert {row["name"] for row in rows} == {"arithmetic", "python", "extraction", "retrieval"}
    for row in rows:
        assert row["input_schema"]["type"] == "object"
        assert "output_schema" in row


def test_capability_show_prints_the_skill(accord: AccordCli) -> None:
    shown = accord.json("capability", "show", "arithmetic")
    assert set(shown) == {
        "name",
        "description",
        "version",
        "input_schema",
        "output_schema",
        "example",
    }
    assert shown["name"] == "arithmetic"
    assert shown["example"] == {
        "input": {"kind": "figures", "figures": ["120.50", "43.19"], "operation": "sum"},
        "output": "163.69",
    }
    validate_input("arithmetic", shown["example"]["input"])
    validate_output("arithmetic", shown["example"]["output"])
    assert shown["input_schema"] == get_capability("arithmetic").input_schema
    human = accord.run("capability", "show", "extraction").stdout
    for heading in ("input schema", "output schema", "example input", "example output"):
        assert heading in human
    assert '"$schema": "https://json-schema.org/draft/2020-12/schema"' in human
    assert '"issue_date": "2031-03-14"' in human
    unknown = accord.run("capability", "show", "juggling", check=2)
    message = " ".join(unknown.stderr.split())
    assert "unknown capability 'juggling'" in message and "Traceback" not in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


def test_onboard_show_verify_revoke(accord: AccordCli, tmp_path: Path) -> None:
    agent = accord.json("agent", "new", "alice")
    assert agent["did"].startswith("did:key:z6Mk")
    done = accord.json("agent", "onboard", "alice", "--capability", "arithmetic", "--items", "5")
    (result,) = done["results"]
    assert result["passed"] and result["credential_id"].startswith("urn:uuid:")
    shown = accord.json("agent", "show", agent["did"])
    assert [c["capability"] for c in shown["credentials"]] == ["arithmetic"]
    assert shown["custody"] == "hosted"  # `agent new` keeps its key in this home
    assert accord.json("credential", "show", result["credential_id"])["revoked_at"] is None
    file = result["credential_file"]
    assert accord.json("credential", "verify", file)["valid"] is True
    accord.json("credential", "revoke", result["credential_id"], "--reason", "test")
    verdict = accord.json("credential", "verify", file, check=1)
    assert verdict == {"valid": False, "step": "revocation", "reason": "revoked"}
    human = accord.run("agent", "onboard", "alice", "-c", "retrieval", "--items", "3")
    assert "retrieval: passed" in human.stdout


def test_a_random_agent_fails_onboarding(accord: AccordCli) -> None:
    accord.json("agent", "new", "guess", "--runtime", "random")
    done = accord.json("agent", "onboard", "guess", "-c", "arithmetic", check=1)
    assert done["results"][0]["passed"] is False
    assert done["results"][0]["credential_id"] is None


def test_bad_input_is_refused_clearly_and_changes_nothing(
    accord: AccordCli, tmp_path: Path
) -> None:
    accord.json("agent", "new", "alice")
    before = state(accord)
    bad_file = tmp_path / "bad.json"
    bad_file.write_text("{not json")
    cases = [
        (("agent", "new", "alice"), "already exists"),
        (("agent", "new", "Bad Name"), "agent name"),
        (("agent", "new", "bob", "--runtime", "telepathy"), "unknown runtime"),
        (("agent", "new", "bob", "--runtime", "command"), "needs --command"),
        (("agent", "new", "bob", "--runtime", "command", "--command", "nope-xyz"), "not found"),
        (("agent", "show", "nobody"), "no agent"),
        (("agent", "onboard", "nobody", "-c", "arithmetic"), "no agent"),
        (("agent", "onboard", "alice", "-c", "juggling"), "unknown capability"),
        (("agent", "onboard", "alice", "-c", "arithmetic", "--items", "0"), "--items"),
        (("credential", "show", "urn:uuid:nope"), "no credential"),
        (("credential", "revoke", "urn:uuid:nope", "--reason", "x"), "no credential"),
        (("credential", "verify", str(bad_file)), "cannot read"),
        (("credential", "verify", str(tmp_path / "missing.json")), "cannot read"),
    ]
    for args, message in cases:
        result = accord.run(*args, check=2)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert state(accord) == before
