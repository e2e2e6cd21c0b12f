"""A command that only reads never creates an accord home (nor an operator key in one): run in
an empty folder it says what is missing, or does its work from what it is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accord.ledger.signing import Ed25519Signer
from tests.accord_cli import cli_environ, run_accord

READS = [
    ("agent", "list"),
    ("agent", "show", "ada"),
    ("credential", "show", "urn:uuid:0"),
    ("audit", "task-0"),
    ("ledger", "verify"),
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a) for a in READS])
def test_a_read_in_an_empty_folder_creates_no_home(args: tuple[str, ...], tmp_path: Path) -> None:
    home = tmp_path / ".accord"
    done = run_accord(cli_environ(home), *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "there is no accord home" in done.stderr
    assert not home.exists()


def test_a_credential_is_checked_against_a_named_issuer_with_no_home(tmp_path: Path) -> None:
    """Held to the issuer named: a credential of another issuer is refused at that step (its
    proof checked first), and no home comes of it."""
    from tests.identity.test_credentials import OPERATOR, World

    credential = tmp_path / "vc.json"
    credential.write_text(json.dumps(World().issue()))
    home = tmp_path / ".accord"
    stranger = Ed25519Signer.generate().did
    done = run_accord(
        cli_environ(home), "credential", "verify", str(credential), "--issuer", stranger, "--json"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout) == {
        "valid": False,
        "step": "issuer",
        "reason": f"{OPERATOR.did} is not a trusted issuer",
    }
    assert not home.exists()


def test_with_no_home_and_no_issuer_named_the_credentials_service_must_vouch(
    tmp_path: Path,
) -> None:
    """With no home and no --issuer, only the service whose status list the credential names
    can say whom to trust: a credential naming no accord service's list is refused, saying to
    name the issuer; one that is no credential is refused at its format step."""
    from tests.identity.test_credentials import World

    credential = tmp_path / "vc.json"
    credential.write_text(json.dumps(World().issue()))
    home = tmp_path / ".accord"
    done = run_accord(cli_environ(home), "credential", "verify", str(credential))
    assert done.returncode == 1
    assert "name the issuer to trust with --issuer DID" in done.stderr
    credential.write_text("{}")
    done = run_accord(cli_environ(home), "credential", "verify", str(credential), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["step"] == "format"
    assert not home.exists()
