"""Payout-address bindings: one statement, two signatures, both required."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import nacl.signing
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount

from accord.identity.dataintegrity import from_multibase_b58, multibase_b58
from accord.identity.errors import BindingError
from accord.identity.payout import (
    assemble_binding,
    bind_payout_address,
    binding_message,
    binding_statement,
    sign_statement_with_address,
    sign_statement_with_did,
    verify_binding,
)
from accord.ledger.canonical import canonical_json
from accord.ledger.signing import Ed25519Signer

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
CHAIN_ID = 31337
NONCE = "bnVuY2U"


def _signer(label: str) -> Ed25519Signer:
    return Ed25519Signer(hashlib.sha256(label.encode()).digest())


def _account(label: str) -> LocalAccount:
    account: LocalAccount = Account.from_key(hashlib.sha256(label.encode()).digest())
    return account


AGENT = _signer("agent")
THIEF = _signer("thief")
WALLET = _account("agent wallet")
THIEF_WALLET = _account("thief wallet")


def _binding() -> dict[str, Any]:
    return bind_payout_address(AGENT, WALLET, CHAIN_ID, NONCE, NOW)


def test_valid_binding_verifies() -> None:
    binding = _binding()
    assert verify_binding(binding) == (AGENT.did, WALLET.address)
    assert verify_binding(binding, chain_id=CHAIN_ID) == (AGENT.did, WALLET.address)


def test_both_keys_sign_the_jcs_bytes_of_the_statement() -> None:
    """Checked with PyNaCl and eth-account directly, not through identity.payout."""
    binding = _binding()
    statement = binding["statement"]
    assert statement == {
        "type": "PayoutAddressBinding",
        "did": AGENT.did,
        "address": WALLET.address,
        "chainId": CHAIN_ID,
        "nonce": NONCE,
        "issuedAt": "2026-03-01T12:00:00Z",
    }
    message = canonical_json(statement)
    assert binding_message(statement) == message
    assert message.startswith(b'{"address":"0x')
    nacl.signing.VerifyKey(AGENT.public_key).verify(
        message, from_multibase_b58(binding["didSignature"])
    )
    recovered = Account.recover_message(
        encode_defunct(text=message.decode("utf-8")), signature=binding["addressSignature"]
    )
    assert recovered == WALLET.address


def test_lowercase_address_is_stored_checksummed() -> None:
    statement = binding_statement(AGENT.did, WALLET.address.lower(), CHAIN_ID, NONCE, NOW)
    assert statement["address"] == WALLET.address


def test_signed_only_by_the_did_is_refused() -> None:
    binding = _binding()
    del binding["addressSignature"]
    with pytest.raises(BindingError, match="address's key"):
        verify_binding(binding)
    binding["addressSignature"] = ""
    with pytest.raises(BindingError, match="address's key"):
        verify_binding(binding)


def test_signed_only_by_the_wallet_is_refused() -> None:
    """A thief with a wallet alone binds their address to the agent's DID: refused."""
    statement = binding_statement(AGENT.did, THIEF_WALLET.address, CHAIN_ID, NONCE, NOW)
    binding = {
        "statement": statement,
        "addressSignature": sign_statement_with_address(statement, THIEF_WALLET),
    }
    with pytest.raises(BindingError, match="not signed by the DID key"):
        verify_binding(binding)


def test_did_signature_by_another_key_is_refused() -> None:
    statement = binding_statement(AGENT.did, THIEF_WALLET.address, CHAIN_ID, NONCE, NOW)
    binding = assemble_binding(
        statement,
        multibase_b58(THIEF.sign(binding_message(statement))),
        sign_statement_with_address(statement, THIEF_WALLET),
    )
    with pytest.raises(BindingError, match="DID signature does not verify"):
        verify_binding(binding)


def test_swapped_address_is_refused() -> None:
    """The DID signs a statement naming the thief's address, but the wallet that co-signs is
    the agent's: the recovered signer is not the bound address."""
    statement = binding_statement(AGENT.did, THIEF_WALLET.address, CHAIN_ID, NONCE, NOW)
    wallet_signature = WALLET.sign_message(encode_defunct(primitive=binding_message(statement)))
    binding = assemble_binding(
        statement,
        sign_statement_with_did(statement, AGENT),
        "0x" + bytes(wallet_signature.signature).hex(),
    )
    with pytest.raises(BindingError, match="not the bound address"):
        verify_binding(binding)


def _replace(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda binding: binding["statement"].__setitem__(name, value)


def _flip_hex(binding: dict[str, Any]) -> None:
    signature = binding["addressSignature"]
    binding["addressSignature"] = (
        signature[:10] + ("0" if signature[10] != "0" else "1") + (signature[11:])
    )


def _flip_b58(binding: dict[str, Any]) -> None:
    signature = binding["didSignature"]
    binding["didSignature"] = signature[:-1] + ("2" if signature[-1] != "2" else "3")


@pytest.mark.parametrize(
    "tamper",
    [
        _replace("address", THIEF_WALLET.address),
        _replace("did", THIEF.did),
        _replace("chainId", 1),
        _replace("nonce", "another"),
        _replace("issuedAt", "2027-03-01T12:00:00Z"),
        _replace("address", WALLET.address.lower()),
        _replace("extra", "member"),
        _replace("type", "Other"),
        _flip_hex,
        _flip_b58,
        lambda binding: binding.__setitem__("addressSignature", "0x1234"),
        lambda binding: binding.__setitem__("addressSignature", "0x" + "00" * 65),
        lambda binding: binding.__setitem__("didSignature", "not multibase"),
        lambda binding: binding.pop("statement"),
    ],
    ids=[
        "address",
        "did",
        "chainId",
        "nonce",
        "issuedAt",
        "lowercased address",
        "extra member",
        "type",
        "address signature bit",
        "did signature char",
        "short address signature",
        "zero address signature",
        "did signature not multibase",
        "no statement",
    ],
)
def test_tampered_binding_is_refused(tamper: Callable[[dict[str, Any]], None]) -> None:
    binding = _binding()
    tamper(binding)
    with pytest.raises(BindingError):
        verify_binding(binding)


def test_binding_for_another_chain_is_refused_when_a_chain_is_expected() -> None:
    with pytest.raises(BindingError, match="chain"):
        verify_binding(_binding(), chain_id=1)


def test_each_key_refuses_to_sign_a_statement_about_another() -> None:
    statement = binding_statement(AGENT.did, WALLET.address, CHAIN_ID, NONCE, NOW)
    with pytest.raises(BindingError):
        sign_statement_with_did(statement, THIEF)
    with pytest.raises(BindingError):
        sign_statement_with_address(statement, THIEF_WALLET)


@pytest.mark.parametrize(
    "arguments",
    [
        (AGENT.did, "0x1234", CHAIN_ID, NONCE, NOW),
        ("did:web:example.com", WALLET.address, CHAIN_ID, NONCE, NOW),
        (AGENT.did, WALLET.address, 0, NONCE, NOW),
        (AGENT.did, WALLET.address, CHAIN_ID, "", NOW),
        (AGENT.did, WALLET.address, CHAIN_ID, NONCE, datetime(2026, 1, 1)),
    ],
)
def test_statement_refuses_bad_arguments(arguments: tuple[Any, ...]) -> None:
    with pytest.raises(BindingError):
        binding_statement(*arguments)
