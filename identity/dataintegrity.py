"""W3C Data Integrity proofs with the `eddsa-jcs-2022` cryptosuite (VC DI EdDSA v1.0, §3.3).

Creating a proof, per the Recommendation:

1. `proof` = a copy of the options; when the document has `@context`, so does the proof.
2. The canonical proof configuration is JCS (RFC 8785) of that proof; the canonical document
   is JCS of the document without `proof`.
3. `hashData` = SHA-256(canonical proof configuration) || SHA-256(canonical document):
   the proof configuration's hash comes **first**.
4. `proofValue` = multibase base58btc ('z' + base58) of the Ed25519 signature of `hashData`.

Verifying reverses it: the proof configuration is the proof minus `proofValue`; when the proof
carries `@context`, the document's `@context` must start with it, and the document is hashed
with the proof's `@context`.

Everything here is a pure function of its arguments: no clock, no I/O, no randomness (Ed25519
is deterministic). `created` and `expires` are checked for form, not against a clock; resolving
`verificationMethod` to a key is the caller's job, except that a did:key verification method
must name the key passed in.

Errors: creating a proof from malformed input raises `ProofFormatError`. Verifying raises
`ProofFormatError` only when the document is not a JSON object at all; every other reason a
proof does not hold, malformed proofs included, raises `CredentialError` with step `"proof"`.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import base58
import nacl.exceptions
import nacl.signing

from accord.identity.errors import CredentialError, ProofFormatError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import CanonicalizationError, MalformedError
from accord.ledger.signing import base58btc_decode, public_key_from_did

PROOF_TYPE = "DataIntegrityProof"
CRYPTOSUITE = "eddsa-jcs-2022"
STEP = "proof"
"""The `CredentialError.step` of every verification failure raised here."""

MULTIBASE_BASE58BTC = "z"
SIGNATURE_SIZE = 64
KEY_SIZE = 32

_DATE_TIME_STAMP = re.compile(
    r"-?(?:[1-9][0-9]{3,}|0[0-9]{3})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:Z|[+-](?:(?:0[0-9]|1[0-3]):[0-5][0-9]|14:00))"
)
"""XML Schema 1.1 `dateTimeStamp`: a date-time that must carry its time zone."""

_STRING_OPTIONS = ("verificationMethod", "proofPurpose")
_OPTIONAL_STRING_OPTIONS = ("challenge", "nonce", "id")
_TIMESTAMP_OPTIONS = ("created", "expires")


# --- multibase base58btc ------------------------------------------------------------------


def multibase_b58(data: bytes) -> str:
    """Multibase base58btc text of `data`: 'z' followed by Bitcoin-alphabet base58."""
    return MULTIBASE_BASE58BTC + base58.b58encode(data).decode("ascii")


def from_multibase_b58(text: str) -> bytes:
    """The bytes of multibase base58btc `text`.

    Raises ProofFormatError when `text` is not a string, does not start with 'z', or is not
    base58 (Bitcoin alphabet).
    """
    if not isinstance(text, str) or not text.startswith(MULTIBASE_BASE58BTC):
        raise ProofFormatError("not multibase base58btc: it must be a string starting with 'z'")
    body = text[len(MULTIBASE_BASE58BTC) :]
    if not body:
        raise ProofFormatError("multibase base58btc text has no data after 'z'")
    try:
        return base58btc_decode(body)
    except ValueError as exc:
        raise ProofFormatError(f"not base58btc: {exc}") from exc


# --- the cryptosuite's transformation, configuration and hashing --------------------------


def canonical_document(document: Mapping[str, Any]) -> bytes:
    """JCS bytes of `document` without its `proof` (§3.3.3 Transformation).

    Raises ProofFormatError when the document has no RFC 8785 form.
    """
    unsecured = {key: value for key, value in document.items() if key != "proof"}
    try:
        return canonical_json(unsecured)
    except CanonicalizationError as exc:
        raise ProofFormatError(f"document cannot be canonicalized: {exc}") from exc


def proof_configuration(document: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The proof configuration `add_proof` signs: a copy of the validated `options`, with the
    document's `@context` when the document has one (§3.3.1 step 2).

    Raises ProofFormatError when the options are not those of an `eddsa-jcs-2022` proof (see
    `add_proof`).
    """
    _check_options(options)
    config = dict(options)
    if "@context" in document:
        config["@context"] = document["@context"]
    return config


def canonical_proof_configuration(config: Mapping[str, Any]) -> bytes:
    """JCS bytes of a proof configuration (§3.3.5); any `proofValue` is left out.

    Raises ProofFormatError when the configuration has no RFC 8785 form.
    """
    unsigned = {key: value for key, value in config.items() if key != "proofValue"}
    try:
        return canonical_json(unsigned)
    except CanonicalizationError as exc:
        raise ProofFormatError(f"proof configuration cannot be canonicalized: {exc}") from exc


def hash_data(canonical_config: bytes, canonical_doc: bytes) -> bytes:
    """§3.3.4 Hashing: SHA-256(proof configuration) || SHA-256(document), 64 bytes."""
    return hashlib.sha256(canonical_config).digest() + hashlib.sha256(canonical_doc).digest()


# --- create -------------------------------------------------------------------------------


def add_proof(
    document: Mapping[str, Any], signing_key: bytes, options: Mapping[str, Any]
) -> dict[str, Any]:
    """A new document: `document` plus an `eddsa-jcs-2022` `proof` signed with `signing_key`.

    `signing_key` is the 32-byte Ed25519 seed. `options` must hold `type`
    ("DataIntegrityProof"), `cryptosuite` ("eddsa-jcs-2022"), `verificationMethod` and
    `proofPurpose`; it may hold `created` and `expires` (XML Schema dateTimeStamp strings),
    `challenge`, `nonce`, `id` (strings), `domain` (a string or a list of strings) and any other
    member, all of which are signed. The inputs are not modified, and the result shares no
    mutable state with them.

    Raises ProofFormatError when `document` is not a JSON object or already has a `proof`
    (proof sets are not supported), when the options are malformed or carry a `proofValue`,
    when the seed is not 32 bytes, or when the document or options have no RFC 8785 form.
    """
    if not isinstance(document, Mapping):
        raise ProofFormatError("a document to sign must be a JSON object")
    if "proof" in document:
        raise ProofFormatError("the document already has a proof; proof sets are not supported")
    if not isinstance(signing_key, bytes | bytearray) or len(signing_key) != KEY_SIZE:
        raise ProofFormatError(f"an Ed25519 signing key is a {KEY_SIZE}-byte seed")
    if not isinstance(options, Mapping):
        raise ProofFormatError("proof options must be a JSON object")
    if "proofValue" in options:
        raise ProofFormatError("proof options must not carry a proofValue")
    config = proof_configuration(document, options)
    to_sign = hash_data(canonical_proof_configuration(config), canonical_document(document))
    signature = nacl.signing.SigningKey(bytes(signing_key)).sign(to_sign).signature
    secured = copy.deepcopy(dict(document))
    secured["proof"] = {**copy.deepcopy(config), "proofValue": multibase_b58(signature)}
    return secured


def _check_options(options: Mapping[str, Any]) -> None:
    """Raises ProofFormatError unless `options` describe an eddsa-jcs-2022 proof."""
    if options.get("type") != PROOF_TYPE:
        raise ProofFormatError(f"proof type must be {PROOF_TYPE!r}, not {options.get('type')!r}")
    if options.get("cryptosuite") != CRYPTOSUITE:
        raise ProofFormatError(
            f"cryptosuite must be {CRYPTOSUITE!r}, not {options.get('cryptosuite')!r}"
        )
    for name in _STRING_OPTIONS:
        if not isinstance(options.get(name), str) or not options[name]:
            raise ProofFormatError(f"proof options need a non-empty string {name!r}")
    for name in _OPTIONAL_STRING_OPTIONS:
        if name in options and not isinstance(options[name], str):
            raise ProofFormatError(f"proof option {name!r} must be a string")
    for name in _TIMESTAMP_OPTIONS:
        if name in options and not _is_timestamp(options[name]):
            raise ProofFormatError(f"proof option {name!r} must be an XML Schema dateTimeStamp")
    if "domain" in options and not _is_domain(options["domain"]):
        raise ProofFormatError("proof option 'domain' must be a string or a list of strings")


def _is_timestamp(value: object) -> bool:
    return isinstance(value, str) and _DATE_TIME_STAMP.fullmatch(value) is not None


def _is_domain(value: object) -> bool:
    if isinstance(value, str):
        return bool(value)
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, str) and item for item in value)
    )


# --- verify -------------------------------------------------------------------------------


def verify_proof(
    document: Mapping[str, Any],
    public_key: bytes,
    *,
    expected_purpose: str | None = None,
    challenge: str | None = None,
    domain: str | None = None,
) -> None:
    """Check the `eddsa-jcs-2022` proof of `document` against the Ed25519 `public_key`.

    When given, `expected_purpose` must equal the proof's `proofPurpose`, `challenge` its
    `challenge`, and `domain` its `domain` (or be one of them, when the proof lists several).

    Raises ProofFormatError when `document` is not a JSON object. Raises CredentialError with
    step "proof" for everything else: no proof, a proof set, a proof that is not an object, the
    wrong type or cryptosuite, missing or malformed members (`proofValue` must be multibase
    base58btc of 64 bytes), a purpose, challenge or domain other than the expected one, a proof
    `@context` the document's does not start with, a did:key verification method naming another
    key, a public key that is not 32 bytes, a document with no RFC 8785 form, or a signature
    that does not verify.
    """
    if not isinstance(document, Mapping):
        raise ProofFormatError("a secured document must be a JSON object")
    proof = _proof_of(document)
    _check_proof_members(proof)
    _check_expectations(proof, expected_purpose, challenge, domain)
    signature = _signature_of(proof)
    key = _key_for(proof, public_key)

    unsecured = {name: value for name, value in document.items() if name != "proof"}
    if "@context" in proof:
        if not _starts_with(document.get("@context"), proof["@context"]):
            _fail("the document's @context does not start with the proof's @context")
        unsecured["@context"] = proof["@context"]
    try:
        to_verify = hash_data(canonical_proof_configuration(proof), canonical_document(unsecured))
    except ProofFormatError as exc:
        raise CredentialError(STEP, str(exc)) from exc
    try:
        nacl.signing.VerifyKey(key).verify(to_verify, signature)
    except nacl.exceptions.BadSignatureError:
        _fail("the signature does not verify with the given public key")


def _fail(reason: str) -> NoReturn:
    raise CredentialError(STEP, reason)


def _proof_of(document: Mapping[str, Any]) -> Mapping[str, Any]:
    if "proof" not in document:
        _fail("the document has no proof")
    proof = document["proof"]
    if isinstance(proof, list):
        _fail("proof sets (a list of proofs) are not supported")
    if not isinstance(proof, Mapping):
        _fail("the proof is not a JSON object")
    return proof


def _check_proof_members(proof: Mapping[str, Any]) -> None:
    if proof.get("type") != PROOF_TYPE:
        _fail(f"proof type is {proof.get('type')!r}, not {PROOF_TYPE!r}")
    if proof.get("cryptosuite") != CRYPTOSUITE:
        _fail(f"cryptosuite is {proof.get('cryptosuite')!r}, not {CRYPTOSUITE!r}")
    for name in (*_STRING_OPTIONS, "proofValue"):
        if not isinstance(proof.get(name), str) or not proof[name]:
            _fail(f"the proof has no string {name!r}")
    for name in _OPTIONAL_STRING_OPTIONS:
        if name in proof and not isinstance(proof[name], str):
            _fail(f"the proof's {name!r} is not a string")
    for name in _TIMESTAMP_OPTIONS:
        if name in proof and not _is_timestamp(proof[name]):
            _fail(f"the proof's {name!r} is not an XML Schema dateTimeStamp")
    if "domain" in proof and not _is_domain(proof["domain"]):
        _fail("the proof's 'domain' is not a string or a list of strings")


def _check_expectations(
    proof: Mapping[str, Any], purpose: str | None, challenge: str | None, domain: str | None
) -> None:
    if purpose is not None and proof["proofPurpose"] != purpose:
        _fail(f"proof purpose is {proof['proofPurpose']!r}, expected {purpose!r}")
    if challenge is not None and proof.get("challenge") != challenge:
        _fail("the proof's challenge is not the expected one")
    if domain is not None:
        stated = proof.get("domain")
        domains = stated if isinstance(stated, list) else [stated]
        if domain not in domains:
            _fail(f"the proof's domain is {stated!r}, expected {domain!r}")


def _signature_of(proof: Mapping[str, Any]) -> bytes:
    try:
        signature = from_multibase_b58(proof["proofValue"])
    except ProofFormatError as exc:
        raise CredentialError(STEP, f"proofValue: {exc}") from exc
    if len(signature) != SIGNATURE_SIZE:
        _fail(f"proofValue holds {len(signature)} bytes, not a {SIGNATURE_SIZE}-byte signature")
    return signature


def _key_for(proof: Mapping[str, Any], public_key: bytes) -> bytes:
    if not isinstance(public_key, bytes | bytearray) or len(public_key) != KEY_SIZE:
        _fail(f"an Ed25519 public key has {KEY_SIZE} bytes")
    method: str = proof["verificationMethod"]
    if method.startswith("did:key:"):
        try:
            named = public_key_from_did(method.partition("#")[0])
        except MalformedError as exc:
            raise CredentialError(STEP, f"verificationMethod: {exc}") from exc
        if named != bytes(public_key):
            _fail("the did:key verification method names another key")
    return bytes(public_key)


def _starts_with(document_context: object, proof_context: object) -> bool:
    """True when the document's @context begins with every value of the proof's, in order."""
    doc = document_context if isinstance(document_context, list) else [document_context]
    prf = proof_context if isinstance(proof_context, list) else [proof_context]
    return document_context is not None and doc[: len(prf)] == prf
