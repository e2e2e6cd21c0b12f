"""Issuing capability credentials for passed exams, and revoking them.

issue(exam result)
    allocate the next status-list index, issue a `CapabilityCredential` (operator =
    issuer), log `credential.issued`, keep it in `identity_credentials` and as
    `$ACCORD_HOME/credentials/<uuid>.json`.

revoke(credential_id, reason)
    set its status bit, re-sign and publish the status list credential
    (`identity.status_lists`), log `credential.revoked`.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from identity.credentials import (
    REVOCATION_EVENT_KIND,
    VerifiedCredential,
    issue_capability_credential,
    revocation_event_body,
    transcript_reference,
    verify_credential,
)
from identity.errors import RegistryError
from identity.exams import ExamResult
from identity.status import status_entry
from identity.status_lists import StatusLists, operator_key, write_document
from ledger.events import format_time
from ledger.service import Ledger
from ledger.store import create_tables

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
        try:
            create_tables(self.engine, [_CREDENTIALS])
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the credential tables: {exc}") from exc

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
        with self.engine.begin() as connection:
            ids = connection.execute(
                select(_CREDENTIALS.c.id)
                .where(_CREDENTIALS.c.agent_did == agent_did)
                .order_by(_CREDENTIALS.c.issued_at)
            ).scalars()
            found = list(ids)
        return [self.credential(credential_id) for credential_id in found]

    def revoke(self, credential_id: str, reason: str) -> int:
        """Revoke: set the status bit, re-sign and publish the list, log `credential.revoked`.

        Returns the log index of the revocation event. Raises RegistryError for an unknown or
        already revoked credential or an empty reason; and what the ledger raises.
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
        log_index, _ = self.ledger.append(
            self.ledger.operator, REVOCATION_EVENT_KIND, subject=row["id"], body=body
        )
        self.status_lists.publish(status_list, now)
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
        published status list. Raises CredentialError naming the failed step."""
        return verify_credential(
            document,
            trusted_issuers={self.ledger.operator.did},
            holder_did=holder_did,
            now=self.ledger.clock() if now is None else now,
            status_lookup=self.status_lists.status_lookup,
            capability=capability,
        )
