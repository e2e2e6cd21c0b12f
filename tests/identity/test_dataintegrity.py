"""`accord.identity.dataintegrity` against the W3C `eddsa-jcs-2022` test vectors, and its failure
modes.

The vectors live in `vectors/eddsa-jcs-2022/`, copied verbatim from w3c/vc-di-eddsa (the
README there names path and commit of every file): `rec-2025/` is Appendix B.3 of the W3C
Recommendation of 15 May 2025; `editors-draft/` and `legacy-2023/` are other revisions of the
repository's `TestVectors/eddsa-jcs-2022/` folder. Nothing expected here is computed with
`accord.identity.dataintegrity`: `test_vector_files_are_self_consistent` guards the transcription
with plain `hashlib`, `base58` and PyNaCl, and everything else compares against the files.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import base58
import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.identity.dataintegrity import (
    add_proof,
    canonical_document,
    canonical_proof_configuration,
    from_multibase_b58,
    hash_data,
    multibase_b58,
    proof_configuration,
    verify_proof,
)
from accord.identity.errors import CredentialError, ProofFormatError
from accord.ledger.errors import MalformedError
from accord.ledger.signing import Ed25519Signer, did_key_from_public_key, public_key_from_did

VECTORS = Path(__file__).parent / "vectors" / "eddsa-jcs-2022"


def _text(name: str) -> str:
    return (VECTORS / name).read_text(encoding="utf-8")


def _json(name: str) -> Any:
    return json.loads(_text(name))


# --- the Recommendation's vector (Appendix B.3, Examples 29-39) ---------------------------

KEY_PAIR = _json("rec-2025/keyPair.json")
UNSIGNED = _json("rec-2025/unsignedCredential.json")
CANON_DOC = _text("rec-2025/canonDocJCS.txt").encode("utf-8")
DOC_HASH = _text("rec-2025/docHashJCS.txt")
PROOF_CONFIG = _json("rec-2025/proofConfigJCS.json")
PROOF_CANON = _text("rec-2025/proofCanonJCS.txt").encode("utf-8")
PROOF_HASH = _text("rec-2025/proofHashJCS.txt")
COMBINED_HASH = _text("rec-2025/combinedHashJCS.txt")
SIG_HEX = _text("rec-2025/sigHexJCS.txt")
PROOF_VALUE = _text("rec-2025/sigBTC58JCS.txt")
SIGNED = _json("rec-2025/signedJCS.json")

# The secret key multibase is base58btc(0x80 0x26 || seed): multicodec `ed25519-priv`.
_SECRET = base58.b58decode(KEY_PAIR["privateKeyMultibase"][1:])
assert _SECRET[:2] == b"\x80\x26" and len(_SECRET) == 34
SEED = _SECRET[2:]
PUBLIC_KEY = bytes(nacl.signing.SigningKey(SEED).verify_key)

# The proof options as a caller passes them: the document's @context is added by add_proof.
OPTIONS = {key: value for key, value in PROOF_CONFIG.items() if key != "@context"}

DRAFT_CONFIG = _json("editors-draft/proofConfigJCS.json")
DRAFT_OPTIONS = {key: value for key, value in DRAFT_CONFIG.items() if key != "@context"}
DRAFT_SIGNED = _json("editors-draft/signedJCS.json")
DRAFT_SIG_HEX = _text("editors-draft/sigHexJCS.txt")
DRAFT_PROOF_VALUE = _text("editors-draft/sigBTC58JCS.txt")

LEGACY_SIGNED = _json("legacy-2023/signedJCS.json")
LEGACY_PROOF_VALUE = _text("legacy-2023/sigBTC58JCS.txt")


def _failure(document: Any, public_key: bytes = PUBLIC_KEY, /, **expect: Any) -> CredentialError:
    with pytest.raises(CredentialError) as caught:
        verify_proof(document, public_key, **expect)
    assert caught.value.step == "proof"
    assert caught.value.reason
    return caught.value


def _with_proof(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    tampered = copy.deepcopy(document)
    for name, value in changes.items():
        if value is None:
            tampered["proof"].pop(name, None)
        else:
            tampered["proof"][name] = value
    return tampered


# --- the vector files themselves ----------------------------------------------------------


def test_vector_files_are_self_consistent() -> None:
    """Guards the transcription with nothing but hashlib, base58 and PyNaCl."""
    assert hashlib.sha256(CANON_DOC).hexdigest() == DOC_HASH
    assert hashlib.sha256(PROOF_CANON).hexdigest() == PROOF_HASH
    assert COMBINED_HASH == PROOF_HASH + DOC_HASH
    assert "z" + base58.b58encode(bytes.fromhex(SIG_HEX)).decode() == PROOF_VALUE
    nacl.signing.VerifyKey(PUBLIC_KEY).verify(bytes.fromhex(COMBINED_HASH), bytes.fromhex(SIG_HEX))
    assert nacl.signing.SigningKey(SEED).sign(bytes.fromhex(COMBINED_HASH)).signature.hex() == (
        SIG_HEX
    )
    assert (
        KEY_PAIR["publicKeyMultibase"] == "z" + base58.b58encode(b"\xed\x01" + PUBLIC_KEY).decode()
    )
    assert SIGNED == {**UNSIGNED, "proof": {**PROOF_CONFIG, "proofValue": PROOF_VALUE}}
    assert DRAFT_SIGNED == {**UNSIGNED, "proof": {**DRAFT_CONFIG, "proofValue": DRAFT_PROOF_VALUE}}
    assert "z" + base58.b58encode(bytes.fromhex(DRAFT_SIG_HEX)).decode() == DRAFT_PROOF_VALUE
    assert LEGACY_SIGNED["proof"]["proofValue"] == LEGACY_PROOF_VALUE
    assert "@context" not in LEGACY_SIGNED["proof"]


# --- the Recommendation's vector, step by step --------------------------------------------


def test_public_key_from_the_published_multikey() -> None:
    """A did:key is `did:key:` + a Multikey: the published one reads as the published key."""
    assert public_key_from_did("did:key:" + KEY_PAIR["publicKeyMultibase"]) == PUBLIC_KEY


def test_canonical_document_is_the_published_bytes() -> None:
    assert canonical_document(UNSIGNED) == CANON_DOC
    assert canonical_document(SIGNED) == CANON_DOC  # the proof is left out


def test_proof_configuration_takes_the_documents_context() -> None:
    assert proof_configuration(UNSIGNED, OPTIONS) == PROOF_CONFIG
    assert proof_configuration(UNSIGNED, PROOF_CONFIG) == PROOF_CONFIG


def test_canonical_proof_configuration_is_the_published_bytes() -> None:
    config = proof_configuration(UNSIGNED, OPTIONS)
    assert canonical_proof_configuration(config) == PROOF_CANON
    assert canonical_proof_configuration(SIGNED["proof"]) == PROOF_CANON  # minus proofValue


def test_both_hashes_and_the_combined_hash_data() -> None:
    config = canonical_proof_configuration(proof_configuration(UNSIGNED, OPTIONS))
    doc = canonical_document(UNSIGNED)
    assert hashlib.sha256(config).hexdigest() == PROOF_HASH
    assert hashlib.sha256(doc).hexdigest() == DOC_HASH
    combined = hash_data(config, doc)
    assert combined.hex() == COMBINED_HASH
    assert combined[:32].hex() == PROOF_HASH  # the proof configuration's hash comes first


def test_add_proof_reproduces_the_published_proof_value_and_document() -> None:
    signed = add_proof(UNSIGNED, SEED, OPTIONS)
    assert signed["proof"]["proofValue"] == PROOF_VALUE
    assert from_multibase_b58(signed["proof"]["proofValue"]).hex() == SIG_HEX
    assert signed == SIGNED
    assert json.dumps(signed["proof"]) == json.dumps(SIGNED["proof"])  # same member order too


def test_add_proof_with_the_context_already_in_the_options() -> None:
    assert add_proof(UNSIGNED, SEED, PROOF_CONFIG) == SIGNED


def test_verify_proof_accepts_the_published_credential() -> None:
    verify_proof(SIGNED, PUBLIC_KEY)
    verify_proof(SIGNED, PUBLIC_KEY, expected_purpose="assertionMethod")
    verify_proof(SIGNED, public_key_from_did(SIGNED["proof"]["verificationMethod"].split("#")[0]))


def test_a_proof_value_with_whitespace_is_not_the_same_signature() -> None:
    """One signature, one proofValue: a trailing newline (stripped by the base58 package)
    would make a second byte form of the same signed document."""
    secured = {**SIGNED, "proof": {**SIGNED["proof"], "proofValue": PROOF_VALUE + "\n"}}
    with pytest.raises(CredentialError):
        verify_proof(secured, PUBLIC_KEY)


def test_multibase_helpers_on_the_published_signature() -> None:
    assert from_multibase_b58(PROOF_VALUE) == bytes.fromhex(SIG_HEX)
    assert multibase_b58(bytes.fromhex(SIG_HEX)) == PROOF_VALUE


# --- the other revisions of TestVectors/eddsa-jcs-2022 ------------------------------------


def test_editors_draft_vector_with_an_https_verification_method() -> None:
    signed = add_proof(UNSIGNED, SEED, DRAFT_OPTIONS)
    assert signed["proof"]["proofValue"] == DRAFT_PROOF_VALUE
    assert from_multibase_b58(DRAFT_PROOF_VALUE).hex() == DRAFT_SIG_HEX
    assert signed == DRAFT_SIGNED
    verify_proof(DRAFT_SIGNED, PUBLIC_KEY, expected_purpose="assertionMethod")


def test_legacy_vector_without_a_proof_context_still_verifies() -> None:
    verify_proof(LEGACY_SIGNED, PUBLIC_KEY, expected_purpose="assertionMethod")


def test_add_proof_no_longer_makes_the_legacy_proof() -> None:
    """Creating follows the Recommendation: the proof gets the document's @context."""
    options = {k: v for k, v in LEGACY_SIGNED["proof"].items() if k != "proofValue"}
    signed = add_proof(UNSIGNED, SEED, options)
    assert signed["proof"]["@context"] == UNSIGNED["@context"]
    assert signed["proof"]["proofValue"] == DRAFT_PROOF_VALUE != LEGACY_PROOF_VALUE


# --- verification failures: all CredentialError("proof", ...) ------------------------------


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d["credentialSubject"].__setitem__("alumniOf", "The School of Forgery"),
        lambda d: d["credentialSubject"].__setitem__("id", "did:example:mallory"),
        lambda d: d.__setitem__("validFrom", "2023-01-01T00:00:01Z"),
        lambda d: d.__setitem__("degree", "PhD"),
        lambda d: d.pop("description"),
        lambda d: d["type"].reverse(),
        lambda d: d["proof"].__setitem__("created", "2023-02-24T23:36:39Z"),
        lambda d: d["proof"].__setitem__("proofPurpose", "authentication"),
        lambda d: d["proof"].__setitem__("nonce", "added"),
    ],
    ids=[
        "claim",
        "subject",
        "validFrom",
        "added-claim",
        "removed-claim",
        "type-order",
        "proof-created",
        "proof-purpose",
        "proof-extra-member",
    ],
)
def test_tampered_document_fails(tamper: Any) -> None:
    for original in (SIGNED, DRAFT_SIGNED):
        tampered = copy.deepcopy(original)
        tamper(tampered)
        assert "signature" in _failure(tampered).reason


def test_tampered_https_verification_method_fails() -> None:
    tampered = _with_proof(DRAFT_SIGNED, verificationMethod="https://vc.example/issuers/5678#k2")
    assert "signature" in _failure(tampered).reason


@pytest.mark.parametrize("position", range(64))
def test_each_signature_byte_flipped_fails(position: int) -> None:
    signature = bytearray(bytes.fromhex(SIG_HEX))
    signature[position] ^= 0x01
    value = "z" + base58.b58encode(bytes(signature)).decode()
    assert "signature" in _failure(_with_proof(SIGNED, proofValue=value)).reason


def test_wrong_key_fails() -> None:
    other = Ed25519Signer(hashlib.sha256(b"someone else").digest()).public_key
    assert "signature" in _failure(DRAFT_SIGNED, other).reason  # https method: key not named
    assert "another key" in _failure(SIGNED, other).reason  # did:key method names the key


@pytest.mark.parametrize("public_key", [b"", PUBLIC_KEY[:31], PUBLIC_KEY + b"\x00"])
def test_public_key_of_the_wrong_size_fails(public_key: bytes) -> None:
    _failure(DRAFT_SIGNED, public_key)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("cryptosuite", "eddsa-rdfc-2022"),
        ("cryptosuite", "ecdsa-jcs-2019"),
        ("cryptosuite", None),
        ("type", "Ed25519Signature2020"),
        ("type", None),
    ],
)
def test_wrong_type_or_cryptosuite_fails(member: str, value: str | None) -> None:
    assert member in _failure(_with_proof(SIGNED, **{member: value})).reason


def test_missing_proof_fails() -> None:
    assert "no proof" in _failure(UNSIGNED).reason


@pytest.mark.parametrize("proof", [[], [{"type": "DataIntegrityProof"}], "z2Hn", 7, None])
def test_proof_that_is_not_one_object_fails(proof: Any) -> None:
    _failure({**UNSIGNED, "proof": proof})


@pytest.mark.parametrize(
    "value",
    [
        PROOF_VALUE[1:],  # no multibase prefix
        "u" + PROOF_VALUE[1:],  # another multibase prefix
        "Z" + PROOF_VALUE[1:],
        "z",
        "",
        PROOF_VALUE[:20] + "0" + PROOF_VALUE[21:],  # '0' is not base58btc
        PROOF_VALUE[:20] + "l" + PROOF_VALUE[21:],  # nor is 'l'
        PROOF_VALUE + "é",
        "z" + base58.b58encode(bytes.fromhex(SIG_HEX)[:63]).decode(),  # 63 bytes
        "z" + base58.b58encode(bytes.fromhex(SIG_HEX) + b"\x00").decode(),  # 65 bytes
        12345,
        ["z2Hn"],
    ],
    ids=[
        "no-prefix",
        "base64url-prefix",
        "capital-Z",
        "only-z",
        "empty",
        "zero",
        "ell",
        "non-ascii",
        "63-bytes",
        "65-bytes",
        "int",
        "list",
    ],
)
def test_proof_value_not_multibase_base58btc_of_64_bytes_fails(value: Any) -> None:
    _failure(_with_proof(SIGNED, proofValue=value))


@pytest.mark.parametrize("member", ["verificationMethod", "proofPurpose", "proofValue"])
def test_missing_required_member_fails(member: str) -> None:
    assert member in _failure(_with_proof(SIGNED, **{member: None})).reason


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("created", "2023-02-24 23:36:38Z"),
        ("created", "2023-02-24T23:36:38"),  # a dateTimeStamp carries its time zone
        ("created", "2023-13-24T23:36:38Z"),
        ("created", 1677281798),
        ("expires", "tomorrow"),
        ("challenge", 42),
        ("domain", 42),
        ("domain", []),
        ("verificationMethod", 7),
    ],
)
def test_malformed_proof_member_fails(member: str, value: Any) -> None:
    _failure(_with_proof(SIGNED, **{member: value}))


def test_wrong_purpose_fails() -> None:
    reason = _failure(SIGNED, expected_purpose="authentication").reason
    assert "authentication" in reason


def test_proof_context_must_prefix_the_documents() -> None:
    other_context = ["https://www.w3.org/ns/credentials/v2", "https://example.org/other/v1"]
    _failure({**copy.deepcopy(SIGNED), "@context": other_context})
    _failure(_with_proof(SIGNED, **{"@context": list(reversed(PROOF_CONFIG["@context"]))}))
    no_context = {k: v for k, v in copy.deepcopy(SIGNED).items() if k != "@context"}
    assert "@context" in _failure(no_context).reason


def test_document_that_cannot_be_canonicalized_fails() -> None:
    tampered = copy.deepcopy(SIGNED)
    tampered["credentialSubject"]["big"] = 2**60
    assert "canonical" in _failure(tampered).reason


@pytest.mark.parametrize("document", [[SIGNED], "signed", None, 7])
def test_verify_raises_proof_format_error_for_a_non_object(document: Any) -> None:
    with pytest.raises(ProofFormatError):
        verify_proof(document, PUBLIC_KEY)


# --- challenge, domain and the other options ----------------------------------------------

AUTH_OPTIONS = {
    "type": "DataIntegrityProof",
    "cryptosuite": "eddsa-jcs-2022",
    "verificationMethod": "https://vc.example/issuers/5678#key-1",
    "proofPurpose": "authentication",
    "created": "2024-05-01T12:00:00.123Z",
    "expires": "2024-05-01T12:05:00+02:00",
    "challenge": "c0ffee-1234",
    "domain": "accord.example",
    "nonce": "n-1",
}


def _auth_signed(**changes: Any) -> dict[str, Any]:
    return add_proof(UNSIGNED, SEED, {**AUTH_OPTIONS, **changes})


def test_challenge_domain_and_nonce_are_signed_and_checked() -> None:
    signed = _auth_signed()
    assert {k: signed["proof"][k] for k in AUTH_OPTIONS} == AUTH_OPTIONS
    verify_proof(
        signed,
        PUBLIC_KEY,
        expected_purpose="authentication",
        challenge="c0ffee-1234",
        domain="accord.example",
    )
    verify_proof(signed, PUBLIC_KEY)  # nothing expected: the signature still holds


@pytest.mark.parametrize(
    "expect",
    [
        {"expected_purpose": "assertionMethod"},
        {"challenge": "c0ffee-1235"},
        {"challenge": ""},
        {"domain": "evil.example"},
        {"domain": "accord.example.evil"},
    ],
)
def test_wrong_purpose_challenge_or_domain_fails(expect: dict[str, str]) -> None:
    _failure(_auth_signed(), **expect)


def test_expected_challenge_or_domain_missing_from_the_proof_fails() -> None:
    bare = add_proof(UNSIGNED, SEED, DRAFT_OPTIONS)
    assert "challenge" in _failure(bare, challenge="c0ffee-1234").reason
    assert "domain" in _failure(bare, domain="accord.example").reason


def test_domain_list_accepts_any_member() -> None:
    signed = _auth_signed(domain=["a.example", "accord.example"])
    verify_proof(signed, PUBLIC_KEY, domain="accord.example")
    verify_proof(signed, PUBLIC_KEY, domain="a.example")
    _failure(signed, domain="b.example")


@pytest.mark.parametrize("member", ["challenge", "domain", "nonce", "expires", "created"])
def test_changing_a_signed_option_breaks_the_signature(member: str) -> None:
    replacement = "2030-01-01T00:00:00Z" if member in ("expires", "created") else "other"
    tampered = _with_proof(_auth_signed(), **{member: replacement})
    assert "signature" in _failure(tampered).reason


def test_document_without_context_gets_no_proof_context() -> None:
    plain = {"claim": "x", "n": 1}
    signed = add_proof(plain, SEED, DRAFT_OPTIONS)
    assert "@context" not in signed["proof"]
    verify_proof(signed, PUBLIC_KEY)


def test_a_string_context_is_handled_like_a_one_item_list() -> None:
    document = {**UNSIGNED, "@context": "https://www.w3.org/ns/credentials/v2"}
    signed = add_proof(document, SEED, DRAFT_OPTIONS)
    assert signed["proof"]["@context"] == "https://www.w3.org/ns/credentials/v2"
    verify_proof(signed, PUBLIC_KEY)


# --- add_proof input errors: ProofFormatError ---------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"type": "Ed25519Signature2020"},
        {"cryptosuite": "eddsa-rdfc-2022"},
        {"verificationMethod": ""},
        {"verificationMethod": None},
        {"proofPurpose": 3},
        {"created": "2023-02-24"},
        {"expires": "2023-02-24T23:36:38"},
        {"challenge": 5},
        {"domain": ["ok", 5]},
        {"proofValue": PROOF_VALUE},
        {"extra": 2**60},  # no RFC 8785 form
    ],
)
def test_add_proof_rejects_malformed_options(changes: dict[str, Any]) -> None:
    options = {**OPTIONS, **changes}
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(ProofFormatError):
        add_proof(UNSIGNED, SEED, options)


@pytest.mark.parametrize("seed", [b"", SEED[:31], SEED + b"\x00", "not bytes"])
def test_add_proof_rejects_a_seed_of_the_wrong_size(seed: Any) -> None:
    with pytest.raises(ProofFormatError):
        add_proof(UNSIGNED, seed, OPTIONS)


@pytest.mark.parametrize("document", [[UNSIGNED], "doc", None, SIGNED, {**UNSIGNED, "big": 2**60}])
def test_add_proof_rejects_a_bad_document(document: Any) -> None:
    with pytest.raises(ProofFormatError):
        add_proof(document, SEED, OPTIONS)


def test_add_proof_rejects_options_that_are_not_an_object() -> None:
    with pytest.raises(ProofFormatError):
        add_proof(UNSIGNED, SEED, [OPTIONS])  # type: ignore[arg-type]


# --- no mutation -------------------------------------------------------------------------


def test_inputs_are_not_mutated() -> None:
    document, options = copy.deepcopy(UNSIGNED), copy.deepcopy(OPTIONS)
    signed = add_proof(document, SEED, options)
    assert document == UNSIGNED and "proof" not in document
    assert options == OPTIONS and "@context" not in options and "proofValue" not in options
    signed["credentialSubject"]["alumniOf"] = "changed"
    signed["proof"]["@context"].append("https://example.org/injected")
    assert document == UNSIGNED  # the signed copy shares no nested state with the input

    secured = copy.deepcopy(SIGNED)
    verify_proof(secured, PUBLIC_KEY)
    assert secured == SIGNED
    _failure(secured, expected_purpose="authentication")
    assert secured == SIGNED


# --- multibase and Multikey helpers -------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x01", bytes(range(256))])
def test_multibase_round_trip_keeps_leading_zeros(data: bytes) -> None:
    text = multibase_b58(data)
    assert text.startswith("z")
    if data:
        assert from_multibase_b58(text) == data


@pytest.mark.parametrize(
    "text",
    ["", "z", "2Hn", "uAAAA", "z0OIl", 5, None, "z2Hn ", "z2Hn\n", " z2Hn", "z2H n", "z2Hn\u3000"],
)
def test_from_multibase_rejects(text: Any) -> None:
    with pytest.raises(ProofFormatError):
        from_multibase_b58(text)


@pytest.mark.parametrize(
    "text",
    [
        "z" + base58.b58encode(b"\xe7\x01" + b"\x02" * 33).decode(),  # secp256k1-pub
        "z" + base58.b58encode(b"\xed\x01" + PUBLIC_KEY[:31]).decode(),
        "z" + base58.b58encode(b"\xed\x01" + PUBLIC_KEY + b"\x00").decode(),
        "z" + base58.b58encode(PUBLIC_KEY).decode(),  # no multicodec header
        KEY_PAIR["privateKeyMultibase"],
        KEY_PAIR["publicKeyMultibase"][1:],
        "did:key:" + KEY_PAIR["publicKeyMultibase"],
    ],
)
def test_a_did_key_of_anything_but_an_ed25519_multikey_is_refused(text: str) -> None:
    with pytest.raises(MalformedError):
        public_key_from_did("did:key:" + text)


# --- round trips with fresh keys ----------------------------------------------------------


def test_round_trip_with_a_fresh_ed25519_signer() -> None:
    signer = Ed25519Signer.generate()
    options = {**DRAFT_OPTIONS, "verificationMethod": signer.kid}
    signed = add_proof(UNSIGNED, signer.seed, options)
    verify_proof(signed, signer.public_key, expected_purpose="assertionMethod")
    assert public_key_from_did(signer.did) == signer.public_key
    fragment = signer.kid.split("#")[1]  # the key's Multikey, as the did:key's own body
    assert did_key_from_public_key(public_key_from_did("did:key:" + fragment)) == signer.did
    # the proof is the signer's own signature over hashData
    config = canonical_proof_configuration(signed["proof"])
    expected = signer.sign(hash_data(config, canonical_document(UNSIGNED)))
    assert from_multibase_b58(signed["proof"]["proofValue"]) == expected
    assert "another key" in _failure(signed, Ed25519Signer.generate().public_key).reason


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(max_size=12)
)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    claims=st.dictionaries(
        st.text(max_size=8).filter(lambda key: key not in ("proof", "@context")),
        _JSON,
        max_size=5,
    ),
    flip=st.integers(min_value=0, max_value=63),
)
def test_property_round_trip_and_tamper(seed: bytes, claims: dict[str, Any], flip: int) -> None:
    signer = Ed25519Signer(seed)
    document = {"@context": ["https://www.w3.org/ns/credentials/v2"], **claims}
    options = {**DRAFT_OPTIONS, "verificationMethod": signer.kid}
    signed = add_proof(document, seed, options)
    verify_proof(signed, signer.public_key)
    tampered = copy.deepcopy(signed)
    tampered["extra claim"] = True
    _failure(tampered, signer.public_key)
    signature = bytearray(from_multibase_b58(signed["proof"]["proofValue"]))
    signature[flip] ^= 0x80
    _failure(_with_proof(signed, proofValue=multibase_b58(bytes(signature))), signer.public_key)
