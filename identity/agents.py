"""Agents the operator onboards: a key per agent, a registry row, and what answers for it.

An agent is a name, a did:key whose key lives in `$ACCORD_HOME/keys/agents/<name>.json`
(mode 0600), and a *runtime*, the thing that answers exam items on its behalf:

    reference   the built-in reference agent (`identity.challenges.reference.solve`)
    random      answers at random, of the right shape (`reference.random_answer`); it fails
    command     a program: it reads one item as JSON on stdin ({item_id, capability, prompt,
                payload}) and writes its answer as JSON on stdout, within a timeout
    http        an agent service at `endpoint` (http or https): each item is POSTed as
                `{"item": {item_id, capability, prompt, payload}}` and the service replies
                `{"answer": ...}` with a 2xx status, within a timeout; redirects are not followed
    openai      an OpenAI-compatible model `model`, through the official `openai` client: the
                base URL is `endpoint`, else `OPENAI_BASE_URL`, else OpenAI's; the key is
                `OPENAI_API_KEY`. The model is asked for a JSON object `{"answer": ...}`

A runtime raises ExamError when it cannot produce an answer (the item is then left
unanswered); `AgentRuntimeError` (a subclass) says whether trying again later may help.

The registry is the SQL table `identity_agents` (name unique, DID unique).
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
from sqlalchemy import Engine, insert, or_, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Field, SQLModel

from identity.challenges import JSON, ExamItem, JSONObject, reference
from identity.errors import ExamError, KeyStoreError, RegistryError
from ledger.errors import MalformedError
from ledger.events import format_time
from ledger.signing import Ed25519Signer, read_keyfile, write_keyfile

RUNTIMES = ("reference", "random", "command", "http", "openai")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MODEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
DEFAULT_COMMAND_TIMEOUT = 30.0
DEFAULT_HTTP_TIMEOUT = 30.0
DEFAULT_MODEL_TIMEOUT = 60.0
MODEL_MAX_RETRIES = 1
MAX_ANSWER_BYTES = 1 << 20

AgentRuntime = Callable[[JSONObject], JSON]
"""Answers one item, given what the agent sees of it (`ExamItem.for_agent()`).

Raises ExamError when it cannot produce an answer."""


class AgentRuntimeError(ExamError):
    """A runtime could not get an answer from the agent's program, service or model.

    `retriable` is True when trying again later may succeed (the service or model could not
    be reached, timed out, was overloaded or failed on its side), False when the agent
    answered but not in a form that can be used, or refused the request.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(f"{message} (retriable)" if retriable else message)
        self.retriable = retriable


class Agent(SQLModel, table=True):
    """One registered agent. `command` is the shell-quoted command line of a `command` agent,
    `endpoint` the URL of an `http` agent (or the base URL of an `openai` one), `model` the
    model of an `openai` agent."""

    __tablename__ = "identity_agents"

    name: str = Field(primary_key=True)
    did: str = Field(unique=True, index=True)
    runtime: str
    command: str | None = None
    created_at: str
    endpoint: str | None = None
    model: str | None = None


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

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "did": self.did,
            "runtime": self.runtime,
            "command": self.command,
            "endpoint": self.endpoint,
            "model": self.model,
            "created_at": self.created_at,
        }


def check_url(url: str, what: str = "--endpoint") -> str:
    """`url` if it is an absolute http or https URL with a host and no credentials in it.

    Raises RegistryError otherwise.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        raise RegistryError(f"{what} {url!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise RegistryError(f"{what} {url!r} must be an http:// or https:// URL")
    if not parts.hostname:
        raise RegistryError(f"{what} {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise RegistryError(f"{what} {url!r} must not carry credentials")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise RegistryError(f"{what} {url!r} contains whitespace or control characters")
    return url


def check_agent_spec(
    name: str,
    runtime: str,
    command: str | None,
    endpoint: str | None = None,
    model: str | None = None,
) -> list[str] | None:
    """Validate a new agent's name and runtime (pure but for `shutil.which`); returns the
    command's argv for a `command` agent.

    Raises RegistryError for a bad name, an unknown runtime, a `command` agent without a
    command (or whose program is not found), an `http` agent without an http(s) endpoint, an
    `openai` agent without a model (or with a bad endpoint), or a command, endpoint or model
    given to a runtime that does not use it.
    """
    if not NAME_PATTERN.match(name):
        raise RegistryError(
            f"agent name {name!r} must be 1-64 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    if runtime not in RUNTIMES:
        raise RegistryError(f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    if endpoint is not None and runtime not in ("http", "openai"):
        raise RegistryError("--endpoint is only for the 'http' and 'openai' runtimes")
    if model is not None and runtime != "openai":
        raise RegistryError("--model is only for the 'openai' runtime")
    if runtime == "http":
        if not endpoint:
            raise RegistryError("an 'http' agent needs --endpoint, the URL of its service")
        check_url(endpoint)
    if runtime == "openai":
        if not model:
            raise RegistryError("an 'openai' agent needs --model, the model that answers")
        if not MODEL_PATTERN.match(model):
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
        endpoint: str | None = None,
        model: str | None = None,
    ) -> AgentRecord:
        """Create a key (mode 0600) and register the agent.

        Raises RegistryError for an invalid spec (see `check_agent_spec`), a name already
        registered, or a key file already there; nothing is left behind on failure.
        """
        check_agent_spec(name, runtime, command, endpoint, model)
        if self._find(name) is not None:
            raise RegistryError(f"an agent called {name!r} already exists")
        path = self.key_path(name)
        signer = Ed25519Signer.generate()
        try:
            write_keyfile(path, signer)
        except FileExistsError:
            raise RegistryError(f"a key file for {name!r} already exists at {path}") from None
        record = AgentRecord(
            name, signer.did, runtime, command, format_time(now), endpoint=endpoint, model=model
        )
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
    return AgentRecord(
        row.name,
        row.did,
        row.runtime,
        row.command,
        row.created_at,
        endpoint=row.endpoint,
        model=row.model,
    )


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


def _snippet(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def http_runtime(endpoint: str, timeout: float = DEFAULT_HTTP_TIMEOUT) -> AgentRuntime:
    """An agent that is an HTTP service: POST `{"item": ...}` to `endpoint`, read
    `{"answer": ...}` back from a 2xx response of at most 1 MiB, all within `timeout` s.

    Redirects are not followed. The runtime raises AgentRuntimeError (retriable) when the
    service cannot be reached, times out, or answers 429 or 5xx, and AgentRuntimeError (not
    retriable) for another status, a body that is not JSON, or JSON without an `answer`.
    Raises RegistryError for a URL that is not http(s).
    """
    check_url(endpoint)

    def answer(seen: JSONObject) -> JSON:
        deadline = time.monotonic() + timeout
        body = bytearray()
        try:
            with (
                httpx.Client(timeout=timeout, follow_redirects=False) as client,
                client.stream(
                    "POST", endpoint, json={"item": seen}, headers={"Accept": "application/json"}
                ) as response,
            ):
                status = response.status_code
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise AgentRuntimeError(
                            "the agent service sent more than 1 MiB", retriable=False
                        )
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the whole answer took too long")
                location = response.headers.get("location", "")
        except httpx.TimeoutException:
            raise AgentRuntimeError(
                f"the agent service at {endpoint} did not answer within {timeout:g} s",
                retriable=True,
            ) from None
        except httpx.ConnectError as exc:
            raise AgentRuntimeError(
                f"cannot reach the agent service at {endpoint}: {exc}", retriable=True
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise AgentRuntimeError(
                f"the request to the agent service at {endpoint} failed: {exc}", retriable=True
            ) from exc
        text = body.decode("utf-8", errors="replace")
        if 300 <= status < 400:
            raise AgentRuntimeError(
                f"the agent service answered HTTP {status}, a redirect to {location!r} "
                "(redirects are not followed)",
                retriable=False,
            )
        if not 200 <= status < 300:
            raise AgentRuntimeError(
                f"the agent service answered HTTP {status}: {_snippet(text)}",
                retriable=status == 429 or status >= 500,
            )
        try:
            reply = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentRuntimeError(
                f"the agent service did not answer with JSON ({exc}): {_snippet(text)}",
                retriable=False,
            ) from exc
        if not isinstance(reply, dict) or "answer" not in reply:
            raise AgentRuntimeError(
                'the agent service\'s JSON has no "answer": ' + _snippet(text), retriable=False
            )
        value: JSON = reply["answer"]
        return value

    return answer


MODEL_INSTRUCTIONS = (
    "You are an agent taking a capability exam. Solve the item you are given exactly as its "
    'prompt asks. Reply with one JSON object of the form {"answer": <your answer>} and nothing '
    "else: the answer is a JSON value (a number, string, object or list, as the prompt asks)."
)


def model_prompt(seen: JSONObject) -> str:
    """The user message for one item: its capability, prompt and payload as JSON."""
    payload = json.dumps(seen.get("payload"), indent=2, sort_keys=True, ensure_ascii=False)
    return (
        f"Capability: {seen.get('capability')}\n\n"
        f"{seen.get('prompt')}\n\n"
        f"Payload (JSON):\n{payload}\n\n"
        'Reply with the JSON object {"answer": ...} only.'
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_model_answer(content: str | None) -> JSON:
    """The answer in a model's reply, which must be exactly one JSON object `{"answer": ...}`.

    Raises AgentRuntimeError (not retriable) for anything else.
    """
    if content is None or not content.strip():
        raise AgentRuntimeError("the model replied with no content", retriable=False)
    if len(content) > MAX_ANSWER_BYTES:
        raise AgentRuntimeError("the model replied with more than 1 MiB", retriable=False)
    try:
        reply = json.loads(content, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise AgentRuntimeError(
            f"the model did not reply with JSON ({exc}): {_snippet(content)}", retriable=False
        ) from exc
    if not isinstance(reply, dict) or set(reply) != {"answer"}:
        raise AgentRuntimeError(
            'the model\'s reply is not a JSON object {"answer": ...}: ' + _snippet(content),
            retriable=False,
        )
    value: JSON = reply["answer"]
    return value


def openai_runtime(
    model: str,
    *,
    base_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_MODEL_TIMEOUT,
    max_retries: int = MODEL_MAX_RETRIES,
) -> AgentRuntime:
    """An agent that is an OpenAI-compatible chat model, asked through the `openai` client
    for a JSON object `{"answer": ...}` (`response_format` json_object).

    The base URL is `base_url`, else `OPENAI_BASE_URL`, else OpenAI's; the key is
    `OPENAI_API_KEY` (from `environ`, default `os.environ`). Raises RegistryError for a base
    URL that is not http(s) and ExamError when there is no key. The runtime raises
    AgentRuntimeError: retriable when the server cannot be reached, times out, rate-limits or
    fails (5xx), not retriable for another API error or a reply that is not `{"answer": ...}`.
    """
    env = os.environ if environ is None else environ
    api_key = env.get("OPENAI_API_KEY")
    if not api_key:
        raise ExamError(
            "the 'openai' runtime needs OPENAI_API_KEY (any value for a server without keys)"
        )
    url = base_url or env.get("OPENAI_BASE_URL") or None
    if url is not None:
        check_url(url, "the model base URL" if base_url is None else "--endpoint")
    where = url or "OpenAI"

    def answer(seen: JSONObject) -> JSON:
        try:
            with openai.OpenAI(
                api_key=api_key, base_url=url, timeout=timeout, max_retries=max_retries
            ) as client:
                completion = client.chat.completions.create(
                    model=model,
                    messages=[
                        {"role": "system", "content": MODEL_INSTRUCTIONS},
                        {"role": "user", "content": model_prompt(seen)},
                    ],
                    response_format={"type": "json_object"},
                )
        except openai.APITimeoutError:
            raise AgentRuntimeError(
                f"the model at {where} did not answer within {timeout:g} s", retriable=True
            ) from None
        except openai.APIConnectionError as exc:
            raise AgentRuntimeError(
                f"cannot reach the model at {where}: {exc}", retriable=True
            ) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            raise AgentRuntimeError(
                f"the model at {where} answered HTTP {status}: {_snippet(str(exc.message))}",
                retriable=status in (408, 409, 429) or status >= 500,
            ) from exc
        except openai.OpenAIError as exc:
            raise AgentRuntimeError(
                f"the model at {where} failed: {_snippet(str(exc))}", retriable=False
            ) from exc
        if not completion.choices:
            raise AgentRuntimeError("the model replied with no choices", retriable=False)
        choice = completion.choices[0]
        if choice.finish_reason == "length":
            raise AgentRuntimeError("the model's reply was cut off (length)", retriable=False)
        if choice.message.refusal:
            raise AgentRuntimeError(
                f"the model refused: {_snippet(choice.message.refusal)}", retriable=False
            )
        return parse_model_answer(choice.message.content)

    return answer


def runtime_for(record: AgentRecord, rng: random.Random | None = None) -> AgentRuntime:
    """The runtime that answers for `record`.

    Raises RegistryError for an invalid record and ExamError for an `openai` agent without
    OPENAI_API_KEY.
    """
    argv = check_agent_spec(
        record.name, record.runtime, record.command, record.endpoint, record.model
    )
    if record.runtime == "reference":
        return reference_runtime
    if record.runtime == "random":
        return random_runtime(rng or random.Random())
    if record.runtime == "http":
        assert record.endpoint is not None
        return http_runtime(record.endpoint)
    if record.runtime == "openai":
        assert record.model is not None
        return openai_runtime(record.model, base_url=record.endpoint)
    assert argv is not None
    return command_runtime(argv)
