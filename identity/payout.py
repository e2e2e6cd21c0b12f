"""Binding a secp256k1 payout address to a DID with two signatures, one from each key.

The binding statement names the DID, the address (EIP-55 checksummed), the chain, a nonce and
the time:

    {"type": "PayoutAddressBinding", "did": "did:key:z6Mk…", "address": "0xAbC…",
     "chainId": 31337, "nonce": "…", "issuedAt": "2026-01-01T00:00:00Z"}

Both keys sign the same bytes, `message = JCS(statement)` (RFC 8785):

- the DID key with **raw Ed25519 over those bytes** (`didSignature`, multibase base58btc,
  'z…'). No Data Integrity proof is used, so the two signatures provably cover one message.
  The bytes cannot be mistaken for anything else the DID key signs: ledger events have other
  members, and Data Integrity proofs sign 64 bytes of hashes, never JSON;
- the Ethereum key with **EIP-191 `personal_sign`** (`encode_defunct(primitive=message)`:
  "\\x19Ethereum Signed Message:\\n" + length + message) over the very same bytes
  (`addressSignature`, 0x-hex of r || s || v, 65 bytes). Wallets show the JSON in clear.

A binding is `{"statement": …, "didSignature": …, "addressSignature": …}`. Either key holder can
sign on its own (`sign_statement_with_did`, `sign_statement_with_address`) and `assemble_binding`
puts the parts together. A binding with only one signature is refused, so neither someone with
the DID key alone nor someone with a wallet alone can redirect an agent's pay. Which binding of
a DID is current (for example the latest `issuedAt`) is for the caller to decide.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount


from accord.identity.dataintegrity import from_multibase_b58, multibase_b58
from accord.identity.errors import BindingError, ProofFormatError
from accord.identity.status import format_timestamp, parse_timestamp
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import CanonicalizationError, MalformedError, SignatureError
from accord.ledger.signing import Ed25519Signer, verify_signature

BINDING_TYPE = "PayoutAddressBinding"
STATEMENT_KEYS = frozenset({"type", "did", "address", "chainId", "nonce", "issuedAt"})
ETH_SIGNATURE_SIZE = 65


def binding_statement(
    did: str, address: str, chain_id: int, nonce: str, issued_at: datetime
) -> dict[str, Any]:
    """The statement binding `address` (any case; stored EIP-55 checksummed) to `did` on
    `chain_id`. Raises BindingError for an address that is not 20 bytes of hex, a DID that is
    not a did:key, a non-positive chain id, an empty nonce, or a naive `issued_at`.
    """
    if not isinstance(address, str) or not re.fullmatch(r"0x[0-9a-fA-F]{40}", address):
        raise BindingError(f"{address!r} is not an Ethereum address")
    try:
        issued = format_timestamp(issued_at)
    except ValueError as exc:
        raise BindingError(str(exc)) from exc
    statement = {
        "type": BINDING_TYPE,
        "did": did,
        "address": _checksum(address),
        "chainId": chain_id,
        "nonce": nonce,
        "issuedAt": issued,
    }
    _check_statement(statement)
    return statement


def binding_message(statement: Mapping[str, Any]) -> bytes:
    """The bytes both keys sign: JCS of the statement. Raises BindingError when the statement
    is malformed."""
    _check_statement(statement)
    try:
        return canonical_json(dict(statement))
    except CanonicalizationError as exc:
        raise BindingError(f"the statement has no canonical form: {exc}") from exc


def sign_statement_with_did(statement: Mapping[str, Any], signer: Ed25519Signer) -> str:
    """The DID key's signature of the statement: multibase base58btc of raw Ed25519 over
    `binding_message`. Raises BindingError when the statement is malformed or names another
    DID."""
    if statement.get("did") != signer.did:
        raise BindingError(f"the statement binds {statement.get('did')!r}, not {signer.did}")
    return multibase_b58(signer.sign(binding_message(statement)))


def sign_statement_with_address(statement: Mapping[str, Any], account: LocalAccount) -> str:
    """The Ethereum key's EIP-191 `personal_sign` of `binding_message`, as 0x-hex (65 bytes).
    Raises BindingError when the statement is malformed or names another address."""
    if statement.get("address") != account.address:
        raise BindingError(
            f"the statement binds {statement.get('address')!r}, not {account.address}"
        )
    from eth_account.messages import encode_defunct

    signed = account.sign_message(encode_defunct(primitive=binding_message(statement)))
    return "0x" + bytes(signed.signature).hex()


def assemble_binding(
    statement: Mapping[str, Any], did_signature: str, address_signature: str
) -> dict[str, Any]:
    """The binding document from a statement and its two signatures (not verified here)."""
    return {
        "statement": dict(statement),
        "didSignature": did_signature,
        "addressSignature": address_signature,
    }


def bind_payout_address(
    did_signer: Ed25519Signer,
    account: LocalAccount,
    chain_id: int,
    nonce: str,
    now: datetime,
) -> dict[str, Any]:
    """A binding of `account`'s address to `did_signer`'s DID, signed by both keys.

    Raises BindingError for a non-positive chain id, an empty nonce or a naive `now`.
    """
    statement = binding_statement(did_signer.did, account.address, chain_id, nonce, now)
    return assemble_binding(
        statement,
        sign_statement_with_did(statement, did_signer),
        sign_statement_with_address(statement, account),
    )


def verify_binding(binding: Mapping[str, Any], *, chain_id: int | None = None) -> tuple[str, str]:
    """Check both signatures of `binding`; returns (did, checksummed address).

    Raises BindingError when the binding or its statement is malformed, when either signature
    is missing, when the DID signature does not verify with the DID's key, when the address
    signature cannot be recovered or recovers another address, or (when `chain_id` is given)
    when the statement is for another chain.
    """
    if not isinstance(binding, Mapping):
        _fail("a payout binding is a JSON object")
    statement = binding.get("statement")
    if not isinstance(statement, Mapping):
        _fail("the binding has no statement")
    message = binding_message(statement)
    did_signature = binding.get("didSignature")
    address_signature = binding.get("addressSignature")
    if not did_signature:
        _fail("the binding is not signed by the DID key")
    if not address_signature:
        _fail("the binding is not signed by the address's key")
    if chain_id is not None and statement["chainId"] != chain_id:
        _fail(f"the binding is for chain {statement['chainId']}, not {chain_id}")

    did: str = statement["did"]
    address: str = statement["address"]
    try:
        verify_signature(did, message, from_multibase_b58(did_signature))
    except (SignatureError, MalformedError, ProofFormatError) as exc:
        _fail(f"the DID signature does not verify: {exc}")

    raw = _hex_signature(address_signature)
    from eth_account import Account  # here: eth_account is slow to import, and rarely needed
    from eth_account.messages import encode_defunct

    try:
        recovered = Account.recover_message(encode_defunct(primitive=message), signature=raw)
    except Exception as exc:  # eth-keys raises several types for unrecoverable signatures
        _fail(f"the address signature cannot be recovered: {type(exc).__name__}: {exc}")
    if recovered != address:
        _fail(f"the address signature is by {recovered}, not the bound address {address}")
    return did, address


def _checksum(address: str) -> str:
    """The EIP-55 form of a 0x address (eth_utils, imported when needed)."""
    from eth_utils.address import to_checksum_address

    return str(to_checksum_address(address))


def _hex_signature(text: object) -> bytes:
    if not isinstance(text, str) or not re.fullmatch(r"0x[0-9a-fA-F]{130}", text):
        _fail(f"the address signature is not 0x-hex of {ETH_SIGNATURE_SIZE} bytes")
    return bytes.fromhex(text[2:])


def _check_statement(statement: Mapping[str, Any]) -> None:
    if not isinstance(statement, Mapping) or set(statement) != STATEMENT_KEYS:
        _fail(f"a binding statement has exactly the members {sorted(STATEMENT_KEYS)}")
    if statement["type"] != BINDING_TYPE:
        _fail(f"the statement's type is not {BINDING_TYPE!r}")
    did = statement["did"]
    if not isinstance(did, str) or not did.startswith("did:key:z"):
        _fail("the statement's did must be a did:key")
    address = statement["address"]
    if not isinstance(address, str) or _checksum(address) != address:
        _fail("the statement's address must be an EIP-55 checksummed address")
    chain = statement["chainId"]
    if isinstance(chain, bool) or not isinstance(chain, int) or chain <= 0:
        _fail("the statement's chainId must be a positive integer")
    if not isinstance(statement["nonce"], str) or not statement["nonce"]:
        _fail("the statement's nonce must be a non-empty string")
    try:
        parse_timestamp(statement["issuedAt"])
    except ValueError as exc:
        _fail(f"issuedAt: {exc}")


def _fail(reason: str) -> NoReturn:
    raise BindingError(reason)
