"""The credential view: who holds a credential for what, folded from the log
(`accord.ledger.views`).

    view_credentials    one row per `credential.issued` the operator logged: the holder, the
                        capability, its validity window (epoch µs), the log index, and
                        whether a `credential.revoked` of the operator followed

indexed by (capability, holder), so "agents holding a valid credential for X, by DID, after a
cursor" is one indexed query and "what does each of these agents hold" one more. Expiry
depends on the clock, so the window is stored and filtered at query time.

Only entries signed by the operator count: the issuer of every credential accord trusts. The
view answers discovery and agent lists; admitting a bid still verifies the credential document
itself (`Market.eligible`), and the audit never reads the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Index, Table, delete, insert, select, update
from sqlmodel import Column, Field, SQLModel

from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.identity.status import parse_timestamp
from accord.ledger.errors import MalformedError
from accord.ledger.events import parse_time
from accord.ledger.views import ViewEntry, micros

VIEW_NAME = "credentials"
ISSUED_KIND = "credential.issued"
_IN_CHUNK = 500


class CredentialRow(SQLModel, table=True):
    __tablename__ = "view_credentials"
    __table_args__ = (Index("ix_view_credentials_capability_agent", "capability", "agent"),)

    credential_id: str = Field(primary_key=True)
    agent: str = Field(index=True)
    capability: str
    valid_from_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    valid_until_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    issued_index: int = Field(sa_column=Column(BigInteger, nullable=False))
    revoked: bool = False


CREDENTIALS: Table = CredentialRow.__table__  # type: ignore[attr-defined]


class CredentialView:
    """The credential projection (`accord.ledger.views.Projection`), trusting `operator_did`
    only."""

    name = VIEW_NAME
    tables: Sequence[Table] = (CREDENTIALS,)

    def __init__(self, operator_did: str) -> None:
        self.operator_did = operator_did

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        issued: list[dict[str, Any]] = []
        revoked: list[str] = []
        for entry in entries:
            event = entry.event
            if event.actor != self.operator_did:
                continue
            if event.kind == ISSUED_KIND:
                row = issued_row(entry)
                if row is not None:
                    issued.append(row)
            elif event.kind == REVOCATION_EVENT_KIND:
                revoked.append(event.subject)
        if issued:
            ids = [row["credential_id"] for row in issued]
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                connection.execute(
                    delete(CREDENTIALS).where(CREDENTIALS.c.credential_id.in_(chunk))
                )
            connection.execute(
                insert(CREDENTIALS), list({r["credential_id"]: r for r in issued}.values())
            )
        for start in range(0, len(revoked), _IN_CHUNK):
            chunk = revoked[start : start + _IN_CHUNK]
            connection.execute(
                update(CREDENTIALS)
                .where(CREDENTIALS.c.credential_id.in_(chunk))
                .values(revoked=True)
            )

    def reset(self, connection: Any) -> None:
        connection.execute(delete(CREDENTIALS))


def issued_row(entry: ViewEntry) -> dict[str, Any] | None:
    """The view row of a `credential.issued` entry, or None when its body is not one (pure)."""
    body = entry.event.body
    document = body.get("credential")
    try:
        credential_id, agent = body["credentialId"], body["agent"]
        capability = body["capability"]
        valid_from = parse_timestamp(document["validFrom"]) if isinstance(document, dict) else None
        valid_until = parse_timestamp(body["validUntil"])
    except (KeyError, TypeError, ValueError, MalformedError):
        return None
    if not all(isinstance(v, str) and v for v in (credential_id, agent, capability)):
        return None
    return {
        "credential_id": credential_id,
        "agent": agent,
        "capability": capability,
        "valid_from_us": micros(valid_from or parse_time(entry.event.at)),
        "valid_until_us": micros(valid_until),
        "issued_index": entry.index,
        "revoked": False,
    }


def _valid(now: datetime) -> list[Any]:
    now_us = micros(now)
    return [
        CREDENTIALS.c.revoked.is_(False),
        CREDENTIALS.c.valid_from_us <= now_us,
        CREDENTIALS.c.valid_until_us > now_us,
    ]


def holders(
    connection: Any, capability: str, now: datetime, *, after: str | None, limit: int | None
) -> list[str]:
    """DIDs holding an unrevoked credential for `capability` valid at `now`, in DID order,
    after the DID `after`; at most `limit` (None: all)."""
    query = (
        select(CREDENTIALS.c.agent)
        .where(CREDENTIALS.c.capability == capability, *_valid(now))
        .distinct()
        .order_by(CREDENTIALS.c.agent)
    )
    if after is not None:
        query = query.where(CREDENTIALS.c.agent > after)
    if limit is not None:
        query = query.limit(limit)
    return [str(did) for did in connection.execute(query).scalars()]


def capabilities_of(connection: Any, dids: Iterable[str], now: datetime) -> dict[str, list[str]]:
    """The capabilities each DID holds a valid, unrevoked credential for at `now`, sorted."""
    wanted = sorted(set(dids))
    held: dict[str, set[str]] = {did: set() for did in wanted}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        rows = connection.execute(
            select(CREDENTIALS.c.agent, CREDENTIALS.c.capability).where(
                CREDENTIALS.c.agent.in_(chunk), *_valid(now)
            )
        ).all()
        for agent, capability in rows:
            held[str(agent)].add(str(capability))
    return {did: sorted(capabilities) for did, capabilities in held.items()}


def credentials_held(connection: Any, agent: str, capability: str, *, before: int) -> list[str]:
    """The ids of `agent`'s unrevoked credentials for `capability` whose `credential.issued`
    was logged before index `before`, oldest first (valid or not)."""
    rows = connection.execute(
        select(CREDENTIALS.c.credential_id)
        .where(
            CREDENTIALS.c.agent == agent,
            CREDENTIALS.c.capability == capability,
            CREDENTIALS.c.revoked.is_(False),
            CREDENTIALS.c.issued_index < before,
        )
        .order_by(CREDENTIALS.c.issued_index)
    )
    return [str(credential_id) for credential_id in rows.scalars()]
