"""`CapabilityCredential`s: W3C VC Data Model 2.0 credentials with eddsa-jcs-2022 proofs.

The network operator issues one per capability an agent passed an exam for:

    {
      "@context": ["https://www.w3.org/ns/credentials/v2", {…accord terms…}],
      "id": "urn:uuid:…",
      "type": ["VerifiableCredential", "CapabilityCredential"],
      "issuer": "did:key:z6Mk…",                      (the operator)
      "validFrom": "2026-01-01T00:00:00Z", "validUntil": "2026-07-01T00:00:00Z",
      "credentialSubject": {
        "id": "did:key:z6Mk…",                        (the agent)
        "capability": "arithmetic",
        "score": {"earned": 9, "possible": 10},
        "examSize": 10,
        "exam": {"transcript": "accord:ledger:<log_id>#<index>", "seedCommitment": "<hex>"}
      },
      "credentialStatus": {…a BitstringStatusListEntry…},
      "proof": {…DataIntegrityProof, eddsa-jcs-2022, assertionMethod…}
    }

The accord terms are an inline JSON-LD context, so the credential is self-contained; it is
verified over its JCS bytes, so no JSON-LD processing happens anywhere.

Verification (`verify_credential`) is a checklist run in this order; the first step that does not
hold raises `CredentialError(step, reason)`:

    format      the document has the shape above (types, ids, times, integers)
    1 proof       a valid eddsa-jcs-2022 proof by the issuer's did:key ("unsigned" without one)
    2 issuer      the issuer is one of the trusted issuers
    3 holder      the subject is the presenting holder (when a holder is given)
    4 validity    validFrom <= now < validUntil
    5 revocation  the status list credential verifies (same issuer) and the bit is clear
    6 capability  the credential is for the capability asked about (when one is given)

Revocation is a bit in the status list (`revoke`) plus a signed ledger event
`credential.revoked` whose body `revocation_event_body` builds; the caller appends it with
`Ledger.append(operator, REVOCATION_EVENT_KIND, subject=credential_id, body=…)` and publishes a
re-signed status list credential.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

from accord.identity.errors import CredentialError
from accord.identity.status import (
    STATUS_ENTRY_TYPE,
    VC_V2_CONTEXT,
    StatusList,
    check_status,
    format_timestamp,
    parse_timestamp,
    sign_assertion,
    verify_issuer_proof,
)
from accord.ledger.signing import Ed25519Signer

CREDENTIAL_TYPE = "CapabilityCredential"
REVOCATION_EVENT_KIND = "credential.revoked"

ACCORD_VOCAB = "https://w3id.org/accord/vocab#"
_XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"
ACCORD_CONTEXT: dict[str, Any] = {
    "accord": ACCORD_VOCAB,
    CREDENTIAL_TYPE: "accord:CapabilityCredential",
    "capability": "accord:capability",
    "score": "accord:score",
    "earned": {"@id": "accord:earned", "@type": _XSD_INTEGER},
    "possible": {"@id": "accord:possible", "@type": _XSD_INTEGER},
    "examSize": {"@id": "accord:examSize", "@type": _XSD_INTEGER},
    "exam": "accord:exam",
    "transcript": {"@id": "accord:transcript", "@type": "@id"},
    "seedCommitment": "accord:seedCommitment",
}
"""The inline JSON-LD context defining the credential's accord terms."""

CONTEXT: list[Any] = [VC_V2_CONTEXT, ACCORD_CONTEXT]

# The steps `verify_credential` can fail at (`CredentialError.step`), in the order it runs them;
# between validity and capability, `check_status`'s (accord.identity.status.STEP, revocation).
STEP_FORMAT = "format"
STEP_PROOF = "proof"
STEP_ISSUER = "issuer"
STEP_HOLDER = "holder"
STEP_VALIDITY = "validity"
STEP_CAPABILITY = "capability"

MAX_SAFE_INTEGER = 2**53 - 1

StatusLookup = Callable[[str], Mapping[str, Any]]
"""Fetches the status list credential at a URL (the credential's `statusListCredential`)."""


@dataclass(frozen=True)
class VerifiedCredential:
    """What a credential that passed every step says. `document` is a private deep copy."""

    id: str
    issuer: str
    subject: str
    capability: str
    earned: int
    possible: int
    exam_size: int
    transcript: str
    seed_commitment: str
    valid_from: datetime
    valid_until: datetime
    status_entries: tuple[Mapping[str, Any], ...] = field(compare=False, hash=False, repr=False)
    document: Mapping[str, Any] = field(compare=False, hash=False, repr=False)


# --- issuing ------------------------------------------------------------------------------


def issue_capability_credential(
    issuer: Ed25519Signer,
    subject_did: str,
    capability: str,
    earned: int,
    possible: int,
    exam_size: int,
    transcript_ref: str,
    seed_commitment: str,
    status_entry: Mapping[str, Any],
    now: datetime,
    valid_for: timedelta,
    *,
    credential_id: str | None = None,
) -> dict[str, Any]:
    """A signed `CapabilityCredential` (see the module docstring), valid from `now` for
    `valid_for`, signed by `issuer` with an eddsa-jcs-2022 `assertionMethod` proof.

    `status_entry` comes from `accord.identity.status.status_entry`. `credential_id` defaults to a
    fresh random `urn:uuid:`; pass one to make issuance reproducible.

    Raises ValueError when the arguments cannot make a credential: a naive `now`, a `valid_for`
    under one second, a subject that is not a DID, an empty capability, transcript or seed
    commitment, scores that are not integers with 0 <= earned <= possible, a negative exam size,
    or a status entry that is not a `BitstringStatusListEntry`.
    """
    if credential_id is None:
        credential_id = uuid.uuid4().urn
    valid_until = now + valid_for
    if valid_for < timedelta(seconds=1):
        raise ValueError("valid_for must be at least one second")
    credential: dict[str, Any] = {
        "@context": copy.deepcopy(CONTEXT),
        "id": credential_id,
        "type": ["VerifiableCredential", CREDENTIAL_TYPE],
        "issuer": issuer.did,
        "validFrom": format_timestamp(now),
        "validUntil": format_timestamp(valid_until),
        "credentialSubject": {
            "id": subject_did,
            "capability": capability,
            "score": {"earned": earned, "possible": possible},
            "examSize": exam_size,
            "exam": {"transcript": transcript_ref, "seedCommitment": seed_commitment},
        },
        "credentialStatus": copy.deepcopy(dict(status_entry)),
    }
    try:
        _parse(credential)
    except CredentialError as exc:
        raise ValueError(f"cannot issue this credential: {exc.reason}") from exc
    return sign_assertion(credential, issuer, now)


def transcript_reference(log_id: str, index: int) -> str:
    """The ledger reference of an exam transcript: `accord:ledger:<log_id>#<index>`."""
    return f"accord:ledger:{log_id}#{index}"


# --- verifying ----------------------------------------------------------------------------


def verify_credential(
    credential: Mapping[str, Any],
    *,
    trusted_issuers: set[str] | frozenset[str],
    holder_did: str | None = None,
    now: datetime,
    status_lookup: StatusLookup | None,
    capability: str | None = None,
) -> VerifiedCredential:
    """Run the checklist of the module docstring over `credential`.

    `status_lookup=None` skips the status-list read, for a caller that checks revocation
    itself from the signed `credential.revoked` events of the log (the audit does).

    Raises CredentialError naming the first step that fails: "format" (not a CapabilityCredential
    of the documented shape), "proof" (no proof: reason starts "unsigned"; a verificationMethod
    that is not the issuer's did:key, or a proof that does not verify), "issuer" (not in
    `trusted_issuers`), "holder" (subject is not `holder_did`), "validity" (now before validFrom
    or at/after validUntil), "revocation" (status list unavailable, not signed by the same issuer,
    malformed, or the bit is set), "capability" (not `capability`). Raises ValueError for a
    naive `now`.
    """
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    claims = _parse(credential)

    verify_issuer_proof(credential, claims.issuer, STEP_PROOF)

    if claims.issuer not in trusted_issuers:
        _fail(STEP_ISSUER, f"{claims.issuer} is not a trusted issuer")

    if holder_did is not None and claims.subject != holder_did:
        _fail(STEP_HOLDER, f"the credential is about {claims.subject}, not the holder {holder_did}")

    if now < claims.valid_from:
        _fail(STEP_VALIDITY, f"not yet valid: validFrom is {credential['validFrom']}")
    if now >= claims.valid_until:
        _fail(STEP_VALIDITY, f"expired: validUntil was {credential['validUntil']}")

    if status_lookup is not None:
        for entry in claims.status_entries:
            check_status(entry, issuer=claims.issuer, now=now, status_lookup=status_lookup)

    if capability is not None and claims.capability != capability:
        _fail(STEP_CAPABILITY, f"the credential is for {claims.capability!r}, not {capability!r}")

    return claims


def _fail(step: str, reason: str) -> NoReturn:
    raise CredentialError(step, reason)


def _parse(credential: Mapping[str, Any]) -> VerifiedCredential:
    """The claims of `credential`; raises CredentialError("format", …) for any other shape."""
    if not isinstance(credential, Mapping):
        _fail(STEP_FORMAT, "a credential is a JSON object")
    context = credential.get("@context")
    if not isinstance(context, list) or not context or context[0] != VC_V2_CONTEXT:
        _fail(STEP_FORMAT, f"@context must be a list starting with {VC_V2_CONTEXT!r}")
    types = credential.get("type")
    if not isinstance(types, list) or not {"VerifiableCredential", CREDENTIAL_TYPE} <= set(
        t for t in types if isinstance(t, str)
    ):
        _fail(STEP_FORMAT, f"type must list 'VerifiableCredential' and {CREDENTIAL_TYPE!r}")
    credential_id = _string(credential, "id")
    issuer_field = credential.get("issuer")
    issuer = issuer_field.get("id") if isinstance(issuer_field, Mapping) else issuer_field
    if not _is_did(issuer):
        _fail(STEP_FORMAT, "issuer must be a DID (or an object whose id is one)")
    valid_from = _time(credential, "validFrom")
    valid_until = _time(credential, "validUntil")
    if valid_until <= valid_from:
        _fail(STEP_FORMAT, "validUntil must come after validFrom")

    subject = credential.get("credentialSubject")
    if not isinstance(subject, Mapping):
        _fail(STEP_FORMAT, "credentialSubject must be one JSON object")
    subject_did = subject.get("id")
    if not _is_did(subject_did):
        _fail(STEP_FORMAT, "credentialSubject.id must be the agent's DID")
    score = subject.get("score")
    if not isinstance(score, Mapping):
        _fail(STEP_FORMAT, "credentialSubject.score must be an object")
    earned = _count(score, "earned")
    possible = _count(score, "possible")
    if earned > possible:
        _fail(STEP_FORMAT, "score.earned exceeds score.possible")
    exam = subject.get("exam")
    if not isinstance(exam, Mapping):
        _fail(STEP_FORMAT, "credentialSubject.exam must be an object")

    document = json_copy(credential)
    return VerifiedCredential(
        id=credential_id,
        issuer=str(issuer),
        subject=str(subject_did),
        capability=_string(subject, "capability"),
        earned=earned,
        possible=possible,
        exam_size=_count(subject, "examSize"),
        transcript=_string(exam, "transcript"),
        seed_commitment=_string(exam, "seedCommitment"),
        valid_from=valid_from,
        valid_until=valid_until,
        status_entries=_status_entries(document.get("credentialStatus")),
        document=document,
    )


def _status_entries(status: object) -> tuple[Mapping[str, Any], ...]:
    raw = status if isinstance(status, list) else [status]
    entries = [entry for entry in raw if isinstance(entry, Mapping)]
    if not raw or len(entries) != len(raw):
        _fail(STEP_FORMAT, "credentialStatus must be a status entry object (or a list of them)")
    for entry in entries:
        if entry.get("type") != STATUS_ENTRY_TYPE:
            _fail(STEP_FORMAT, f"credentialStatus entries must be {STATUS_ENTRY_TYPE}s")
        _string(entry, "statusListCredential")
        _string(entry, "statusPurpose")
        index = entry.get("statusListIndex")
        if not isinstance(index, str) or not re.fullmatch(r"0|[1-9][0-9]{0,15}", index):
            _fail(STEP_FORMAT, "statusListIndex must be a decimal string")
    return tuple(entries)


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value: every object (any Mapping, copied as a dict) and array (a
    list or tuple, kept as such) is new; strings, numbers, booleans and null are immutable and
    shared, and so is anything else (which no signed JSON document holds: its proof is checked
    on the canonical JSON text). `copy.deepcopy` gives the same for JSON at several times the
    cost (a memo and a dispatch per node); a credential is copied at every verification."""
    if isinstance(value, Mapping):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if isinstance(value, tuple):
        return tuple(json_copy(item) for item in value)
    return value


def _string(container: Mapping[str, Any], name: str) -> str:
    value = container.get(name)
    if not isinstance(value, str) or not value:
        _fail(STEP_FORMAT, f"{name!r} must be a non-empty string")
    return value


def _count(container: Mapping[str, Any], name: str) -> int:
    value = container.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAFE_INTEGER:
        _fail(STEP_FORMAT, f"{name!r} must be a non-negative integer")
    return value


def _time(container: Mapping[str, Any], name: str) -> datetime:
    try:
        return parse_timestamp(container.get(name))
    except ValueError as exc:
        _fail(STEP_FORMAT, f"{name}: {exc}")


def _is_did(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"did:[a-z0-9]+:\S+", value) is not None


# --- revoking -----------------------------------------------------------------------------


def revoke(status_list: StatusList, index: int) -> StatusList:
    """A copy of `status_list` with bit `index` set: the credential with that index is revoked.

    Revocation is permanent; publish the result in a re-signed status list credential. Raises
    IndexError when `index` is outside the list.
    """
    return status_list.set(index, True)


def revocation_event_body(
    credential_id: str,
    index: int,
    reason: str,
    *,
    status_list_credential: str | None = None,
) -> dict[str, Any]:
    """The body of the signed ledger event `credential.revoked` (`REVOCATION_EVENT_KIND`).

    Log it with `ledger.append(operator, REVOCATION_EVENT_KIND, subject=credential_id,
    body=revocation_event_body(...))`. Raises ValueError for an empty id or reason or a
    negative index.
    """
    if not isinstance(credential_id, str) or not credential_id:
        raise ValueError("a revocation names the credential id")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"a status list index is a non-negative integer, not {index!r}")
    if not isinstance(reason, str) or not reason:
        raise ValueError("a revocation states its reason")
    body: dict[str, Any] = {
        "credentialId": credential_id,
        "statusPurpose": "revocation",
        "statusListIndex": index,
        "reason": reason,
    }
    if status_list_credential is not None:
        body["statusListCredential"] = status_list_credential
    return body
