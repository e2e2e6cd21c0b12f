"""Agents the operator onboards: a key per agent, a registry row, and what answers for it.

An agent is a name, a did:key whose key lives in `$ACCORD_HOME/keys/agents/<name>.json`
(mode 0600), and a *runtime*, the thing that answers exam items on its behalf:

    reference   the built-in reference agent (`identity.challenges.reference.solve`)
    random      answers at random, of the right shape (`reference.random_answer`); it fails
    command     a program: it reads one item as JSON on stdin ({item_id, capability, prompt,
                payload}) and writes its answer as JSON on stdout, within a timeout

(HTTP agent services and OpenAI-compatible models are not runtimes yet.)

The registry is the SQL table `identity_agents` (name unique, DID unique).
"""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, or_, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Field, SQLModel

from identity.challenges import JSON, ExamItem, JSONObject, reference
from identity.errors import ExamError, KeyStoreError, RegistryError
from ledger.errors import MalformedError
from ledger.events import format_time
from ledger.signing import Ed25519Signer, read_keyfile, write_keyfile

RUNTIMES = ("reference", "random", "command")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_COMMAND_TIMEOUT = 30.0
MAX_ANSWER_BYTES = 1 << 20

AgentRuntime = Callable[[JSONObject], JSON]
"""Answers one item, given what the agent sees of it (`ExamItem.for_agent()`).

Raises ExamError when it cannot produce an answer."""


class Agent(SQLModel, table=True):
    """One registered agent. `command` is the shell-quoted command line of a `command` agent."""

    __tablename__ = "identity_agents"

    name: str = Field(primary_key=True)
    did: str = Field(unique=True, index=True)
    runtime: str
    command: str | None = None
    created_at: str


_AGENTS = Agent.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AgentRecord:
    name: str
    did: str
    runtime: str
    command: str | None
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "did": self.did,
            "runtime": self.runtime,
            "command": self.command,
            "created_at": self.created_at,
        }


def check_agent_spec(name: str, runtime: str, command: str | None) -> list[str] | None:
    """Validate a new agent's name and runtime (pure but for `shutil.which`); returns the
    command's argv for a `command` agent.

    Raises RegistryError for a bad name, an unknown runtime, a `command` agent without a
    command (or whose program is not found), or a command given to another runtime.
    """
    if not NAME_PATTERN.match(name):
        raise RegistryError(
            f"agent name {name!r} must be 1-64 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    if runtime not in RUNTIMES:
        raise RegistryError(f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
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

    Raises RegistryError when the table cannot be prepared.
    """

    def __init__(self, engine: Engine, keys_dir: Path) -> None:
        self.engine = engine
        self.agent_keys_dir = keys_dir / "agents"
        try:
            SQLModel.metadata.create_all(engine, tables=[_AGENTS])
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the agent table: {exc}") from exc

    def key_path(self, name: str) -> Path:
        return self.agent_keys_dir / f"{name}.json"

    def new_agent(
        self,
        name: str,
        *,
        now: datetime,
        runtime: str = "reference",
        command: str | None = None,
    ) -> AgentRecord:
        """Create a key (mode 0600) and register the agent.

        Raises RegistryError for an invalid spec (see `check_agent_spec`), a name already
        registered, or a key file already there; nothing is left behind on failure.
        """
        check_agent_spec(name, runtime, command)
        if self._find(name) is not None:
            raise RegistryError(f"an agent called {name!r} already exists")
        path = self.key_path(name)
        signer = Ed25519Signer.generate()
        try:
            write_keyfile(path, signer)
        except FileExistsError:
            raise RegistryError(f"a key file for {name!r} already exists at {path}") from None
        record = AgentRecord(name, signer.did, runtime, command, format_time(now))
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(_AGENTS).values(**record.to_json()))
        except IntegrityError:
            path.unlink(missing_ok=True)
            raise RegistryError(f"an agent called {name!r} already exists") from None
        except SQLAlchemyError as exc:
            path.unlink(missing_ok=True)
            raise RegistryError(f"cannot register the agent: {exc}") from exc
        return record

    def get(self, name_or_did: str) -> AgentRecord:
        """The agent with this name or DID. Raises RegistryError when there is none."""
        record = self._find(name_or_did)
        if record is None:
            raise RegistryError(f"no agent called {name_or_did!r} (see `accord agent list`)")
        return record

    def list(self) -> list[AgentRecord]:
        with self.engine.begin() as connection:
            rows = connection.execute(select(_AGENTS).order_by(_AGENTS.c.name)).all()
        return [_record(row) for row in rows]

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
    return AgentRecord(row.name, row.did, row.runtime, row.command, row.created_at)


# --- runtimes -----------------------------------------------------------------------------


def _as_item(seen: JSONObject) -> ExamItem:
    payload = seen.get("payload")
    return ExamItem(
        item_id=str(seen.get("item_id")),
        capability=str(seen.get("capability")),
        prompt=str(seen.get("prompt")),
        payload=payload if isinstance(payload, dict) else {},
        private={},
    )


def reference_runtime(seen: JSONObject) -> JSON:
    """The built-in reference agent. Raises ExamError for an item it cannot solve."""
    return reference.solve(_as_item(seen))


def random_runtime(rng: random.Random) -> AgentRuntime:
    """An agent that guesses answers of the right shape from `rng`."""

    def answer(seen: JSONObject) -> JSON:
        return reference.random_answer(_as_item(seen), rng)

    return answer


def command_runtime(argv: list[str], timeout: float = DEFAULT_COMMAND_TIMEOUT) -> AgentRuntime:
    """An agent that is a program: item JSON on stdin, answer JSON on stdout.

    The runtime raises ExamError when the program cannot start, times out, exits non-zero or
    prints something that is not one JSON value.
    """

    def answer(seen: JSONObject) -> JSON:
        try:
            done = subprocess.run(
                argv,
                input=json.dumps(seen),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ExamError(f"the agent command took longer than {timeout:g} s") from None
        except OSError as exc:
            raise ExamError(f"cannot run the agent command: {exc}") from exc
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            raise ExamError(f"the agent command exited {done.returncode}: {tail[0]}")
        if len(done.stdout) > MAX_ANSWER_BYTES:
            raise ExamError("the agent command printed more than 1 MiB")
        try:
            value: JSON = json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise ExamError(f"the agent command did not print JSON: {exc}") from exc
        return value

    return answer


def runtime_for(record: AgentRecord, rng: random.Random | None = None) -> AgentRuntime:
    """The runtime that answers for `record`. Raises RegistryError for an invalid record."""
    argv = check_agent_spec(record.name, record.runtime, record.command)
    if record.runtime == "reference":
        return reference_runtime
    if record.runtime == "random":
        return random_runtime(rng or random.Random())
    assert argv is not None
    return command_runtime(argv)
