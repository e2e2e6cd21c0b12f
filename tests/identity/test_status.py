"""Status lists resolve: a credential's `statusListCredential` is a URL on the service, and an
independent verifier follows it over HTTP to a real uvicorn on 127.0.0.1, checks the list's
eddsa-jcs-2022 proof, decodes the bitstring and sees the revocation."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.identity.credentials import verify_credential
from accord.identity.errors import CredentialError
from accord.identity.onboarding import Onboarding, open_onboarding, status_list_url
from accord.identity.status import StatusList, verify_issuer_proof
from accord.ledger.chain import DEVNET_OPERATOR_KEY
from accord.ledger.devnet import find_free_port
from accord.ledger.service import Ledger
from accord.ledger.settings import DEFAULT_PUBLIC_URL, Settings
from accord.ledger.wiring import open_store, operator_signer
from accord.market.escrow import EscrowActions, MemoryEscrowChain, MemoryEscrowJournal, address_of
from accord.market.service import Market
from accord.market.wiring import ChainEscrow, MarketContext
from tests.identity.status_bits import set_bits
from tests.serving import serve


@dataclass
class Served:
    url: str
    onboarding: Onboarding
    settings: Settings


def _context(settings: Settings) -> MarketContext:
    store = open_store(settings)
    ledger = Ledger(store, operator_signer(settings), lambda: datetime.now(UTC), None)
    onboarding = open_onboarding(settings, ledger)
    escrow_chain = MemoryEscrowChain(address_of(DEVNET_OPERATOR_KEY))
    actions = EscrowActions(escrow_chain, MemoryEscrowJournal(), receipt_timeout=0)
    escrow = ChainEscrow(escrow_chain, actions, DEVNET_OPERATOR_KEY)
    return MarketContext(settings, onboarding, Market(ledger, onboarding, escrow), escrow)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home"), "ACCORD_PUBLIC_URL": url})
    context = _context(settings)
    app = create_app(settings, config=ApiConfig(rate=1000.0, burst=10_000.0), context=context)
    with serve(app, port):
        yield Served(url, context.onboarding, settings)


def fetch(url: str) -> Mapping[str, Any]:
    """What an independent verifier does: GET the URL the credential names, nothing else."""
    response = httpx.get(url, timeout=10, follow_redirects=False)
    response.raise_for_status()
    assert response.headers["content-type"].startswith("application/vc")
    document: Mapping[str, Any] = response.json()
    return document


def _issue(onboarding: Onboarding, name: str) -> tuple[str, dict[str, Any]]:
    agent = onboarding.registry.new_agent(name, now=datetime.now(UTC))
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=4)
    assert outcome.credential_id is not None and outcome.credential_path is not None
    return outcome.credential_id, json.loads(outcome.credential_path.read_text())


def test_the_public_url_is_a_setting_and_names_the_list() -> None:
    assert Settings.from_env({}).public_url == DEFAULT_PUBLIC_URL == "http://127.0.0.1:8600"
    settings = Settings.from_env({"ACCORD_PUBLIC_URL": "https://accord.example/"})
    assert settings.public_url == "https://accord.example"
    assert status_list_url(settings.public_url) == (
        "https://accord.example/credentials/status/revocation"
    )
    for bad in ("accord.example", "ftp://accord.example", "https://", "https://a.example/?x=1"):
        with pytest.raises(ValueError, match="ACCORD_PUBLIC_URL"):
            Settings.from_env({"ACCORD_PUBLIC_URL": bad})


def test_an_independent_verifier_follows_the_status_list_url_and_sees_a_revocation(
    served: Served,
) -> None:
    onboarding = served.onboarding
    credential_id, credential = _issue(onboarding, "ada")
    entry = credential["credentialStatus"]
    list_url = entry["statusListCredential"]
    assert list_url == f"{served.url}/credentials/status/revocation"
    index = int(entry["statusListIndex"])

    # the list the URL serves: signed by the credential's issuer, and the bit is clear
    listed = fetch(list_url)
    assert listed["id"] == list_url
    verify_issuer_proof(listed, credential["issuer"], "revocation")
    assert not StatusList.decode(listed["credentialSubject"]["encodedList"]).get(index)
    now = datetime.now(UTC)
    verified = verify_credential(
        credential, trusted_issuers={credential["issuer"]}, now=now, status_lookup=fetch
    )
    assert verified.id == credential_id

    onboarding.revoke(credential_id, "key compromised")
    listed = fetch(list_url)
    verify_issuer_proof(listed, credential["issuer"], "revocation")
    bits = StatusList.decode(listed["credentialSubject"]["encodedList"])
    assert set_bits(bits) == [index]
    with pytest.raises(CredentialError) as raised:
        verify_credential(
            credential,
            trusted_issuers={credential["issuer"]},
            now=datetime.now(UTC),
            status_lookup=fetch,
        )
    assert raised.value.step == "revocation" and raised.value.reason == "revoked"

    # a list whose signature no longer holds is refused by the same verifier
    forged = json.loads(json.dumps(listed))
    forged["credentialSubject"]["encodedList"] = StatusList.empty().encode()
    with pytest.raises(CredentialError, match="revocation"):
        verify_issuer_proof(forged, credential["issuer"], "revocation")


def test_the_list_is_served_at_its_path_whatever_host_it_is_reached_by(served: Served) -> None:
    missing = httpx.get(f"{served.url}/credentials/status/revocation", timeout=10)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    _issue(served.onboarding, "ada")
    via_localhost = served.url.replace("127.0.0.1", "localhost")
    document = fetch(f"{via_localhost}/credentials/status/revocation")
    assert document["id"] == f"{served.url}/credentials/status/revocation"


def test_credentials_issued_under_an_earlier_url_keep_verifying(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    earlier = open_onboarding(Settings.from_env({"ACCORD_HOME": home}))
    legacy_url = f"urn:accord:status:{earlier.ledger.log_id}:revocation"
    earlier.status_lists.url = legacy_url  # what credentials named before lists were served
    old_id, old = _issue(earlier, "old")
    assert old["credentialStatus"]["statusListCredential"] == legacy_url

    later = open_onboarding(
        Settings.from_env({"ACCORD_HOME": home, "ACCORD_PUBLIC_URL": "https://accord.example"})
    )
    new_id, new = _issue(later, "new")
    assert new["credentialStatus"]["statusListCredential"] == (
        "https://accord.example/credentials/status/revocation"
    )
    later.verify(old)
    later.verify(new)
    later.revoke(old_id, "retired")
    with pytest.raises(CredentialError, match="revoked"):
        later.verify(old)
    later.verify(new)
    later.revoke(new_id, "retired too")
    with pytest.raises(CredentialError, match="revoked"):
        later.verify(new)
    with pytest.raises(CredentialError, match="revoked"):
        later.verify(old)
    # both lists hold both bits: one bitstring behind every URL
    for url in (legacy_url, later.status_list_url):
        bits = StatusList.decode(later.status_lookup(url)["credentialSubject"]["encodedList"])
        assert len(set_bits(bits)) == 2
