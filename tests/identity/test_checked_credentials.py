"""What a process remembers of the status lists and the credentials it verified
(`CheckedCredentials`): at most `ttl` seconds, forgotten at once on its own revocation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from accord.identity.credentials import VerifiedCredential
from accord.identity.errors import CredentialError
from accord.identity.issuance import STATUS_RECHECK_S, CheckedCredentials
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.settings import Settings

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def claims(valid_until: datetime) -> VerifiedCredential:
    return VerifiedCredential(
        id="urn:uuid:1",
        issuer="did:key:issuer",
        subject="did:key:agent",
        capability="arithmetic",
        earned=4,
        possible=5,
        exam_size=5,
        transcript="accord:ledger:log#1",
        seed_commitment="00",
        valid_from=NOW - timedelta(days=1),
        valid_until=valid_until,
        status_entries=(),
        document={},
    )


def test_lists_and_verifications_are_remembered_for_ttl_seconds_only() -> None:
    reads: list[str] = []

    def lookup(url: str) -> dict[str, Any]:
        reads.append(url)
        if url == "missing":
            raise KeyError(url)
        return {"url": url, "read": len(reads)}

    ticks = Ticks()
    checked = CheckedCredentials(lookup, ttl=2.0, clock=ticks)
    assert (
        checked.status_lookup("list") == checked.status_lookup("list") == {"url": "list", "read": 1}
    )
    with pytest.raises(KeyError):  # a missing list is asked again every time
        checked.status_lookup("missing")
    with pytest.raises(KeyError):
        checked.status_lookup("missing")
    ticks.now += 2.0
    assert checked.status_lookup("list")["read"] == 4
    assert reads == ["list", "missing", "missing", "list"]

    runs: list[int] = []

    def check(status_lookup: Any) -> VerifiedCredential:
        status_lookup("list")
        runs.append(1)
        return claims(NOW + timedelta(days=1))

    document = {"id": "urn:uuid:1"}
    verified = checked.verify(document, NOW, check, ("did:key:agent", "arithmetic"))
    assert checked.verify(dict(document), NOW, check, ("did:key:agent", "arithmetic")) is verified
    assert len(runs) == 1
    checked.verify(document, NOW, check, ("did:key:agent", "extraction"))  # asked otherwise
    assert len(runs) == 2
    ticks.now += 1.9
    checked.verify(document, NOW, check, ("did:key:agent", "arithmetic"))
    assert len(runs) == 2
    ticks.now += 0.1  # ttl reached: the list is read and the document checked again
    checked.verify(document, NOW, check, ("did:key:agent", "arithmetic"))
    assert len(runs) == 3 and reads[-1] == "list"
    checked.forget()
    checked.verify(document, NOW, check, ("did:key:agent", "arithmetic"))
    assert len(runs) == 4


def test_a_remembered_credential_is_checked_again_once_it_expires() -> None:
    ticks = Ticks()
    checked = CheckedCredentials(lambda url: {}, ttl=60.0, clock=ticks)
    ends = NOW + timedelta(seconds=1)

    def check(_lookup: Any) -> VerifiedCredential:
        if now >= ends:
            raise CredentialError("validity", "expired")
        return claims(ends)

    now = NOW
    checked.verify({"id": "x"}, now, check, None)
    now = ends  # still within ttl, but past validUntil: not taken from memory
    with pytest.raises(CredentialError, match="expired"):
        checked.verify({"id": "x"}, now, check, None)


def test_a_failed_verification_is_not_remembered() -> None:
    outcomes: list[VerifiedCredential | CredentialError] = [
        CredentialError("revocation", "revoked"),
        claims(NOW + timedelta(days=1)),
    ]

    def check(_lookup: Any) -> VerifiedCredential:
        outcome = outcomes.pop(0)
        if isinstance(outcome, CredentialError):
            raise outcome
        return outcome

    checked = CheckedCredentials(lambda url: {}, clock=Ticks())
    with pytest.raises(CredentialError):
        checked.verify({"id": "x"}, NOW, check, None)
    assert checked.verify({"id": "x"}, NOW, check, None).capability == "arithmetic"


@pytest.fixture
def two_processes(tmp_path: Path) -> tuple[Onboarding, Onboarding]:
    """Two onboardings over one home and database, as two service processes hold them."""
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    return open_onboarding(settings), open_onboarding(settings)


def test_a_revocation_elsewhere_is_seen_within_the_recheck_time(
    two_processes: tuple[Onboarding, Onboarding],
) -> None:
    here, there = two_processes
    agent = here.registry.new_agent("ref", now=NOW)
    (outcome,) = here.onboard(agent, ["arithmetic"], item_count=4)
    assert outcome.credential_id is not None and outcome.credential_path is not None
    document = json.loads(outcome.credential_path.read_text())
    ticks = Ticks()
    there.issuer.checked = CheckedCredentials(there.status_lists.status_lookup, clock=ticks)
    there.verify(document)
    here.revoke(outcome.credential_id, "key compromised")
    with pytest.raises(CredentialError) as raised:  # the revoking process: at once
        here.verify(document)
    assert raised.value.step == "revocation"
    there.verify(document)  # the other process remembers its check for a while ...
    # ... but its row says so at once (what bids read) ...
    [row] = there.credentials_of(agent.did)
    assert row["revoked_at"] is not None
    # ... and its verification fails within STATUS_RECHECK_S
    ticks.now += STATUS_RECHECK_S
    with pytest.raises(CredentialError) as raised:
        there.verify(document)
    assert raised.value.step == "revocation"
