"""Onboarding: exam an agent in each capability and issue a credential for each one it passes.

    onboard(agent, ["arithmetic", …], progress)
        for each capability: start an exam (operator commits), let the agent's runtime answer
        every item (each answer signed by the agent's key), grade and reveal; on a pass,
        allocate the next status-list index, issue a `CapabilityCredential` (operator =
        issuer), log `credential.issued`, keep it in `identity_credentials` and as
        `$ACCORD_HOME/credentials/<uuid>.json`.

    revoke(credential_id, reason)
        set its status bit, re-sign and publish the status list credential, log
        `credential.revoked`.

The status list credential is kept in `identity_status_lists` and published as
`$ACCORD_HOME/credentials/status-list.json`; `verify` reads it from there. Its URL, the
`statusListCredential` of every credential issued, is `status_list_url(public_url)`, where the
service serves it (`GET /credentials/status/revocation`) for any verifier to follow. One
bitstring backs every URL a credential was ever issued with (an earlier public URL, or the
`urn:accord:status:…` of credentials issued before lists were served): a revocation re-signs
the list under each of them, so older credentials keep verifying.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import BigInteger, Engine, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from identity.address_guard import agent_client
from identity.agents import Agent, AgentRecord, AgentRegistry
from identity.challenges import JSON, get_capability
from identity.credentials import (
    REVOCATION_EVENT_KIND,
    VerifiedCredential,
    issue_capability_credential,
    revocation_event_body,
    transcript_reference,
    verify_credential,
)
from identity.errors import (
    BindingError,
    CredentialError,
    ExamError,
    KeyStoreError,
    RegistryError,
)
from identity.exams import ExamResult, ExamService, check_agent_entry
from identity.payout import bind_payout_address, verify_binding
from identity.presentations import SqlNonceStore, create_presentation, verify_presentation
from identity.runtimes import AgentRuntime, check_url
from identity.status import StatusList, status_entry, status_list_credential
from ledger.errors import MalformedError
from ledger.events import Entry, format_time
from ledger.service import Ledger
from ledger.settings import DEFAULT_PUBLIC_URL, Settings
from ledger.signing import Ed25519Signer, Signer, from_b64url, kid_for, verify_signature

ISSUED_EVENT_KIND = "credential.issued"
REGISTERED_KIND = "agent.registered"
PAYOUT_BOUND_KIND = "payout.bound"
REGISTRATION_CHALLENGE_TTL = timedelta(minutes=5)
DEFAULT_VALIDITY = timedelta(days=180)
STATUS_LIST_FILE = "status-list.json"
STATUS_LIST_PATH = "/credentials/status/revocation"
"""Where the service serves the revocation list, below its public URL."""


def status_list_url(public_url: str) -> str:
    """The URL of the revocation status list credential of the service at `public_url`."""
    return public_url.rstrip("/") + STATUS_LIST_PATH


Progress = Callable[[str, int, int], None]
"""progress(capability, items answered, items in the exam)."""


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


class PublishedStatusList(SQLModel, table=True):
    """The current signed status list credential at `url`."""

    __tablename__ = "identity_status_lists"

    url: str = Field(primary_key=True)
    document: str


_CREDENTIALS = IssuedCredential.__table__  # type: ignore[attr-defined]
_STATUS_LISTS = PublishedStatusList.__table__  # type: ignore[attr-defined]
_AGENTS = Agent.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class CapabilityOutcome:
    """The result of one capability's exam, and the credential when it passed."""

    exam: ExamResult
    credential_id: str | None
    credential_path: Path | None
    answer_failures: int

    def to_json(self) -> dict[str, Any]:
        return {
            "capability": self.exam.capability,
            "exam_id": self.exam.exam_id,
            "earned": self.exam.earned,
            "possible": self.exam.possible,
            "items": self.exam.item_count,
            "passed": self.exam.passed,
            "credential_id": self.credential_id,
            "credential_file": None if self.credential_path is None else str(self.credential_path),
            "answer_failures": self.answer_failures,
        }


class Onboarding:
    """Exams, credentials and revocation over one ledger and one credentials folder.

    Raises RegistryError when its tables cannot be prepared.
    """

    def __init__(
        self,
        ledger: Ledger,
        registry: AgentRegistry,
        exams: ExamService,
        credentials_dir: Path,
        *,
        valid_for: timedelta = DEFAULT_VALIDITY,
        public_url: str = DEFAULT_PUBLIC_URL,
    ) -> None:
        self.ledger = ledger
        self.registry = registry
        self.exams = exams
        self.credentials_dir = credentials_dir
        self.valid_for = valid_for
        self.engine: Engine = ledger.store.engine
        self.status_list_url = status_list_url(public_url)
        self.domain = f"urn:accord:network:{ledger.log_id}"
        self.nonces = SqlNonceStore(ledger.store.engine)
        try:
            SQLModel.metadata.create_all(self.engine, tables=[_CREDENTIALS, _STATUS_LISTS])
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the credential tables: {exc}") from exc

    @property
    def operator_did(self) -> str:
        return self.ledger.operator.did

    def _operator_key(self) -> Ed25519Signer:
        operator = self.ledger.operator
        if not isinstance(operator, Ed25519Signer):
            raise RegistryError("issuing credentials needs the operator's Ed25519 key")
        return operator

    # -- registration (DID-auth) --

    def registration_index(self, agent: AgentRecord) -> int | None:
        """The ledger index of the agent's `agent.registered` event, if it registered."""
        found = self.ledger.store.find(kind=REGISTERED_KIND, actor=agent.did, limit=1)
        return found[0].index if found else None

    def register(self, agent: AgentRecord, *, holder: Ed25519Signer | None = None) -> int:
        """DID-auth: the operator issues a fresh challenge for the network's domain, the agent
        answers with a presentation signed by its did:key over that challenge and domain, the
        operator verifies it (the challenge works once), and the agent's signed
        `agent.registered` event is logged. Returns its ledger index; an agent already
        registered is not registered twice.

        `holder` signs the presentation (default: the agent's own key; tests pass another).
        Raises CredentialError when the presentation does not authenticate the agent,
        NonceError when the challenge was used or expired.
        """
        existing = self.registration_index(agent)
        if existing is not None:
            return existing
        signer = self.registry.signer(agent)
        now = self.ledger.clock()
        challenge = self.nonces.issue(self.domain, now, REGISTRATION_CHALLENGE_TTL)
        presentation = create_presentation(holder or signer, [], challenge, self.domain, now)
        return self.admit(agent, presentation, challenge)

    def admit(self, agent: AgentRecord, presentation: dict[str, Any], challenge: str) -> int:
        """Verify a registration presentation for `challenge` and log the agent's event.

        Raises CredentialError (step authentication) when it is not the agent's, NonceError
        when the challenge is unknown, expired or used.
        """
        verify_presentation(
            presentation,
            challenge=challenge,
            domain=self.domain,
            now=self.ledger.clock(),
            trusted_issuers={self.operator_did},
            status_lookup=self.status_lookup,
            nonces=self.nonces,
        )
        if presentation.get("holder") != agent.did:
            raise CredentialError("authentication", f"the presentation is not {agent.did}'s")
        index, _ = self.ledger.append(
            self.registry.signer(agent),
            REGISTERED_KIND,
            subject=agent.did,
            body={
                "name": agent.name,
                "domain": self.domain,
                "challenge": challenge,
                "proof": presentation["proof"],
            },
        )
        return index

    # -- payout address --

    def payout_address(self, did: str, chain_id: int) -> str | None:
        """The address `did` bound for payouts on `chain_id` (its latest valid binding)."""
        found = self.ledger.store.find(kind=PAYOUT_BOUND_KIND, actor=did, limit=1000)
        for stored in reversed(found):
            binding = Entry.from_bytes(stored.data).event.body.get("binding")
            try:
                bound_did, address = verify_binding(binding or {}, chain_id=chain_id)
            except BindingError:
                continue
            if bound_did == did:
                return address
        return None

    def bind_payout(self, agent: AgentRecord, chain_id: int) -> str:
        """Give the agent a secp256k1 payout account (a key file, mode 0600, made once) and
        log its binding, signed by both keys, unless one is already bound. Returns the address.

        Raises KeyStoreError when the key file is unreadable.
        """
        existing = self.payout_address(agent.did, chain_id)
        if existing is not None:
            return existing
        from eth_account import Account  # slow to import; only binding needs it

        account = Account.from_key(self._payout_key(agent))
        signer = self.registry.signer(agent)
        binding = bind_payout_address(
            signer, account, chain_id, secrets.token_hex(16), self.ledger.clock()
        )
        self.ledger.append(signer, PAYOUT_BOUND_KIND, subject=agent.did, body={"binding": binding})
        return str(account.address)

    def payout_key(self, agent: AgentRecord) -> str:
        """The agent's payout account key (hex), made on first use."""
        return self._payout_key(agent)

    def _payout_key(self, agent: AgentRecord) -> str:
        path = self.registry.agent_keys_dir / f"{agent.name}.eth.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            key = "0x" + secrets.token_bytes(32).hex()
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as handle:
                    json.dump({"did": agent.did, "key": key}, handle)
        try:
            document = json.loads(path.read_text())
            return str(document["key"])
        except (OSError, ValueError, KeyError) as exc:
            raise KeyStoreError(f"cannot read the payout key {path}: {exc}") from exc

    # -- remote agents: they hold their own keys and sign their own entries --

    def admit_remote(
        self,
        name: str,
        endpoint: str,
        presentation: dict[str, Any],
        challenge: str,
        entry: Entry,
    ) -> tuple[AgentRecord, int]:
        """Register an agent whose key the service never sees: an `http` agent at `endpoint`
        (teams reach it there) with no key file. `entry` is the agent's own signed
        `agent.registered` event, exactly what `admit` would log; the presentation over
        `challenge` authenticates the same DID. Returns the record and the event's log index
        (an agent already registered is returned as it is, with its first index).

        Raises RegistryError for a bad name or endpoint, a name or DID already taken by another
        agent; ExamError when the entry is not the expected one; CredentialError and NonceError
        as `admit`; SequenceError for a seq that is not the agent's next.
        """
        did = entry.event.actor
        existing = self.registry._find(did)
        if existing is not None:
            index = self.registration_index(existing)
            if index is not None:
                return existing, index
            raise RegistryError(f"{did} is already an agent here ({existing.name!r})")
        self.registry.check_spec(name, "http", None, endpoint)
        if self.registry._find(name) is not None:
            raise RegistryError(f"an agent called {name!r} already exists")
        if self.registry.key_path(name).exists():
            raise RegistryError(f"a key file for {name!r} already exists: choose another name")
        now = self.ledger.clock()
        record = AgentRecord(name, did, "http", None, format_time(now), endpoint=endpoint)
        check_agent_entry(
            entry,
            actor=did,
            kind=REGISTERED_KIND,
            subject=did,
            body=self.registration_body(record, challenge, presentation),
            now=now,
        )
        if presentation.get("holder") != did:
            raise CredentialError("authentication", f"the presentation is not {did}'s")
        verify_presentation(
            presentation,
            challenge=challenge,
            domain=self.domain,
            now=now,
            trusted_issuers={self.operator_did},
            status_lookup=self.status_lookup,
            nonces=self.nonces,
        )
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(_AGENTS).values(**record.to_json()))
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot register the agent: {exc}") from exc
        (index,) = self.ledger.append_entries([entry])
        return record, index

    def registration_body(
        self, agent: AgentRecord, challenge: str, presentation: dict[str, Any]
    ) -> dict[str, Any]:
        """The body of the agent's `agent.registered` event (as `admit` logs it)."""
        return {
            "name": agent.name,
            "domain": self.domain,
            "challenge": challenge,
            "proof": presentation.get("proof"),
        }

    def bind_payout_signed(self, agent: AgentRecord, entry: Entry, chain_id: int) -> str:
        """Log a `payout.bound` entry the agent signed itself, carrying its binding (signed by
        its DID key and its payout account); returns the bound address.

        Raises BindingError when the binding does not verify, is for another chain or another
        DID; ExamError when the entry is not the agent's `payout.bound` event with exactly
        `{"binding": ...}`; SequenceError for a seq that is not the agent's next.
        """
        binding = entry.event.body.get("binding")
        if not isinstance(binding, dict):
            raise BindingError("a payout.bound body is {binding}")
        check_agent_entry(
            entry,
            actor=agent.did,
            kind=PAYOUT_BOUND_KIND,
            subject=agent.did,
            body={"binding": binding},
            now=self.ledger.clock(),
        )
        bound_did, address = verify_binding(binding, chain_id=chain_id)
        if bound_did != agent.did:
            raise BindingError(f"the binding is {bound_did}'s, not {agent.did}'s")
        self.ledger.append_entries([entry])
        return address

    def grade_and_issue(self, exam_id: str) -> CapabilityOutcome:
        """Grade an exam whose answers were logged (by the agent itself) and, on a pass, issue
        the credential. Raises what `ExamService.grade` raises."""
        result = self.exams.grade(exam_id)
        credential_id, path = (None, None)
        if result.passed:
            credential_id, path = self._issue(result)
        return CapabilityOutcome(result, credential_id, path, 0)

    def member_signer(self, agent: AgentRecord) -> Signer:
        """Who signs for `agent` in a team: its key file, or, for a remote `http` agent
        without one, the agent itself at its endpoint (`EndpointSigner`).

        Raises KeyStoreError when neither is available.
        """
        if self.registry.key_path(agent.name).exists() or agent.runtime != "http":
            return self.registry.signer(agent)
        if not agent.endpoint:
            raise KeyStoreError(f"{agent.name!r} has neither a key file nor an endpoint")
        return EndpointSigner(
            agent.did, agent.endpoint, allow_private=self.registry.allow_private_agents
        )

    # -- onboarding --

    def onboard(
        self,
        agent: AgentRecord,
        capabilities: Sequence[str],
        progress: Progress | None = None,
        *,
        runtime: AgentRuntime | None = None,
        item_count: int | None = None,
    ) -> list[CapabilityOutcome]:
        """Exam `agent` in each capability, in order, with its runtime (or `runtime`).

        An item the runtime cannot answer (it raises ExamError) is left unanswered. Raises
        ExamError for an unknown capability (checked for all before anything starts),
        RateLimitedError, KeyStoreError for the agent's key, and what the ledger raises. An
        agent that has not registered is registered first (DID-auth, see `register`).
        """
        if not capabilities:
            raise ExamError("name at least one capability")
        for name in capabilities:
            get_capability(name)
        signer = self.registry.signer(agent)
        answer_with = runtime or self.registry.runtime(agent)
        self.register(agent)
        outcomes = []
        for name in capabilities:
            session = self.exams.start(agent.did, name, item_count)
            total = len(session.items)
            failures = 0
            if progress is not None:
                progress(name, 0, total)
            for done, item in enumerate(session.items, start=1):
                try:
                    answer: JSON = answer_with.answer(item)
                    self.exams.answer(signer, session.exam_id, str(item["item_id"]), answer)
                except ExamError:
                    failures += 1
                if progress is not None:
                    progress(name, done, total)
            result = self.exams.grade(session.exam_id)
            credential_id, path = (None, None)
            if result.passed:
                credential_id, path = self._issue(result)
            outcomes.append(CapabilityOutcome(result, credential_id, path, failures))
        return outcomes

    def _issue(self, result: ExamResult) -> tuple[str, Path]:
        """Issue, log and store the credential for a passed exam."""
        now = self.ledger.clock()
        credential_id = uuid.uuid4().urn
        self._ensure_status_list(now)
        with self.engine.begin() as connection:
            index = int(
                connection.execute(
                    select(func.coalesce(func.max(_CREDENTIALS.c.status_index), -1))
                ).scalar_one()
                + 1
            )
            document = issue_capability_credential(
                self._operator_key(),
                result.agent_did,
                result.capability,
                result.earned,
                result.possible,
                result.item_count,
                transcript_reference(self.ledger.log_id, result.graded_index),
                result.seed_commitment,
                status_entry(self.status_list_url, index),
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
        path = self._write(f"{credential_id.removeprefix('urn:uuid:')}.json", document)
        return credential_id, path

    # -- credentials --

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
        status_list = self._status_list(now).set(index, True)
        body = revocation_event_body(
            row["id"], index, reason, status_list_credential=self.status_list_url
        )
        log_index, _ = self.ledger.append(
            self.ledger.operator, REVOCATION_EVENT_KIND, subject=row["id"], body=body
        )
        self._publish(status_list, now)
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
            trusted_issuers={self.operator_did},
            holder_did=holder_did,
            now=self.ledger.clock() if now is None else now,
            status_lookup=self.status_lookup,
            capability=capability,
        )

    def status_lookup(self, url: str) -> dict[str, Any]:
        """The published status list credential at `url`. Raises KeyError when there is none."""
        with self.engine.begin() as connection:
            text = connection.execute(
                select(_STATUS_LISTS.c.document).where(_STATUS_LISTS.c.url == url)
            ).scalar_one_or_none()
        if text is None:
            raise KeyError(f"no status list {url}")
        value: dict[str, Any] = json.loads(text)
        return value

    def status_list_at(self, path: str) -> dict[str, Any]:
        """The published status list credential whose URL has the path `path` (the service
        serves it there whatever host it is reached by), the current URL's first.

        Raises KeyError when none has that path.
        """
        for url in [self.status_list_url, *self._published_urls()]:
            if urlsplit(url).path == path:
                try:
                    return self.status_lookup(url)
                except KeyError:
                    continue
        raise KeyError(f"no status list at {path}")

    # -- the status list --

    def _published_urls(self) -> list[str]:
        with self.engine.begin() as connection:
            return list(
                connection.execute(select(_STATUS_LISTS.c.url).order_by(_STATUS_LISTS.c.url))
                .scalars()
                .all()
            )

    def _status_list(self, now: datetime) -> StatusList:
        """The one bitstring: every published list's bits together (they are kept equal)."""
        self._ensure_status_list(now)
        return self._combined()

    def _combined(self) -> StatusList:
        combined = bytearray(StatusList.empty().bits)
        for url in self._published_urls():
            document = self.status_lookup(url)
            bits = StatusList.decode(document["credentialSubject"]["encodedList"]).bits
            if len(bits) > len(combined):
                combined.extend(bytes(len(bits) - len(combined)))
            for position, byte in enumerate(bits):
                combined[position] |= byte
        return StatusList(bytes(combined))

    def _ensure_status_list(self, now: datetime) -> None:
        try:
            self.status_lookup(self.status_list_url)
        except KeyError:
            self._publish(self._combined(), now)

    def _publish(self, status_list: StatusList, now: datetime) -> None:
        """Sign `status_list` under the current URL and every URL already published."""
        urls = dict.fromkeys([self.status_list_url, *self._published_urls()])
        for url in urls:
            document = status_list_credential(self._operator_key(), url, status_list, now=now)
            text = json.dumps(document, sort_keys=True)
            with self.engine.begin() as connection:
                changed = connection.execute(
                    update(_STATUS_LISTS).where(_STATUS_LISTS.c.url == url).values(document=text)
                ).rowcount
                if changed == 0:
                    connection.execute(insert(_STATUS_LISTS).values(url=url, document=text))
            if url == self.status_list_url:
                self._write(STATUS_LIST_FILE, document)

    def _write(self, name: str, document: dict[str, Any]) -> Path:
        self.credentials_dir.mkdir(parents=True, exist_ok=True)
        path = self.credentials_dir / name
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        temporary.replace(path)
        return path


SIGN_PATH = "/sign"
SIGN_TIMEOUT = 30.0


def sign_url(endpoint: str) -> str:
    """Where a remote agent signs its own events: its endpoint's origin + `/sign`."""
    parts = urlsplit(check_url(endpoint, "the agent endpoint"))
    return urlunsplit((parts.scheme, parts.netloc, SIGN_PATH, "", ""))


class EndpointSigner:
    """A `Signer` for a remote agent: the bytes to sign (JCS of an event whose actor is the
    agent) are POSTed to the agent's `/sign` as `{"event": text}`; the agent decides whether
    it signs (a team member signs only its own reports) and replies `{"sig": base64url}`.
    The signature is checked before it is returned.

    Like every request to an agent it goes to a public address only unless `allow_private`
    (`identity.address_guard`). `sign` raises KeyStoreError when the agent cannot be reached,
    is at a refused address, or refuses; SignatureError when its signature does not verify.
    """

    def __init__(
        self,
        did: str,
        endpoint: str,
        timeout: float = SIGN_TIMEOUT,
        *,
        allow_private: bool = False,
    ) -> None:
        self.did = did
        self.kid = kid_for(did)
        self.url = sign_url(endpoint)
        self.timeout = timeout
        self.allow_private = allow_private

    def sign(self, message: bytes) -> bytes:
        try:
            with agent_client(self.timeout, allow_private=self.allow_private) as client:
                response = client.post(self.url, json={"event": message.decode()})
        except httpx.HTTPError as exc:
            raise KeyStoreError(f"cannot reach {self.did} at {self.url}: {exc}") from exc
        if response.status_code != 200:
            raise KeyStoreError(
                f"{self.did} refused to sign (HTTP {response.status_code}): {response.text[:200]}"
            )
        try:
            signature = from_b64url(str(response.json()["sig"]))
        except (ValueError, KeyError, TypeError, MalformedError) as exc:
            raise KeyStoreError(f"{self.did} sent no signature: {exc}") from exc
        verify_signature(self.did, message, signature)
        return signature


def open_onboarding(settings: Settings, ledger: Ledger | None = None) -> Onboarding:
    """Onboarding over the configured store and keys; the ledger is opened without a chain
    unless one is given. Raises StoreError, RegistryError, ExamError."""
    if ledger is None:
        from ledger.runtime import open_ledger  # the chain client: imported only when needed

        ledger = open_ledger(settings)
    registry = AgentRegistry(
        ledger.store.engine,
        settings.keys_dir,
        allow_private_agents=settings.allow_private_agents,
    )
    return Onboarding(
        ledger,
        registry,
        ExamService(ledger),
        settings.home / "credentials",
        public_url=settings.public_url,
    )
