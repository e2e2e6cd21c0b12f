"""DID-auth: verifiable presentations bound to a one-time challenge, and the nonce stores.

Registration goes:

1. the network issues a challenge: `nonce = nonces.issue(domain, now, ttl)`;
2. the agent answers with `create_presentation(holder, credentials, nonce, domain, now)`: a VC 2.0
   `VerifiablePresentation` whose `holder` is its DID, with an eddsa-jcs-2022 proof of purpose
   `authentication` that signs the `challenge` and the `domain`;
3. the network calls `verify_presentation`, which checks the presentation's proof by the
   holder's did:key against the expected challenge and domain, consumes the nonce (so the same
   presentation never works twice), then verifies every credential with the presentation's
   holder as the required subject.

A nonce works once, also when several workers race for it: the SQL store consumes it with one
conditional `UPDATE … WHERE nonce = ? AND used_at IS NULL AND domain = ? AND expires_at > ?`
and succeeds only when exactly one row changed (atomic on SQLite and PostgreSQL alike).
"""

from __future__ import annotations

import copy
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

from sqlalchemy import BigInteger, Engine, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.identity.credentials import (
    STEP_CAPABILITY,
    StatusLookup,
    VerifiedCredential,
    verify_credential,
)
from accord.identity.dataintegrity import CRYPTOSUITE, PROOF_TYPE, add_proof, verify_proof
from accord.identity.errors import CredentialError, NonceError, ProofFormatError
from accord.identity.status import VC_V2_CONTEXT, format_timestamp
from accord.ledger.database import create_tables, db_reason
from accord.ledger.errors import MalformedError
from accord.ledger.signing import Ed25519Signer, b64url, public_key_from_did
from accord.ledger.views import micros

PRESENTATION_TYPE = "VerifiablePresentation"
PROOF_PURPOSE = "authentication"
STEP_PRESENTATION = "presentation"
"""`CredentialError.step` when the presentation itself is malformed."""
STEP_AUTHENTICATION = "authentication"
"""`CredentialError.step` when the presentation's proof, challenge or domain does not hold."""

NONCE_BYTES = 32


# --- presentations ------------------------------------------------------------------------


def create_presentation(
    holder: Ed25519Signer,
    credentials: list[dict[str, Any]],
    challenge: str,
    domain: str,
    now: datetime,
) -> dict[str, Any]:
    """A `VerifiablePresentation` of `credentials` by `holder`, signed with eddsa-jcs-2022
    (purpose `authentication`) over the `challenge` and `domain`, created `now`.

    Raises ValueError for an empty challenge or domain or a naive `now`; ProofFormatError when
    the credentials are not JSON that RFC 8785 can canonicalise.
    """
    _require_text(challenge, "challenge")
    _require_text(domain, "domain")
    presentation = {
        "@context": [VC_V2_CONTEXT],
        "type": [PRESENTATION_TYPE],
        "holder": holder.did,
        "verifiableCredential": copy.deepcopy(list(credentials)),
    }
    options = {
        "type": PROOF_TYPE,
        "cryptosuite": CRYPTOSUITE,
        "created": format_timestamp(now),
        "verificationMethod": holder.kid,
        "proofPurpose": PROOF_PURPOSE,
        "challenge": challenge,
        "domain": domain,
    }
    return add_proof(presentation, holder.seed, options)


def verify_presentation(
    presentation: Mapping[str, Any],
    *,
    challenge: str,
    domain: str,
    now: datetime,
    trusted_issuers: set[str] | frozenset[str],
    status_lookup: StatusLookup,
    nonces: NonceStore | None,
    required_capabilities: Iterable[str] = (),
) -> list[VerifiedCredential]:
    """Authenticate the holder of `presentation` and verify the credentials it carries.

    In order: the presentation's shape; its proof by the holder's did:key with purpose
    `authentication`, the expected `challenge` and `domain`; then, when `nonces` is given,
    `nonces.consume(challenge, domain, now)` (pass None only when the caller consumes the
    challenge itself); then every credential with `verify_credential(holder_did=holder)`; then
    that each of `required_capabilities` is covered by one of them.

    Raises CredentialError: step "presentation" for a malformed presentation, "authentication"
    for a proof that is missing, not the holder's, or not over this challenge and domain, the
    credential's own step (reason prefixed with its position) for a credential that fails, and
    "capability" for a required capability no credential covers. Raises NonceError when the
    challenge is unknown, expired, for another domain, or used. Raises ValueError for an empty
    challenge or domain or a naive `now`.
    """
    _require_text(challenge, "challenge")
    _require_text(domain, "domain")
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    holder, credentials = _parse_presentation(presentation)
    _authenticate(presentation, holder, challenge, domain)
    if nonces is not None:
        nonces.consume(challenge, domain, now)

    verified = []
    for position, credential in enumerate(credentials):
        try:
            verified.append(
                verify_credential(
                    credential,
                    trusted_issuers=trusted_issuers,
                    holder_did=holder,
                    now=now,
                    status_lookup=status_lookup,
                )
            )
        except CredentialError as exc:
            name = credential.get("id", "?")
            raise CredentialError(
                exc.step, f"credential #{position} ({name}): {exc.reason}"
            ) from exc
    covered = {credential.capability for credential in verified}
    for capability in required_capabilities:
        if capability not in covered:
            raise CredentialError(STEP_CAPABILITY, f"no valid credential for {capability!r}")
    return verified


def _parse_presentation(presentation: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]]]:
    if not isinstance(presentation, Mapping):
        _fail(STEP_PRESENTATION, "a presentation is a JSON object")
    context = presentation.get("@context")
    if not isinstance(context, list) or not context or context[0] != VC_V2_CONTEXT:
        _fail(STEP_PRESENTATION, f"@context must be a list starting with {VC_V2_CONTEXT!r}")
    types = presentation.get("type")
    kinds = types if isinstance(types, list) else [types]
    if PRESENTATION_TYPE not in kinds:
        _fail(STEP_PRESENTATION, f"type must include {PRESENTATION_TYPE!r}")
    holder = presentation.get("holder")
    if not isinstance(holder, str) or not holder.startswith("did:"):
        _fail(STEP_PRESENTATION, "holder must be the presenter's DID")
    carried = presentation.get("verifiableCredential", [])
    credentials = carried if isinstance(carried, list) else [carried]
    if not all(isinstance(credential, Mapping) for credential in credentials):
        _fail(STEP_PRESENTATION, "verifiableCredential must hold credential objects")
    return holder, credentials


def _authenticate(
    presentation: Mapping[str, Any], holder: str, challenge: str, domain: str
) -> None:
    proof = presentation.get("proof")
    if proof is None:
        _fail(STEP_AUTHENTICATION, "unsigned: the presentation has no proof")
    method = proof.get("verificationMethod") if isinstance(proof, Mapping) else None
    if not isinstance(method, str) or method.partition("#")[0] != holder:
        _fail(STEP_AUTHENTICATION, "the proof's verificationMethod is not a key of the holder")
    try:
        key = public_key_from_did(holder)
    except MalformedError as exc:
        _fail(STEP_AUTHENTICATION, f"cannot resolve the holder's key: {exc}")
    try:
        verify_proof(
            presentation,
            key,
            expected_purpose=PROOF_PURPOSE,
            challenge=challenge,
            domain=domain,
        )
    except CredentialError as exc:
        _fail(STEP_AUTHENTICATION, exc.reason)
    except ProofFormatError as exc:
        _fail(STEP_AUTHENTICATION, str(exc))


def _fail(step: str, reason: str) -> NoReturn:
    raise CredentialError(step, reason)


def _require_text(value: object, name: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")


# --- nonce stores -------------------------------------------------------------------------


class NonceStore(Protocol):
    """Issues DID-auth challenge nonces and consumes each at most once."""

    def issue(self, domain: str, now: datetime, ttl: timedelta) -> str:
        """A fresh nonce for `domain`, usable until `now + ttl` (exclusive).

        Raises ValueError for an empty domain, a non-positive ttl or a naive `now`; the SQL
        store raises NonceError when the database fails.
        """
        ...

    def consume(self, nonce: str, domain: str, now: datetime) -> None:
        """Mark `nonce` used. Raises NonceError when it is unknown, expired at `now`, issued for
        another domain, or already used (also when another caller just used it)."""
        ...


def new_nonce(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """32 random bytes as unpadded base64url (43 characters)."""
    return b64url(random_bytes(NONCE_BYTES))


def _check_issue(domain: str, ttl: timedelta) -> None:
    _require_text(domain, "domain")
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ValueError("a nonce's ttl must be a positive timedelta")


@dataclass(frozen=True)
class _NonceRecord:
    domain: str
    issued_at: int
    expires_at: int
    used_at: int | None = None


def _refusal(record: _NonceRecord | None, domain: str, now: int) -> NonceError:
    """Why a nonce could not be consumed (for the message only: the decision is made already)."""
    if record is None:
        return NonceError("unknown nonce")
    if record.used_at is not None:
        return NonceError("the nonce was already used")
    if record.domain != domain:
        return NonceError(f"the nonce was issued for another domain, not {domain!r}")
    if record.expires_at <= now:
        return NonceError("the nonce has expired")
    return NonceError("the nonce was just used by another request")


class InMemoryNonceStore:
    """A `NonceStore` in a dict behind a lock, for unit tests and single-process use."""

    def __init__(self, random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> None:
        self._random_bytes = random_bytes
        self._records: dict[str, _NonceRecord] = {}
        self._lock = threading.Lock()

    def issue(self, domain: str, now: datetime, ttl: timedelta) -> str:
        """See `NonceStore.issue`."""
        _check_issue(domain, ttl)
        record = _NonceRecord(domain, micros(now), micros(now + ttl))
        with self._lock:
            nonce = new_nonce(self._random_bytes)
            while nonce in self._records:
                nonce = new_nonce(self._random_bytes)
            self._records[nonce] = record
        return nonce

    def consume(self, nonce: str, domain: str, now: datetime) -> None:
        """See `NonceStore.consume`."""
        at = micros(now)
        with self._lock:
            record = self._records.get(nonce)
            if (
                record is None
                or record.used_at is not None
                or record.domain != domain
                or record.expires_at <= at
            ):
                raise _refusal(record, domain, at)
            self._records[nonce] = replace(record, used_at=at)

    def purge_expired(self, now: datetime) -> int:
        """Forget nonces that expired by `now`; returns how many."""
        at = micros(now)
        with self._lock:
            stale = [nonce for nonce, record in self._records.items() if record.expires_at <= at]
            for nonce in stale:
                del self._records[nonce]
        return len(stale)


class IdentityNonce(SQLModel, table=True):
    """One DID-auth challenge. Times are UTC microseconds since the Unix epoch."""

    __tablename__ = "identity_nonces"

    nonce: str = Field(primary_key=True)
    domain: str
    issued_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    expires_at: int = Field(sa_column=Column(BigInteger, nullable=False, index=True))
    used_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


_NONCES = IdentityNonce.__table__  # type: ignore[attr-defined]


class SqlNonceStore:
    """A `NonceStore` in the `identity_nonces` table (SQLite or PostgreSQL), safe across threads
    and processes: `consume` is one conditional UPDATE whose row count decides.

    Raises NonceError when the table cannot be created.
    """

    def __init__(
        self, engine: Engine, random_bytes: Callable[[int], bytes] = secrets.token_bytes
    ) -> None:
        self.engine = engine
        self._random_bytes = random_bytes
        try:
            create_tables(engine, [_NONCES])
        except SQLAlchemyError as exc:
            raise NonceError(f"cannot prepare the nonce table: {db_reason(exc)}") from exc

    def issue(self, domain: str, now: datetime, ttl: timedelta) -> str:
        """See `NonceStore.issue`."""
        _check_issue(domain, ttl)
        nonce = new_nonce(self._random_bytes)
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    insert(_NONCES).values(
                        nonce=nonce,
                        domain=domain,
                        issued_at=micros(now),
                        expires_at=micros(now + ttl),
                        used_at=None,
                    )
                )
        except SQLAlchemyError as exc:
            raise NonceError(f"cannot store the nonce: {db_reason(exc)}") from exc
        return nonce

    def consume(self, nonce: str, domain: str, now: datetime) -> None:
        """See `NonceStore.consume`. Also raises NonceError when the database fails."""
        at = micros(now)
        try:
            with self.engine.begin() as connection:
                changed = connection.execute(
                    update(_NONCES)
                    .where(
                        _NONCES.c.nonce == nonce,
                        _NONCES.c.used_at.is_(None),
                        _NONCES.c.domain == domain,
                        _NONCES.c.expires_at > at,
                    )
                    .values(used_at=at)
                ).rowcount
                if changed == 1:
                    return
                row = connection.execute(
                    select(
                        _NONCES.c.domain,
                        _NONCES.c.issued_at,
                        _NONCES.c.expires_at,
                        _NONCES.c.used_at,
                    ).where(_NONCES.c.nonce == nonce)
                ).first()
        except SQLAlchemyError as exc:
            raise NonceError(f"cannot consume the nonce: {db_reason(exc)}") from exc
        record = None if row is None else _NonceRecord(str(row[0]), row[1], row[2], row[3])
        raise _refusal(record, domain, at)

    def purge_expired(self, now: datetime) -> int:
        """Delete nonces that expired by `now`; returns how many. Raises NonceError when the
        database fails."""
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    _NONCES.delete().where(_NONCES.c.expires_at <= micros(now))
                )
        except SQLAlchemyError as exc:
            raise NonceError(f"cannot purge nonces: {db_reason(exc)}") from exc
        return int(result.rowcount)
