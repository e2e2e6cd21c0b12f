"""Agents the operator onboards: a key per agent, a registry row, and what answers for it.

An agent is a name, a did:key whose key lives in `$ACCORD_HOME/keys/agents/<name>.json`
(mode 0600), and a *runtime*, the thing that answers items on its behalf (exam items and team
work alike; see `accord.identity.runtimes`):

    reference   the built-in reference agent (`accord.identity.challenges.reference.solve`)
    random      answers at random, of the right shape (`reference.random_answer`); it fails
    command     a program: it reads one item as JSON on stdin ({item_id, capability, prompt,
                payload}) and writes its answer as JSON on stdout, within a timeout
    http        an agent service at `endpoint` (http or https): each item is POSTed as
                `{"item": {item_id, capability, prompt, payload}}` and the service replies
                `{"answer": ...}`; only at a public address unless the operator allows
                private agents (ACCORD_ALLOW_PRIVATE_AGENTS=1, `accord.identity.address_guard`)
    a2a         an A2A v1.0 agent whose agent card is at `card`: registering fetches the card,
                verifies its JWS signature (`accord.identity.agent_cards`; a card with no signature
                only with `allow_unsigned_card`) and keeps its JSON-RPC interface (`endpoint`,
                and `tenant` when the interface names one); items go to it as `SendMessage`
                (`accord.identity.runtimes.A2ARuntime`); public addresses only, as for `http`
    openai      an OpenAI-compatible model `model`, through the official `openai` client: the
                base URL is `endpoint`, else `OPENAI_BASE_URL`, else OpenAI's; the key is
                `OPENAI_API_KEY` (not needed by a local server without keys)

The registry is the SQL table `identity_agents` (name unique, DID unique); columns added
since a table was made (`card`, `tenant`) are added to it when the registry opens it.
"""

from __future__ import annotations

import random
import re
import shlex
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, inspect, or_, select, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Field, SQLModel

from accord.identity.address_guard import check_endpoint_address, check_url
from accord.identity.errors import KeyStoreError, RegistryError
from accord.identity.runtimes import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_HTTP_TIMEOUT,
    DEFAULT_MODEL_TIMEOUT,
    A2ARuntime,
    AgentRuntime,
    AnswerValidator,
    CommandRuntime,
    HttpRuntime,
    RandomRuntime,
    ReferenceRuntime,
    a2a_interface,
    fetch_agent_card,
    openai_runtime,
)
from accord.ledger.database import create_tables, db_reason, statement_connection
from accord.ledger.errors import MalformedError
from accord.ledger.events import format_time
from accord.ledger.signing import Ed25519Signer, Signer, read_keyfile, write_keyfile

RUNTIMES = ("reference", "random", "command", "http", "openai", "a2a")
#: Nullable columns added after the table was first made, added to older tables on open.
ADDED_COLUMNS = ("card", "tenant")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MODEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")


class Agent(SQLModel, table=True):
    """One registered agent. `command` is the shell-quoted command line of a `command` agent,
    `endpoint` the URL of an `http` agent (or the base URL of an `openai` one), `model` the
    model of an `openai` agent; an `a2a` agent's `card` is its agent card's URL, `endpoint`
    and `tenant` the JSON-RPC interface that card names."""

    __tablename__ = "identity_agents"

    name: str = Field(primary_key=True)
    did: str = Field(unique=True, index=True)
    runtime: str
    command: str | None = None
    created_at: str
    endpoint: str | None = None
    model: str | None = None
    card: str | None = None
    tenant: str | None = None


_AGENTS = Agent.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AgentRecord:
    name: str
    did: str
    runtime: str
    command: str | None
    created_at: str
    endpoint: str | None = None
    model: str | None = None
    card: str | None = None
    tenant: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "did": self.did,
            "runtime": self.runtime,
            "command": self.command,
            "endpoint": self.endpoint,
            "model": self.model,
            "card": self.card,
            "tenant": self.tenant,
            "created_at": self.created_at,
        }


def check_agent_spec(
    name: str,
    runtime: str,
    command: str | None,
    endpoint: str | None = None,
    model: str | None = None,
    *,
    card: str | None = None,
    tenant: str | None = None,
    allow_private_agents: bool = False,
) -> list[str] | None:
    """Validate a new agent's name and runtime (pure but for `shutil.which`); returns the
    command's argv for a `command` agent.

    An `a2a` agent needs `card` (an http(s) URL); its `endpoint`, when given, is the JSON-RPC
    interface its card named, held to the same address rule.

    Raises RegistryError for a bad name, an unknown runtime, a `command` agent without a
    command (or whose program is not found), an `http` agent without an http(s) endpoint, an
    `openai` agent without a model (or with a bad endpoint), or a command, endpoint or model
    given to a runtime that does not use it; PrivateEndpointError (a RegistryError) for an
    `http` endpoint at a loopback, link-local or private address unless
    `allow_private_agents`. (An `openai` endpoint is the operator's own model server, which
    may well be local.)
    """
    if not NAME_PATTERN.fullmatch(name):
        raise RegistryError(
            f"agent name {name!r} must be 1-64 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    if runtime not in RUNTIMES:
        raise RegistryError(f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    if endpoint is not None and runtime not in ("http", "openai", "a2a"):
        raise RegistryError("--endpoint is only for the 'http' and 'openai' runtimes")
    if model is not None and runtime != "openai":
        raise RegistryError("--model is only for the 'openai' runtime")
    if (card is not None or tenant is not None) and runtime != "a2a":
        raise RegistryError("--card is only for the 'a2a' runtime")
    if runtime == "a2a":
        if not card:
            raise RegistryError("an 'a2a' agent needs --card, the URL of its A2A agent card")
        check_url(card, "--card")
        check_endpoint_address(card, allow_private=allow_private_agents, what="--card")
        if endpoint is not None:
            what = "the card's JSON-RPC interface"
            check_url(endpoint, what)
            check_endpoint_address(endpoint, allow_private=allow_private_agents, what=what)
    if runtime == "http":
        if not endpoint:
            raise RegistryError("an 'http' agent needs --endpoint, the URL of its service")
        check_url(endpoint)
        check_endpoint_address(endpoint, allow_private=allow_private_agents)
    if runtime == "openai":
        if not model:
            raise RegistryError("an 'openai' agent needs --model, the model that answers")
        if not MODEL_PATTERN.fullmatch(model):
            raise RegistryError(f"model name {model!r} is not a valid model name")
        if endpoint is not None:
            check_url(endpoint)
    if runtime != "command":
        if command is not None:
            raise RegistryError("--command is only for the 'command' runtime")
        return None
    if not command:
        raise RegistryError("a 'command' agent needs --command, the program that answers")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise RegistryError(f"cannot parse the command {command!r}: {exc}") from exc
    if not argv or shutil.which(argv[0]) is None:
        raise RegistryError(f"program {argv[0] if argv else command!r} not found")
    return argv


class AgentRegistry:
    """The `identity_agents` table plus the agents' key files under `keys_dir/agents/`.

    `allow_private_agents` (the operator's `Settings.allow_private_agents`) lets `http` agents
    be registered and reached at loopback, link-local and private addresses. `operator` (the
    ledger's operator key) signs every request made to an agent: exam items and team work
    (`runtime`), fetching an A2A card (`new_agent`), asking a remote agent to sign
    (`accord.identity.remote_signing`). Without it those requests go unsigned.
    Raises RegistryError when the table cannot be prepared.
    """

    def __init__(
        self,
        engine: Engine,
        keys_dir: Path,
        *,
        allow_private_agents: bool = False,
        operator: Signer | None = None,
    ) -> None:
        self.engine = engine
        self.agent_keys_dir = keys_dir / "agents"
        self.allow_private_agents = allow_private_agents
        self.operator = operator
        try:
            create_tables(engine, [_AGENTS])
            present = {column["name"] for column in inspect(engine).get_columns(_AGENTS.name)}
            with engine.begin() as connection:
                for column in ADDED_COLUMNS:
                    if column not in present:
                        connection.execute(
                            text(f"ALTER TABLE {_AGENTS.name} ADD COLUMN {column} VARCHAR")
                        )
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the agent table: {db_reason(exc)}") from exc

    def check_spec(
        self,
        name: str,
        runtime: str,
        command: str | None,
        endpoint: str | None = None,
        model: str | None = None,
        *,
        card: str | None = None,
        tenant: str | None = None,
    ) -> list[str] | None:
        """`check_agent_spec` under this registry's address setting (raises as it does)."""
        return check_agent_spec(
            name,
            runtime,
            command,
            endpoint,
            model,
            card=card,
            tenant=tenant,
            allow_private_agents=self.allow_private_agents,
        )

    def runtime(
        self,
        record: AgentRecord,
        *,
        rng: random.Random | None = None,
        timeout: float | None = None,
        validate: AnswerValidator | None = None,
    ) -> AgentRuntime:
        """`runtime_for(record)` under this registry's address setting, its requests signed by
        the operator (raises as it does)."""
        return runtime_for(
            record,
            rng,
            timeout=timeout,
            validate=validate,
            allow_private_agents=self.allow_private_agents,
            operator=self.operator,
        )

    def key_path(self, name: str) -> Path:
        return self.agent_keys_dir / f"{name}.json"

    def new_agent(
        self,
        name: str,
        *,
        now: datetime,
        runtime: str = "reference",
        command: str | None = None,
        endpoint: str | None = None,
        model: str | None = None,
        card: str | None = None,
        allow_unsigned_card: bool = False,
        card_timeout: float = DEFAULT_HTTP_TIMEOUT,
    ) -> AgentRecord:
        """Create a key (mode 0600) and register the agent.

        An `a2a` agent's card is fetched and must verify (see `accord.identity.runtimes.
        a2a_interface`; `allow_unsigned_card` takes a card with no signature at all); its
        JSON-RPC interface becomes the record's `endpoint` and `tenant`.

        Raises RegistryError for an invalid spec (see `check_agent_spec`), a name already
        registered, or a key file already there; AgentCardError (a RegistryError) naming why
        an `a2a` agent's card cannot be fetched or is refused; nothing is left behind on
        failure.
        """
        if runtime == "a2a" and endpoint is not None:
            raise RegistryError("an 'a2a' agent is reached where its card says: give --card only")
        self.check_spec(name, runtime, command, endpoint, model, card=card)
        if self._find(name) is not None:
            raise RegistryError(f"an agent called {name!r} already exists")
        tenant: str | None = None
        if runtime == "a2a":
            assert card is not None
            document = fetch_agent_card(
                card,
                timeout=card_timeout,
                allow_private=self.allow_private_agents,
                operator=self.operator,
            )
            interface = a2a_interface(document, allow_unsigned=allow_unsigned_card)
            endpoint, tenant = interface.url, interface.tenant
            self.check_spec(name, runtime, command, endpoint, model, card=card, tenant=tenant)
        path = self.key_path(name)
        signer = Ed25519Signer.generate()
        try:
            write_keyfile(path, signer)
        except FileExistsError:
            raise RegistryError(f"a key file for {name!r} already exists at {path}") from None
        record = AgentRecord(
            name,
            signer.did,
            runtime,
            command,
            format_time(now),
            endpoint=endpoint,
            model=model,
            card=card,
            tenant=tenant,
        )
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(_AGENTS).values(**record.to_json()))
        except IntegrityError:
            path.unlink(missing_ok=True)
            raise RegistryError(f"an agent called {name!r} already exists") from None
        except SQLAlchemyError as exc:
            path.unlink(missing_ok=True)
            raise RegistryError(f"cannot register the agent: {db_reason(exc)}") from exc
        return record

    def get(self, name_or_did: str) -> AgentRecord:
        """The agent with this name or DID. Raises RegistryError when there is none."""
        record = self._find(name_or_did)
        if record is None:
            raise RegistryError(f"no agent called {name_or_did!r} (see `accord agent list`)")
        return record

    def list(self) -> list[AgentRecord]:
        with statement_connection(self.engine) as connection:
            rows = connection.execute(select(_AGENTS).order_by(_AGENTS.c.name)).all()
        return [_record(row) for row in rows]

    def page(self, *, after: str | None, limit: int) -> tuple[AgentRecord, ...]:
        """At most `limit` agents by name, after the name `after` (keyset: one indexed range)."""
        query = select(_AGENTS).order_by(_AGENTS.c.name).limit(limit)
        if after is not None:
            query = query.where(_AGENTS.c.name > after)
        with statement_connection(self.engine) as connection:
            return tuple(_record(row) for row in connection.execute(query).all())

    def records(self, dids: Iterable[str]) -> dict[str, AgentRecord]:
        """The agents among `dids`, by DID (those not registered here are left out)."""
        wanted = sorted(set(dids))
        found: dict[str, AgentRecord] = {}
        with statement_connection(self.engine) as connection:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = connection.execute(select(_AGENTS).where(_AGENTS.c.did.in_(chunk))).all()
                found.update((row.did, _record(row)) for row in rows)
        return found

    def signer(self, record: AgentRecord) -> Ed25519Signer:
        """The agent's key. Raises KeyStoreError when its file is missing, unreadable, not
        private, or holds another DID's key."""
        try:
            signer = read_keyfile(self.key_path(record.name))
        except MalformedError as exc:
            raise KeyStoreError(str(exc)) from exc
        if signer.did != record.did:
            raise KeyStoreError(f"the key file of {record.name!r} holds {signer.did}")
        return signer

    def _find(self, name_or_did: str) -> AgentRecord | None:
        with self.engine.begin() as connection:
            row = connection.execute(
                select(_AGENTS).where(
                    or_(_AGENTS.c.name == name_or_did, _AGENTS.c.did == name_or_did)
                )
            ).first()
        return None if row is None else _record(row)


def _record(row: Any) -> AgentRecord:
    return AgentRecord(
        row.name,
        row.did,
        row.runtime,
        row.command,
        row.created_at,
        endpoint=row.endpoint,
        model=row.model,
        card=row.card,
        tenant=row.tenant,
    )


def runtime_for(
    record: AgentRecord,
    rng: random.Random | None = None,
    *,
    timeout: float | None = None,
    validate: AnswerValidator | None = None,
    allow_private_agents: bool = False,
    operator: Signer | None = None,
) -> AgentRuntime:
    """The runtime that answers for `record` (see `accord.identity.runtimes`).

    `timeout` (seconds) replaces the runtime's default for a command, service or model;
    `validate` checks an `openai` agent's answers; `operator` signs every request to an
    `http` or `a2a` agent (a call from accord, RFC 9421). Raises RegistryError for a record that
    cannot work: an invalid spec, an `http` endpoint at a non-public address without
    `allow_private_agents` (PrivateEndpointError), an `openai` agent on OpenAI's API without
    OPENAI_API_KEY.
    """
    argv = check_agent_spec(
        record.name,
        record.runtime,
        record.command,
        record.endpoint,
        record.model,
        card=record.card,
        tenant=record.tenant,
        allow_private_agents=allow_private_agents,
    )
    match record.runtime:
        case "reference":
            return ReferenceRuntime()
        case "random":
            return RandomRuntime(rng or random.Random())
        case "http":
            assert record.endpoint is not None
            return HttpRuntime(
                record.endpoint,
                timeout or DEFAULT_HTTP_TIMEOUT,
                allow_private=allow_private_agents,
                operator=operator,
            )
        case "a2a":
            if record.endpoint is None:
                raise RegistryError(f"the 'a2a' agent {record.name!r} has no interface recorded")
            return A2ARuntime(
                record.endpoint,
                record.tenant,
                timeout or DEFAULT_HTTP_TIMEOUT,
                allow_private=allow_private_agents,
                operator=operator,
            )
        case "openai":
            assert record.model is not None
            return openai_runtime(
                record.model,
                endpoint=record.endpoint,
                timeout=timeout or DEFAULT_MODEL_TIMEOUT,
                validate=validate,
            )
    assert argv is not None
    return CommandRuntime(argv, timeout or DEFAULT_COMMAND_TIMEOUT)


__all__ = [
    "RUNTIMES",
    "Agent",
    "AgentRecord",
    "AgentRegistry",
    "check_agent_spec",
    "runtime_for",
]
