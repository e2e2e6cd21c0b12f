"""Issuing capability credentials for passed exams, and revoking them.

issue(exam result)
    allocate the next status-list index, issue a `CapabilityCredential` (operator =
    issuer), log `credential.issued`, keep it in `identity_credentials` and as
    `$ACCORD_HOME/credentials/<uuid>.json`.

revoke(credential_id, reason)
    set its status bit, re-sign and publish the status list credential
    (`accord.identity.status_lists`), log `credential.revoked`.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.identity.credentials import (
    REVOCATION_EVENT_KIND,
    VerifiedCredential,
    issue_capability_credential,
    revocation_event_body,
    transcript_reference,
    verify_credential,
)
from accord.identity.errors import RegistryError
from accord.identity.exams import ExamResult
from accord.identity.status import status_entry
from accord.identity.status_lists import StatusLists, operator_key, write_document
from accord.ledger.database import create_tables, db_reason, driver_mark, statement_connection
from accord.ledger.errors import AlreadyLoggedError
from accord.ledger.events import format_time
from accord.ledger.service import Ledger

ISSUED_EVENT_KIND = "credential.issued"
DEFAULT_VALIDITY = timedelta(days=180)
STATUS_INDEX_ATTEMPTS = 5


class IssuedCredential(SQLModel, table=True):
    """A credential the operator issued; `document` is its JSON."""

    __tablename__ = "identity_credentials"

    id: str = Field(primary_key=True)
    agent_did: str = Field(index=True)
    capability: str
    status_index: int = Field(sa_column=Column(BigInteger, nullable=False, unique=True))
    exam_id: str
    issued_at: str
    revoked_at: str | None = None
    revocation_reason: str | None = None
    document: str


_CREDENTIALS = IssuedCredential.__table__  # type: ignore[attr-defined]
_CREDENTIAL_COLUMNS = (
    "id, agent_did, capability, status_index, exam_id, issued_at, revoked_at, "
    "revocation_reason, document"
)


def _credentials_of_sql(engine: Engine) -> str:
    """The SQL text of `credentials_of`, sent to the driver itself: every bid runs it, and
    SQLAlchemy's compiled-statement machinery cost more CPU than the database's answer."""
    return (
        f"SELECT {_CREDENTIAL_COLUMNS} FROM identity_credentials "
        f"WHERE agent_did = {driver_mark(engine)} ORDER BY issued_at, id"
    )


class CredentialIssuer:
    """The operator's credentials: issued for passed exams, stored, revoked and verified
    against `status_lists`; each written to `folder` too.

    Raises RegistryError when its table cannot be prepared.
    """

    def __init__(
        self,
        ledger: Ledger,
        status_lists: StatusLists,
        folder: Path,
        *,
        valid_for: timedelta = DEFAULT_VALIDITY,
    ) -> None:
        self.ledger = ledger
        self.status_lists = status_lists
        self.folder = folder
        self.valid_for = valid_for
        self.engine: Engine = ledger.store.engine
        self.checked = CheckedCredentials(status_lists.status_lookup)
        """The status lists read and credentials verified lately (see `verify`)."""
        self._credentials_of = _credentials_of_sql(self.engine)
        try:
            create_tables(self.engine, [_CREDENTIALS])
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the credential tables: {db_reason(exc)}") from exc

    def issue(self, result: ExamResult) -> tuple[str, Path]:
        """Issue, log and store the credential for a passed exam; returns its id and file.

        The status-list index is the next free one; a process that loses it to another
        process issuing at the same moment signs again for the next. Raises RegistryError
        without the operator's Ed25519 key (or when the index is lost every time), and what the
        ledger raises.
        """
        now = self.ledger.clock()
        credential_id = uuid.uuid4().urn
        self.status_lists.ensure(now)
        for attempt in range(STATUS_INDEX_ATTEMPTS):
            try:
                with self.engine.begin() as connection:
                    index = int(
                        connection.execute(
                            select(func.coalesce(func.max(_CREDENTIALS.c.status_index), -1))
                        ).scalar_one()
                        + 1
                    )
                    document = issue_capability_credential(
                        operator_key(self.ledger),
                        result.agent_did,
                        result.capability,
                        result.earned,
                        result.possible,
                        result.item_count,
                        transcript_reference(self.ledger.log_id, result.graded_index),
                        result.seed_commitment,
                        status_entry(self.status_lists.url, index),
                        now,
                        self.valid_for,
                        credential_id=credential_id,
                    )
                    connection.execute(
                        insert(_CREDENTIALS).values(
                            id=credential_id,
                            agent_did=result.agent_did,
                            capability=result.capability,
                            status_index=index,
                            exam_id=result.exam_id,
                            issued_at=document["validFrom"],
                            document=json.dumps(document, sort_keys=True),
                        )
                    )
                break
            except IntegrityError as exc:
                # Another service process took this status-list index between our read and
                # our insert (the column is unique): sign again for the next free one.
                if attempt == STATUS_INDEX_ATTEMPTS - 1:
                    raise RegistryError(
                        "could not take a status-list index for the credential: other "
                        f"processes kept taking them ({exc.orig}); onboard again"
                    ) from exc
        self.ledger.append(
            self.ledger.operator,
            ISSUED_EVENT_KIND,
            subject=credential_id,
            body={
                "credentialId": credential_id,
                "agent": result.agent_did,
                "capability": result.capability,
                "examId": result.exam_id,
                "statusListIndex": index,
                "validUntil": document["validUntil"],
                "credential": document,
            },
        )
        path = write_document(
            self.folder, f"{credential_id.removeprefix('urn:uuid:')}.json", document
        )
        return credential_id, path

    def credential(self, credential_id: str) -> dict[str, Any]:
        """The stored credential row as JSON. Raises RegistryError when there is none."""
        with self.engine.begin() as connection:
            row = connection.execute(
                select(_CREDENTIALS).where(
                    _CREDENTIALS.c.id.in_([credential_id, f"urn:uuid:{credential_id}"])
                )
            ).first()
        if row is None:
            raise RegistryError(f"no credential {credential_id!r}")
        return _row_json(row)

    def holder_count(self, capability: str) -> int:
        """How many unrevoked credentials for `capability` were issued (to any agent)."""
        with self.engine.begin() as connection:
            found = connection.execute(
                select(func.count())
                .select_from(_CREDENTIALS)
                .where(_CREDENTIALS.c.capability == capability)
                .where(_CREDENTIALS.c.revoked_at.is_(None))
            ).scalar_one()
        return int(found)

    def credentials_of(self, agent_did: str) -> list[dict[str, Any]]:
        """The stored rows of `agent_did`'s credentials as JSON, oldest first (one query; the
        rows' `revoked_at` is read fresh every time)."""
        with statement_connection(self.engine) as connection:
            rows = connection.exec_driver_sql(self._credentials_of, (agent_did,)).all()
        return [_row_json(row) for row in rows]

    def revoke(
        self, credential_id: str, reason: str, *, evidence: Mapping[str, Any] | None = None
    ) -> int:
        """Revoke: set the status bit, re-sign and publish the list, log `credential.revoked`
        (with `evidence`, when a rule revokes it: what the rule computed, so that anyone can
        recompute it), once per credential whichever process gets there first.

        Returns the log index of the revocation event. Raises RegistryError for an unknown or
        already revoked credential (by this process or another) or an empty reason; and what
        the ledger raises.
        """
        if not reason.strip():
            raise RegistryError("a revocation needs a --reason")
        row = self.credential(credential_id)
        if row["revoked_at"] is not None:
            raise RegistryError(f"credential {row['id']} is already revoked")
        now = self.ledger.clock()
        index: int = row["status_index"]
        status_list = self.status_lists.current(now).set(index, True)
        body = revocation_event_body(
            row["id"], index, reason, status_list_credential=self.status_lists.url
        )
        if evidence is not None:
            body["evidence"] = dict(evidence)
        try:
            log_index, _ = self.ledger.append(
                self.ledger.operator,
                REVOCATION_EVENT_KIND,
                subject=row["id"],
                body=body,
                once_key=row["id"],
            )
        except AlreadyLoggedError as exc:
            raise RegistryError(f"credential {row['id']} is already revoked") from exc
        self.status_lists.publish(status_list, now)
        self.checked.forget()
        with self.engine.begin() as connection:
            connection.execute(
                update(_CREDENTIALS)
                .where(_CREDENTIALS.c.id == row["id"])
                .values(revoked_at=format_time(now), revocation_reason=reason)
            )
        return log_index

    def verify(
        self,
        document: Any,
        *,
        now: datetime | None = None,
        holder_did: str | None = None,
        capability: str | None = None,
    ) -> VerifiedCredential:
        """Run the credential checklist with this operator as the only trusted issuer and the
        published status list. Raises CredentialError naming the failed step.

        Revocation is seen at most `STATUS_RECHECK_S` late: the published status lists are
        read again, and every document verified against them checked again, once they are
        that old (`CheckedCredentials`); at once in this process after its own `revoke`.
        Validity at `now` is checked on every call.
        """
        when = self.ledger.clock() if now is None else now
        return self.checked.verify(
            document,
            when,
            lambda lookup: verify_credential(
                document,
                trusted_issuers={self.ledger.operator.did},
                holder_did=holder_did,
                now=when,
                status_lookup=lookup,
                capability=capability,
            ),
            (holder_did, capability),
        )


STATUS_RECHECK_S = 2.0
"""How stale a status list may be when a credential is verified against it (seconds)."""


class CheckedCredentials:
    """A process's memory of the status lists it read and the credentials it verified against
    them, both forgotten together every `ttl` seconds (monotonic `clock`) or on `forget`.

    Verifying a document again within that time returns the claims verified before (after
    checking the validity window at the new `now`) without reading the list or checking the
    signatures again; a document is keyed by its canonical text and the holder and
    capability asked for. A failed verification is not remembered.
    """

    def __init__(
        self,
        status_lookup: Callable[[str], dict[str, Any]],
        ttl: float = STATUS_RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = status_lookup
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._since = -math.inf
        self._lists: dict[str, dict[str, Any]] = {}
        self._verified: dict[tuple[str, Any], VerifiedCredential] = {}

    def forget(self) -> None:
        """Read the status lists again, and verify everything again, from now on."""
        with self._lock:
            self._lists, self._verified, self._since = {}, {}, -math.inf

    def status_lookup(self, url: str) -> dict[str, Any]:
        """The status list at `url`, read at most once per `ttl`. Raises KeyError as the
        store's lookup does (a missing list is not remembered)."""
        with self._lock:
            self._expire()
            found = self._lists.get(url)
        if found is None:
            found = self._lookup(url)
            with self._lock:
                self._lists.setdefault(url, found)
        return found

    def verify(
        self,
        document: Any,
        now: datetime,
        check: Callable[[Callable[[str], dict[str, Any]]], VerifiedCredential],
        asked: Any,
    ) -> VerifiedCredential:
        """`check(status_lookup)`'s claims, or those it gave for the same document and
        `asked` within `ttl` when `now` is still in their validity window. Raises what
        `check` raises."""
        try:
            key = (json.dumps(document, sort_keys=True), asked)
        except (TypeError, ValueError):
            return check(self.status_lookup)  # not JSON: the checklist says why
        with self._lock:
            self._expire()
            known = self._verified.get(key)
        if known is not None and known.valid_from <= now < known.valid_until:
            return known
        claims = check(self.status_lookup)
        with self._lock:
            self._verified[key] = claims
        return claims

    def _expire(self) -> None:
        """(under the lock) Forget everything once it is `ttl` old."""
        now = self._clock()
        if now - self._since >= self.ttl:
            self._lists, self._verified, self._since = {}, {}, now


def _row_json(row: Any) -> dict[str, Any]:
    """A stored credential row as JSON (its document parsed)."""
    return {
        "id": row.id,
        "agent": row.agent_did,
        "capability": row.capability,
        "status_index": row.status_index,
        "exam_id": row.exam_id,
        "issued_at": row.issued_at,
        "revoked_at": row.revoked_at,
        "revocation_reason": row.revocation_reason,
        "document": json.loads(row.document),
    }
