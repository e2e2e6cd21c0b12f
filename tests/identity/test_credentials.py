"""Capability credentials and Bitstring Status Lists: issue, verify, and a corpus of bad ones.

Every bad credential in `BAD_CREDENTIALS` must be refused at exactly the checklist step named
beside it; `test_every_step_is_exercised` keeps the corpus covering the whole checklist.
The helpers above the tests (`World`, `seeded_signer`, `NOW`) are shared with the
presentation tests.
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.identity import credentials, status
from accord.identity.credentials import (
    CREDENTIAL_TYPE,
    REVOCATION_EVENT_KIND,
    VerifiedCredential,
    issue_capability_credential,
    json_copy,
    revocation_event_body,
    revoke,
    transcript_reference,
    verify_credential,
)
from accord.identity.errors import CredentialError, ProofFormatError
from accord.identity.status import (
    MIN_BITS,
    StatusList,
    check_status,
    status_entry,
    status_list_credential,
    verify_issuer_proof,
)
from accord.ledger.database import make_engine
from accord.ledger.events import Entry
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from tests.identity.status_bits import set_bits

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
VALID_FOR = timedelta(days=180)
LIST_URL = "https://accord.example/status/1"
INDEX = 4242


def seeded_signer(label: str) -> Ed25519Signer:
    return Ed25519Signer(hashlib.sha256(label.encode()).digest())


OPERATOR = seeded_signer("operator")
AGENT = seeded_signer("agent")
STRANGER = seeded_signer("stranger")
SEED_COMMITMENT = hashlib.sha256(b"exam seed").hexdigest()


@dataclass
class World:
    """An operator with one status list published at LIST_URL and a credential for AGENT."""

    operator: Ed25519Signer = OPERATOR
    status_list: StatusList = field(default_factory=StatusList.empty)
    published: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.publish()

    def publish(self, signer: Ed25519Signer | None = None, **changes: Any) -> None:
        """Sign the current list (by `signer`, default the operator) and publish it."""
        document = status_list_credential(
            signer or self.operator, LIST_URL, self.status_list, now=NOW - timedelta(hours=1)
        )
        document.update(changes)
        self.published[LIST_URL] = document

    def revoke(self, index: int = INDEX) -> None:
        self.status_list = revoke(self.status_list, index)
        self.publish()

    def lookup(self, url: str) -> Mapping[str, Any]:
        return self.published[url]

    def issue(
        self,
        *,
        issuer: Ed25519Signer | None = None,
        subject: str = AGENT.did,
        capability: str = "arithmetic",
        index: int = INDEX,
        now: datetime = NOW,
        valid_for: timedelta = VALID_FOR,
    ) -> dict[str, Any]:
        return issue_capability_credential(
            issuer or self.operator,
            subject,
            capability,
            9,
            10,
            10,
            transcript_reference("log-1", 17),
            SEED_COMMITMENT,
            status_entry(LIST_URL, index),
            now,
            valid_for,
        )

    def verify(self, credential: Mapping[str, Any], **overrides: Any) -> VerifiedCredential:
        arguments: dict[str, Any] = {
            "trusted_issuers": {self.operator.did},
            "holder_did": AGENT.did,
            "now": NOW + timedelta(days=1),
            "status_lookup": self.lookup,
            "capability": "arithmetic",
        }
        arguments.update(overrides)
        return verify_credential(credential, **arguments)


# --- issue and verify ---------------------------------------------------------------------


def test_issue_then_verify_round_trips() -> None:
    world = World()
    credential = world.issue()
    verified = world.verify(credential)
    assert verified.id == credential["id"]
    assert verified.issuer == OPERATOR.did
    assert verified.subject == AGENT.did
    assert verified.capability == "arithmetic"
    assert (verified.earned, verified.possible, verified.exam_size) == (9, 10, 10)
    assert verified.transcript == "accord:ledger:log-1#17"
    assert verified.seed_commitment == SEED_COMMITMENT
    assert verified.valid_from == NOW
    assert verified.valid_until == NOW + VALID_FOR
    assert verified.document == credential


def test_the_verified_document_is_the_verifiers_own_copy() -> None:
    world = World()
    credential = world.issue()
    verified = world.verify(credential)
    credential["credentialSubject"]["score"]["earned"] = 0  # the caller's dict changes after
    credential["credentialStatus"]["statusListIndex"] = "99"
    assert verified.document["credentialSubject"]["score"]["earned"] == 9
    assert verified.status_entries[0]["statusListIndex"] != "99"
    assert verified.status_entries[0] is verified.document["credentialStatus"]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_json_copy_is_deepcopy_for_json(value: Any) -> None:
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)
    assert type(copied) is type(value)

    def containers(node: Any) -> list[Any]:
        """Every dict and list in `node` (tuples are looked into, not counted)."""
        if isinstance(node, dict):
            return [node] + [c for item in node.values() for c in containers(item)]
        if isinstance(node, list | tuple):
            inner = [c for item in node for c in containers(item)]
            return inner if isinstance(node, tuple) else [node, *inner]
        return []

    theirs = {id(node) for node in containers(value)}
    assert not theirs & {id(node) for node in containers(copied)}  # nothing mutable shared


def test_issued_credential_has_the_vc_2_0_shape() -> None:
    credential = World().issue()
    assert credential["@context"][0] == "https://www.w3.org/ns/credentials/v2"
    assert credential["type"] == ["VerifiableCredential", CREDENTIAL_TYPE]
    assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", credential["id"])
    assert credential["issuer"] == OPERATOR.did
    assert credential["validFrom"] == "2026-03-01T12:00:00Z"
    assert credential["validUntil"] == "2026-08-28T12:00:00Z"
    subject = credential["credentialSubject"]
    assert subject["score"] == {"earned": 9, "possible": 10}
    assert subject["exam"] == {
        "transcript": "accord:ledger:log-1#17",
        "seedCommitment": SEED_COMMITMENT,
    }
    assert credential["credentialStatus"] == {
        "id": f"{LIST_URL}#{INDEX}",
        "type": "BitstringStatusListEntry",
        "statusPurpose": "revocation",
        "statusListIndex": str(INDEX),
        "statusListCredential": LIST_URL,
    }
    proof = credential["proof"]
    assert proof["cryptosuite"] == "eddsa-jcs-2022"
    assert proof["proofPurpose"] == "assertionMethod"
    assert proof["verificationMethod"] == OPERATOR.kid
    assert proof["@context"] == credential["@context"]


def test_each_credential_gets_a_fresh_id_unless_one_is_given() -> None:
    world = World()
    assert world.issue()["id"] != world.issue()["id"]
    fixed_id = "urn:uuid:00000000-0000-4000-8000-000000000000"
    arguments = (OPERATOR, AGENT.did, "arithmetic", 1, 1, 1, "accord:ledger:x#0", "c")
    entry = status_entry(LIST_URL, 0)
    fixed = issue_capability_credential(*arguments, entry, NOW, VALID_FOR, credential_id=fixed_id)
    again = issue_capability_credential(*arguments, entry, NOW, VALID_FOR, credential_id=fixed_id)
    assert fixed["id"] == fixed_id
    assert fixed == again  # Ed25519 is deterministic: same inputs, same credential


def test_optional_checks_are_skipped_when_not_asked_for() -> None:
    world = World()
    credential = world.issue(subject=STRANGER.did, capability="translation")
    verified = world.verify(credential, holder_did=None, capability=None)
    assert verified.subject == STRANGER.did


def test_validity_window_edges() -> None:
    world = World()
    credential = world.issue()
    world.verify(credential, now=NOW)  # validFrom is inclusive
    world.verify(credential, now=NOW + VALID_FOR - timedelta(microseconds=1))
    with pytest.raises(CredentialError) as caught:
        world.verify(credential, now=NOW + VALID_FOR)  # validUntil is exclusive
    assert caught.value.step == "validity"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"earned": 11}, "earned exceeds"),
        ({"earned": -1}, "non-negative"),
        ({"possible": True}, "non-negative"),
        ({"subject_did": "agent-7"}, "DID"),
        ({"capability": ""}, "capability"),
        ({"transcript_ref": ""}, "transcript"),
        ({"valid_for": timedelta(0)}, "valid_for"),
        ({"now": datetime(2026, 1, 1)}, "timezone"),
        ({"status_entry": {"type": "StatusList2021Entry"}}, "BitstringStatusListEntry"),
    ],
)
def test_issue_refuses_bad_arguments(arguments: dict[str, Any], message: str) -> None:
    defaults: dict[str, Any] = {
        "issuer": OPERATOR,
        "subject_did": AGENT.did,
        "capability": "arithmetic",
        "earned": 9,
        "possible": 10,
        "exam_size": 10,
        "transcript_ref": "accord:ledger:log-1#17",
        "seed_commitment": SEED_COMMITMENT,
        "status_entry": status_entry(LIST_URL, 1),
        "now": NOW,
        "valid_for": VALID_FOR,
    }
    defaults.update(arguments)
    with pytest.raises(ValueError, match=message):
        issue_capability_credential(**defaults)


def test_verify_refuses_a_naive_clock() -> None:
    world = World()
    with pytest.raises(ValueError, match="timezone"):
        world.verify(world.issue(), now=datetime(2026, 3, 2))


# --- the corpus of bad credentials --------------------------------------------------------

Case = Callable[[World], tuple[Mapping[str, Any], dict[str, Any]]]
"""Builds a bad credential in a fresh world; returns it and any verify_credential overrides."""


def _edit(change: Callable[[dict[str, Any]], None]) -> Case:
    def case(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
        credential = world.issue()
        change(credential)
        return credential, {}

    return case


def _set_score(credential: dict[str, Any]) -> None:
    credential["credentialSubject"]["score"]["earned"] = 10


def _set_capability(credential: dict[str, Any]) -> None:
    credential["credentialSubject"]["capability"] = "translation"


def _extend_validity(credential: dict[str, Any]) -> None:
    credential["validUntil"] = "2099-01-01T00:00:00Z"


def _repoint_status(credential: dict[str, Any]) -> None:
    credential["credentialStatus"]["statusListIndex"] = "1"


def _flip_proof_value(credential: dict[str, Any]) -> None:
    value = credential["proof"]["proofValue"]
    credential["proof"]["proofValue"] = value[:-2] + ("1" if value[-2] != "1" else "2") + value[-1]


def _change_proof_created(credential: dict[str, Any]) -> None:
    credential["proof"]["created"] = "2026-03-01T12:00:01Z"


def _claim_other_issuer(credential: dict[str, Any]) -> None:
    credential["issuer"] = STRANGER.did


def _strip_proof(credential: dict[str, Any]) -> None:
    del credential["proof"]


def _add_claim(credential: dict[str, Any]) -> None:
    credential["credentialSubject"]["note"] = "also fluent in Klingon"


def _forged_with_own_key(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The stranger signs a credential naming the operator as issuer."""
    credential = world.issue(issuer=STRANGER)
    unsigned = {key: value for key, value in credential.items() if key != "proof"}
    unsigned["issuer"] = OPERATOR.did
    from accord.identity.status import sign_assertion

    return sign_assertion(unsigned, STRANGER, NOW), {}


def _untrusted_issuer(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    return world.issue(issuer=STRANGER), {}


def _wrong_purpose(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    from accord.identity.dataintegrity import add_proof

    credential = world.issue()
    options = {key: value for key, value in credential["proof"].items() if key != "proofValue"}
    options.pop("@context")
    options["proofPurpose"] = "authentication"
    unsigned = {key: value for key, value in credential.items() if key != "proof"}
    return add_proof(unsigned, OPERATOR.seed, options), {}


def _at(moment: datetime) -> Case:
    def case(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
        return world.issue(), {"now": moment}

    return case


def _revoked(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    credential = world.issue()
    world.revoke(INDEX)
    return credential, {}


def _wrong_holder(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    return world.issue(), {"holder_did": STRANGER.did}


def _wrong_capability(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    return world.issue(), {"capability": "translation"}


def _status_tampered(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The list says revoked; someone swaps in a clean encodedList without re-signing."""
    credential = world.issue()
    world.revoke(INDEX)
    world.published[LIST_URL]["credentialSubject"]["encodedList"] = StatusList.empty().encode()
    return credential, {}


def _status_by_stranger(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """A clean list, validly signed, but by someone other than the credential's issuer."""
    credential = world.issue()
    world.revoke(INDEX)
    world.status_list = StatusList.empty()
    world.publish(signer=STRANGER)
    return credential, {}


def _status_list_unsigned(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    credential = world.issue()
    del world.published[LIST_URL]["proof"]
    return credential, {}


def _status_list_other_id(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """A genuine list of the operator, served for another URL."""
    credential = world.issue()
    other = status_list_credential(OPERATOR, LIST_URL + "-b", StatusList.empty(), now=NOW)
    world.published[LIST_URL] = other
    return credential, {}


def _status_list_expired(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    credential = world.issue()
    world.published[LIST_URL] = status_list_credential(
        OPERATOR, LIST_URL, StatusList.empty(), now=NOW - timedelta(days=2),
        valid_for=timedelta(days=1),
    )  # fmt: skip
    return credential, {}


def _status_list_for_suspension(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    credential = world.issue()
    world.published[LIST_URL] = status_list_credential(
        OPERATOR, LIST_URL, StatusList.empty(), purpose="suspension", now=NOW
    )
    return credential, {}


def _status_unreachable(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    def offline(url: str) -> Mapping[str, Any]:
        raise ConnectionError(f"cannot reach {url}")

    return world.issue(), {"status_lookup": offline}


def _index_beyond_list(world: World) -> tuple[Mapping[str, Any], dict[str, Any]]:
    return world.issue(index=MIN_BITS), {}


def _malformed(change: Callable[[dict[str, Any]], None]) -> Case:
    return _edit(change)


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda credential: credential.pop(name)


def _string_score(credential: dict[str, Any]) -> None:
    credential["credentialSubject"]["score"]["earned"] = "9"


def _backwards_validity(credential: dict[str, Any]) -> None:
    credential["validUntil"] = "2020-01-01T00:00:00Z"


def _numeric_index(credential: dict[str, Any]) -> None:
    credential["credentialStatus"]["statusListIndex"] = INDEX


def _no_context(credential: dict[str, Any]) -> None:
    credential["@context"] = ["https://www.w3.org/2018/credentials/v1"]


def _other_type(credential: dict[str, Any]) -> None:
    credential["type"] = ["VerifiableCredential"]


def _naive_time(credential: dict[str, Any]) -> None:
    credential["validFrom"] = "2026-03-01T12:00:00"


BAD_CREDENTIALS: dict[str, tuple[Case, str]] = {
    "tampered score": (_edit(_set_score), "proof"),
    "tampered capability": (_edit(_set_capability), "proof"),
    "tampered validity": (_edit(_extend_validity), "proof"),
    "tampered status index": (_edit(_repoint_status), "proof"),
    "added claim": (_edit(_add_claim), "proof"),
    "tampered proofValue": (_edit(_flip_proof_value), "proof"),
    "tampered proof created": (_edit(_change_proof_created), "proof"),
    "issuer swapped after signing": (_edit(_claim_other_issuer), "proof"),
    "forged: stranger's key, operator named": (_forged_with_own_key, "proof"),
    "proof purpose authentication": (_wrong_purpose, "proof"),
    "unsigned": (_edit(_strip_proof), "proof"),
    "untrusted issuer, validly signed": (_untrusted_issuer, "issuer"),
    "wrong holder": (_wrong_holder, "holder"),
    "expired": (_at(NOW + VALID_FOR + timedelta(seconds=1)), "validity"),
    "not yet valid": (_at(NOW - timedelta(seconds=1)), "validity"),
    "revoked": (_revoked, "revocation"),
    "tampered status list credential": (_status_tampered, "revocation"),
    "status list signed by a stranger": (_status_by_stranger, "revocation"),
    "status list unsigned": (_status_list_unsigned, "revocation"),
    "status list served for another id": (_status_list_other_id, "revocation"),
    "status list expired": (_status_list_expired, "revocation"),
    "status list of another purpose": (_status_list_for_suspension, "revocation"),
    "status list unreachable": (_status_unreachable, "revocation"),
    "index beyond the list": (_index_beyond_list, "revocation"),
    "wrong capability": (_wrong_capability, "capability"),
    "no credentialSubject": (_malformed(_drop("credentialSubject")), "format"),
    "no credentialStatus": (_malformed(_drop("credentialStatus")), "format"),
    "no validUntil": (_malformed(_drop("validUntil")), "format"),
    "score as a string": (_malformed(_string_score), "format"),
    "validUntil before validFrom": (_malformed(_backwards_validity), "format"),
    "numeric statusListIndex": (_malformed(_numeric_index), "format"),
    "VC 1.1 context": (_malformed(_no_context), "format"),
    "not a CapabilityCredential": (_malformed(_other_type), "format"),
    "time without zone": (_malformed(_naive_time), "format"),
}


@pytest.mark.parametrize("name", list(BAD_CREDENTIALS))
def test_bad_credential_is_refused_at_its_step(name: str) -> None:
    build, step = BAD_CREDENTIALS[name]
    world = World()
    credential, overrides = build(world)
    with pytest.raises(CredentialError) as caught:
        world.verify(credential, **overrides)
    assert caught.value.step == step, caught.value


def test_every_step_is_exercised() -> None:
    """Each step `verify_credential` can fail at (its `STEP_*` constants, and the status
    list's own, revocation) has a credential refused at it."""
    own = {value for name, value in vars(credentials).items() if name.startswith("STEP_")}
    steps = own | {status.STEP}
    assert len(steps) == 7
    assert {step for _, step in BAD_CREDENTIALS.values()} == steps


def test_unsigned_says_so() -> None:
    world = World()
    credential, _ = _edit(_strip_proof)(world)
    with pytest.raises(CredentialError, match="unsigned") as caught:
        world.verify(credential)
    assert caught.value.step == "proof"


def test_revoked_says_so() -> None:
    world = World()
    credential, _ = _revoked(world)
    with pytest.raises(CredentialError, match="revoked"):
        world.verify(credential)


def test_a_proof_that_held_is_remembered_for_that_document_and_issuer_only() -> None:
    """`verify_issuer_proof` remembers the proofs that held; a changed document, a proof
    checked for another issuer, or a list that revokes the credential since is still refused."""
    world = World()
    credential = world.issue()
    world.verify(credential)
    world.verify(copy.deepcopy(credential))  # the same document again: it holds
    changed = copy.deepcopy(credential)
    changed["credentialSubject"]["score"]["earned"] = 10
    with pytest.raises(CredentialError, match="does not verify") as caught:
        world.verify(changed)
    assert caught.value.step == "proof"
    with pytest.raises(CredentialError) as caught:
        verify_issuer_proof(credential, STRANGER.did, "proof")
    assert "not a key of" in caught.value.reason
    world.revoke()
    with pytest.raises(CredentialError, match="revoked"):
        world.verify(credential)


def test_steps_run_in_checklist_order() -> None:
    """A credential that fails several steps is reported at the earliest of them."""
    world = World()
    credential = world.issue(issuer=STRANGER, subject=STRANGER.did, capability="translation")
    world.revoke(INDEX)
    late: dict[str, Any] = {"now": NOW + VALID_FOR * 2}
    failures: list[tuple[dict[str, Any], str]] = [
        ({**late}, "issuer"),
        ({**late, "trusted_issuers": {STRANGER.did}}, "holder"),
        ({**late, "trusted_issuers": {STRANGER.did}, "holder_did": STRANGER.did}, "validity"),
        ({"trusted_issuers": {STRANGER.did}, "holder_did": STRANGER.did}, "revocation"),
    ]
    for overrides, step in failures:
        with pytest.raises(CredentialError) as caught:
            world.verify(credential, **overrides)
        assert caught.value.step == step


def test_revocation_only_affects_its_own_index() -> None:
    world = World()
    mine = world.issue(index=INDEX)
    neighbour = world.issue(index=INDEX + 1)
    world.revoke(INDEX)
    world.verify(neighbour)
    with pytest.raises(CredentialError):
        world.verify(mine)


def test_revoke_is_pure() -> None:
    clean = StatusList.empty()
    revoked = revoke(clean, 3)
    assert not clean.get(3)
    assert revoked.get(3)
    assert revoke(revoked, 3) == revoked


def test_revocation_event_is_logged_on_the_ledger(tmp_path: Path) -> None:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "log-1")
    ledger = Ledger(store, OPERATOR, clock=lambda: NOW)
    credential = World().issue()
    body = revocation_event_body(
        credential["id"], INDEX, "exam answers leaked", status_list_credential=LIST_URL
    )
    index, _ = ledger.append(OPERATOR, REVOCATION_EVENT_KIND, subject=credential["id"], body=body)
    event = Entry.from_bytes(store.entry(index).data).event
    assert event.kind == "credential.revoked"
    assert event.actor == OPERATOR.did
    assert event.subject == credential["id"]
    assert dict(event.body) == {
        "credentialId": credential["id"],
        "statusPurpose": "revocation",
        "statusListIndex": INDEX,
        "reason": "exam answers leaked",
        "statusListCredential": LIST_URL,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("", 1, "why"), "credential id"),
        (("urn:uuid:x", -1, "why"), "non-negative"),
        (("urn:uuid:x", 1, ""), "reason"),
    ],
)
def test_revocation_event_body_refuses_bad_arguments(
    arguments: tuple[str, int, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        revocation_event_body(*arguments)


# --- Bitstring Status List ----------------------------------------------------------------

SPEC_EXAMPLE_ENCODED_LIST = "uH4sIAAAAAAAAA-3BMQEAAADCoPVPbQwfoAAAAAAAAAAAAAAAAAAAAIC3AYbSVKsAQAAA"
"""`encodedList` of the spec's examples (Bitstring Status List v1.0, §2.2): 131,072 zero bits."""


def test_the_specs_example_list_decodes_to_16kb_of_zeros() -> None:
    decoded = StatusList.decode(SPEC_EXAMPLE_ENCODED_LIST)
    assert decoded.size == MIN_BITS == 131_072
    assert decoded.bits == bytes(16 * 1024)
    assert set_bits(decoded) == []


def test_an_empty_list_is_the_minimum_size_and_encodes_as_multibase_gzip() -> None:
    encoded = StatusList.empty().encode()
    assert encoded.startswith("u")
    assert "=" not in encoded
    raw = base64.urlsafe_b64decode(encoded[1:] + "=" * (-len(encoded[1:]) % 4))
    assert raw[:2] == b"\x1f\x8b"  # the GZIP magic number
    assert gzip.decompress(raw) == bytes(16 * 1024)


@pytest.mark.parametrize(
    ("index", "byte", "value"),
    [
        (0, 0, 0b1000_0000),  # the left-most bit of the first byte
        (1, 0, 0b0100_0000),
        (7, 0, 0b0000_0001),
        (8, 1, 0b1000_0000),
        (13, 1, 0b0000_0100),
        (MIN_BITS - 1, MIN_BITS // 8 - 1, 0b0000_0001),
    ],
)
def test_bit_positions_follow_the_spec(index: int, byte: int, value: int) -> None:
    status_list = StatusList.empty().set(index)
    expected = bytearray(MIN_BITS // 8)
    expected[byte] = value
    assert status_list.bits == bytes(expected)
    assert status_list.get(index)
    assert set_bits(status_list) == [index]
    assert not status_list.set(index, False).get(index)


def test_encoding_is_deterministic() -> None:
    status_list = StatusList.empty().set(5).set(99_999)
    assert status_list.encode() == StatusList.decode(status_list.encode()).encode()


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(min_value=0, max_value=MIN_BITS * 2 - 1), max_size=64))
def test_encode_decode_round_trips(indices: set[int]) -> None:
    status_list = StatusList.empty(MIN_BITS * 2)
    for index in indices:
        status_list = status_list.set(index)
    decoded = StatusList.decode(status_list.encode())
    assert decoded == status_list
    assert set_bits(decoded) == sorted(indices)


def _multibase_gzip(data: bytes) -> str:
    return "u" + base64.urlsafe_b64encode(gzip.compress(data, mtime=0)).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ("z" + "1" * 20, "multibase base64url"),
        (17, "multibase base64url"),
        ("u!!!!", "base64url"),
        ("u" + base64.urlsafe_b64encode(b"not gzip at all").rstrip(b"=").decode(), "GZIP"),
        (_multibase_gzip(bytes(1024)), "fewer than the minimum"),
        (_multibase_gzip(bytes(16 * 1024))[:-10], "GZIP"),
        (_multibase_gzip(bytes((1 << 24) + 1)), "longer than"),
        (
            "u" + base64.urlsafe_b64encode(gzip.compress(bytes(16384), mtime=0)).decode() + "=",
            "unpadded",
        ),
    ],
)
def test_decode_refuses_bad_encoded_lists(encoded: object, message: str) -> None:
    with pytest.raises(ProofFormatError, match=message):
        StatusList.decode(encoded)


def test_list_sizes_and_indices_are_checked() -> None:
    with pytest.raises(ValueError):
        StatusList(bytes(1024))
    with pytest.raises(ValueError):
        StatusList.empty(MIN_BITS + 1)
    with pytest.raises(IndexError):
        StatusList.empty().get(MIN_BITS)
    with pytest.raises(IndexError):
        StatusList.empty().set(-1)


def test_status_entry_and_list_credential_shapes() -> None:
    assert status_entry(LIST_URL, 0)["statusListIndex"] == "0"
    with pytest.raises(ValueError):
        status_entry(LIST_URL, -1)
    with pytest.raises(ValueError):
        status_entry(LIST_URL, 1, purpose="whatever")
    document = status_list_credential(
        OPERATOR, LIST_URL, StatusList.empty().set(3), now=NOW, valid_for=timedelta(days=1)
    )
    assert document["type"] == ["VerifiableCredential", "BitstringStatusListCredential"]
    assert document["id"] == LIST_URL
    assert document["issuer"] == OPERATOR.did
    assert document["validUntil"] == "2026-03-02T12:00:00Z"
    subject = document["credentialSubject"]
    assert subject["type"] == "BitstringStatusList"
    assert subject["statusPurpose"] == "revocation"
    assert set_bits(StatusList.decode(subject["encodedList"])) == [3]


def test_check_status_reads_the_bit() -> None:
    world = World()
    world.revoke(3)
    lookup = world.lookup
    check_status(status_entry(LIST_URL, 4), issuer=OPERATOR.did, now=NOW, status_lookup=lookup)
    with pytest.raises(CredentialError, match="revoked") as caught:
        check_status(status_entry(LIST_URL, 3), issuer=OPERATOR.did, now=NOW, status_lookup=lookup)
    assert caught.value.step == "revocation"


def test_world_documents_are_not_shared() -> None:
    """Guards the corpus: tampering with one world's list never leaks into another's."""
    first, second = World(), World()
    first.published[LIST_URL]["credentialSubject"]["encodedList"] = "u"
    assert second.published[LIST_URL]["credentialSubject"]["encodedList"] != "u"
    assert copy.deepcopy(second.published) == second.published
