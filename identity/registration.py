"""Registering an agent on the network by DID-auth, local or remote.

The operator issues a fresh challenge for the network's domain (`urn:accord:network:<log id>`);
the agent answers with a presentation signed by its did:key over that challenge and domain;
the operator verifies it (the challenge works once) and the agent's own signed
`agent.registered` event is logged. A remote agent (`admit_remote`) holds its key itself and
sends that event already signed.

The event declares who holds the agent's key (`custody`): `hosted` for an agent this service
made and signs for (`accord agent new`: its key file is in the operator's home, so what it
"signed" proves only that the operator signed), `self` for an agent that keeps its own key. The
audit and the explorer show it beside every signature (`custody_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Engine, insert
from sqlalchemy.exc import SQLAlchemyError

from accord.identity.address_guard import check_endpoint_address, check_url
from accord.identity.agents import Agent, AgentRecord, AgentRegistry
from accord.identity.errors import CredentialError, RegistryError
from accord.identity.exams import check_agent_entry
from accord.identity.presentations import SqlNonceStore, create_presentation, verify_presentation
from accord.ledger.database import db_reason
from accord.ledger.events import Entry, Event, format_time
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer

REGISTERED_KIND = "agent.registered"
REGISTRATION_CHALLENGE_TTL = timedelta(minutes=5)
Custody = Literal["hosted", "self"]
HOSTED: Custody = "hosted"
SELF: Custody = "self"

_AGENTS = Agent.__table__  # type: ignore[attr-defined]


class Registration:
    """DID-auth registration of the agents in `registry` on `ledger`'s network.

    `status_lookup` finds the status list credentials that presentations may point to.
    """

    def __init__(
        self,
        ledger: Ledger,
        registry: AgentRegistry,
        status_lookup: Callable[[str], dict[str, Any]],
    ) -> None:
        self.ledger = ledger
        self.registry = registry
        self.status_lookup = status_lookup
        self.engine: Engine = ledger.store.engine
        self.domain = f"urn:accord:network:{ledger.log_id}"
        self.nonces = SqlNonceStore(ledger.store.engine)

    def registration_index(self, agent: AgentRecord) -> int | None:
        """The ledger index of the agent's `agent.registered` event, if it registered."""
        found = self.ledger.store.find(kind=REGISTERED_KIND, actor=agent.did, limit=1)
        return found[0].index if found else None

    def custody(self, agent: AgentRecord) -> Custody | None:
        """Who holds the agent's key, as its `agent.registered` declares (None before it
        registered)."""
        found = self.ledger.store.find(kind=REGISTERED_KIND, actor=agent.did, limit=1)
        if not found:
            return None
        return custody_of([Entry.from_bytes(found[0].data).event]).get(agent.did)

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
        self._authenticate(agent.did, presentation, challenge, self.ledger.clock())
        index, _ = self.ledger.append(
            self.registry.signer(agent),
            REGISTERED_KIND,
            subject=agent.did,
            body=self.registration_body(agent, challenge, presentation, HOSTED),
        )
        return index

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
        what = "the endpoint it registers"  # a self-custody agent names no --endpoint flag
        check_url(endpoint, what)
        check_endpoint_address(
            endpoint, allow_private=self.registry.allow_private_agents, what=what
        )
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
            body=self.registration_body(record, challenge, presentation, SELF),
            now=now,
        )
        self._authenticate(did, presentation, challenge, now)
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(_AGENTS).values(**record.to_json()))
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot register the agent: {db_reason(exc)}") from exc
        (index,) = self.ledger.append_entries([entry])
        return record, index

    def _authenticate(
        self, did: str, presentation: dict[str, Any], challenge: str, now: datetime
    ) -> None:
        """The presentation is `did`'s, over `challenge` for this network (which it uses up).

        Raises CredentialError (step authentication) when it is not `did`'s (checked first,
        so another's presentation does not use the challenge up), NonceError when the
        challenge is unknown, expired or used.
        """
        if presentation.get("holder") != did:
            raise CredentialError("authentication", f"the presentation is not {did}'s")
        verify_presentation(
            presentation,
            challenge=challenge,
            domain=self.domain,
            now=now,
            trusted_issuers={self.ledger.operator.did},
            status_lookup=self.status_lookup,
            nonces=self.nonces,
        )

    def registration_body(
        self, agent: AgentRecord, challenge: str, presentation: dict[str, Any], custody: Custody
    ) -> dict[str, Any]:
        """The body of the agent's `agent.registered` event: `admit` logs it with custody
        `hosted`, a remote agent signs it with custody `self`."""
        return {
            "name": agent.name,
            "domain": self.domain,
            "challenge": challenge,
            "proof": presentation.get("proof"),
            "custody": custody,
        }


def custody_of(events: Iterable[Event]) -> dict[str, Custody]:
    """Pure: each registered DID's declared custody, from `agent.registered` events signed by
    the agent (the first counts). A registration older than the declaration counts as
    `hosted`: every agent was then."""
    found: dict[str, Custody] = {}
    for event in events:
        if event.kind != REGISTERED_KIND or event.actor != event.subject:
            continue
        found.setdefault(event.actor, SELF if event.body.get("custody") == SELF else HOSTED)
    return found
