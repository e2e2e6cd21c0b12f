"""Agent runtimes: the one seam through which accord asks an agent for an answer.

Exams, team work and bids send an agent the same thing, an item as an agent sees it
(`ExamItem.for_agent()`): `{"item_id", "capability", "prompt", "payload"}`. Every runtime
answers it through one method,

    runtime.answer(item) -> JSON

which raises AgentRuntimeError (an ExamError) when it cannot; its `retriable` says whether
asking again later may help (the agent could not be reached, timed out, was overloaded or
failed on its side) or not (it answered, but not in a usable form, or refused).

    ReferenceRuntime  the built-in reference agent (`accord.identity.challenges.reference.solve`)
    RandomRuntime     answers of the right shape, at random (`reference.random_answer`)
    CommandRuntime    a program: the item as JSON on stdin, the answer as JSON on stdout
                      (at most 1 MiB), within a timeout; it runs in its own session and its
                      whole process group is killed when the time is up
    HttpRuntime       an agent service: POST `{"item": item}` to its endpoint (`/run` when
                      the URL has no path), a 2xx reply `{"answer": ...}` of at most 1 MiB,
                      within a timeout; redirects never followed; only public addresses
                      unless private agents are allowed (`accord.identity.address_guard`)
    A2ARuntime        an A2A v1.0 agent: JSON-RPC `SendMessage` with the item as a data part
                      to the interface its signed agent card names (`fetch_agent_card`,
                      `a2a_interface`), the answer a data part `{"answer": ...}` of the
                      finished task's artifact or of the message; same limits as HttpRuntime
    ChatRuntime       a chat model (`accord.identity.chat`: an OpenAI-compatible server through the
                      official `openai` client), asked for the JSON object `{"answer": ...}`;
                      an optional `validate` hook checks the answer and the model gets one
                      more try

`accord.identity.agents.runtime_for` builds the runtime a registered agent's record names;
`accord.coordinator.adapters` runs team work through the same runtimes. Given the operator's key
(`operator`), HttpRuntime and A2ARuntime sign every request to the agent with it (RFC 9421,
tag "accord-call"), so the agent can check the call comes from accord
(`accord.identity.http_signatures.verify_accord_call`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from accord.identity.address_guard import (
    PrivateAddressRefused,
    agent_client,
    check_endpoint_address,
    check_url,
)
from accord.identity.agent_cards import A2A_PROTOCOL_VERSION, jsonrpc_interface, verify_card
from accord.identity.challenges import JSON, ExamItem, JSONObject, reference
from accord.identity.chat import (
    DEFAULT_TIMEOUT,
    ChatError,
    ChatMessage,
    ChatModel,
    openai_chat,
    snippet,
)
from accord.identity.errors import AgentCardError, ExamError
from accord.ledger.canonical import whole_numbers
from accord.ledger.signing import Signer

DEFAULT_COMMAND_TIMEOUT = 30.0
DEFAULT_HTTP_TIMEOUT = 30.0
DEFAULT_MODEL_TIMEOUT = DEFAULT_TIMEOUT
MAX_ANSWER_BYTES = 1 << 20
RUN_PATH = "/run"
ITEM_KEYS = ("item_id", "capability", "prompt", "payload")
INPUTS_KEY = "inputs_from"
"""An item of a part whose input is made of other parts' outputs carries, under this key, each
such output as sealed (`{part: {"salt", "value"}}`, `accord.ledger.sealing`): the payload
already holds the values; an agent that keeps its own key checks them against the commitments
their producers reported before it answers (`accord.kit.agent`)."""

AnswerValidator = Callable[[str, JSON], None]
"""`validate(capability, answer)`: returns when the answer is usable, raises when it is not
(any Exception; its message is shown to the model when it is asked again)."""


class AgentRuntimeError(ExamError):
    """A runtime could not get a usable answer from its agent.

    `retriable` is True when trying again later may succeed (the agent could not be reached,
    timed out, was overloaded or failed on its side), False when it answered but not in a form
    that can be used, or refused. `reason` is the message without the "(retriable)" mark.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(f"{message} (retriable)" if retriable else message)
        self.reason = message
        self.retriable = retriable


class AgentRuntime(Protocol):
    """What answers items for an agent: one method."""

    def answer(self, item: JSONObject) -> JSON:
        """The agent's answer to `item` (`ExamItem.for_agent()`'s shape).

        Raises AgentRuntimeError when there is no usable answer.
        """
        ...


# --- shared helpers -----------------------------------------------------------------------


def run_url(endpoint: str) -> str:
    """Where items are POSTed: `endpoint`, with `/run` when it has no path.

    Raises RegistryError for a URL `check_url` refuses.
    """
    parts = urlsplit(check_url(endpoint))
    if parts.path in ("", "/"):
        parts = parts._replace(path=RUN_PATH)
    return urlunsplit(parts)


def check_timeout(timeout: float) -> float:
    """`timeout` as a float. Raises ValueError unless it is a positive finite number."""
    if isinstance(timeout, bool) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def agent_view(item: Mapping[str, JSON]) -> JSONObject:
    """Exactly what an agent sees of an item: its item_id, capability, prompt and payload, and
    for a part made of other parts' outputs the openings of those outputs (`INPUTS_KEY`)."""
    view = {key: item.get(key) for key in ITEM_KEYS}
    if INPUTS_KEY in item:
        view[INPUTS_KEY] = item[INPUTS_KEY]
    return view


def exam_item(item: Mapping[str, JSON]) -> ExamItem:
    """An item as an agent sees it, as an ExamItem without the private grading data."""
    payload = item.get("payload")
    return ExamItem(
        item_id=str(item.get("item_id")),
        capability=str(item.get("capability")),
        prompt=str(item.get("prompt")),
        payload=payload if isinstance(payload, dict) else {},
        private={},
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> JSON:
    """`text` as one JSON value (NaN and Infinity refused). Raises ValueError otherwise, and
    for a value nested deeper than the recursion limit (an agent's answer is anyone's)."""
    try:
        value: JSON = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("the JSON is nested too deep") from None
    return value


# --- in process ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceRuntime:
    """The built-in reference agent, offline."""

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError (not retriable) for an item it has no skill for."""
        try:
            return reference.solve(exam_item(item))
        except ExamError as exc:
            raise AgentRuntimeError(str(exc), retriable=False) from exc


@dataclass(frozen=True)
class RandomRuntime:
    """An agent that guesses answers of the right shape from `rng` (it fails exams)."""

    rng: random.Random = field(default_factory=random.Random)

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError (not retriable) for an item it cannot guess for."""
        try:
            return reference.random_answer(exam_item(item), self.rng)
        except ExamError as exc:
            raise AgentRuntimeError(str(exc), retriable=False) from exc


# --- a program ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandRuntime:
    """An agent that is a program: the item as JSON on stdin, the answer on stdout.

    The program runs in its own session; after `timeout` seconds its whole process group is
    killed. `env` replaces the environment when given. `argv` must name a program and
    `timeout` be positive (ValueError otherwise).
    """

    argv: Sequence[str]
    timeout: float = DEFAULT_COMMAND_TIMEOUT
    env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("argv must name a program")
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "timeout", check_timeout(self.timeout))

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError: retriable when the program takes longer than the timeout;
        not retriable when it cannot start, exits non-zero, or prints more than 1 MiB or
        something that is not one JSON value."""
        try:
            process = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                env=None if self.env is None else dict(self.env),
            )
        except OSError as exc:
            raise AgentRuntimeError(
                f"cannot run the agent command: {exc}", retriable=False
            ) from exc
        with process:
            try:
                stdout, stderr = process.communicate(json.dumps(item), self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                raise AgentRuntimeError(
                    f"the agent command took longer than {self.timeout:g} s", retriable=True
                ) from None
            except BaseException:
                _kill_group(process)
                raise
        if process.returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or [""]
            raise AgentRuntimeError(
                f"the agent command exited {process.returncode}: {tail[0]}", retriable=False
            )
        if len(stdout) > MAX_ANSWER_BYTES:
            raise AgentRuntimeError("the agent command printed more than 1 MiB", retriable=False)
        try:
            return parse_json(stdout)
        except ValueError as exc:
            raise AgentRuntimeError(
                f"the agent command did not print JSON ({exc}): {snippet(stdout)}",
                retriable=False,
            ) from exc


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill `process` and everything in its process group, then reap it (briefly)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        process.communicate(timeout=2)


# --- an HTTP agent service ----------------------------------------------------------------


@dataclass(frozen=True)
class HttpRuntime:
    """An agent behind an HTTP agent service (`accord.coordinator.agent_service`, or anything that
    speaks its protocol): POST `{"item": item}`, read `{"answer": ...}`.

    `endpoint` gets `/run` when it has no path. Unless `allow_private`, the endpoint may not
    be a non-public address and every connection goes to a public address only
    (`accord.identity.address_guard`). With `operator`, every request is signed by the operator's
    key as a call from accord. Raises RegistryError for a URL that is not http(s), or
    names a non-public address (PrivateEndpointError); ValueError for a bad timeout.
    """

    endpoint: str
    timeout: float = DEFAULT_HTTP_TIMEOUT
    allow_private: bool = False
    operator: Signer | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_endpoint_address(self.endpoint, allow_private=self.allow_private)
        object.__setattr__(self, "endpoint", run_url(self.endpoint))
        object.__setattr__(self, "timeout", check_timeout(self.timeout))

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError: retriable when the service cannot be reached, times out,
        or answers 429 or 5xx; not retriable when its address is refused, for a redirect or
        another status, a reply over 1 MiB, or one that is not JSON with an `answer`."""
        where = self.endpoint
        deadline = time.monotonic() + self.timeout
        body = bytearray()
        try:
            with (
                agent_client(
                    self.timeout, allow_private=self.allow_private, operator=self.operator
                ) as client,
                client.stream(
                    "POST", where, json={"item": item}, headers={"Accept": "application/json"}
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
                f"the agent service at {where} did not answer within {self.timeout:g} s",
                retriable=True,
            ) from None
        except PrivateAddressRefused as exc:
            raise AgentRuntimeError(str(exc), retriable=False) from exc
        except httpx.TransportError as exc:
            raise AgentRuntimeError(
                f"cannot reach the agent service at {where}: {exc}", retriable=True
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise AgentRuntimeError(
                f"the request to the agent service at {where} failed: {exc}", retriable=True
            ) from exc
        text = body.decode("utf-8", errors="replace")
        reply = json_reply(status, text, location, who="the agent service")
        if not isinstance(reply, dict) or "answer" not in reply:
            raise AgentRuntimeError(
                'the agent service\'s JSON has no "answer": ' + snippet(text), retriable=False
            )
        return reply["answer"]


# --- an A2A agent ------------------------------------------------------------------------

A2A_VERSION_HEADER = "A2A-Version"
SEND_MESSAGE = "SendMessage"
WELL_KNOWN_CARD_PATH = "/.well-known/agent-card.json"
#: Task states after which no answer will come (A2A v1.0 `TaskState`).
A2A_FAILED_STATES = {
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "was canceled",
    "TASK_STATE_REJECTED": "rejected the item",
    "TASK_STATE_INPUT_REQUIRED": "asked for more input",
    "TASK_STATE_AUTH_REQUIRED": "asked for authentication",
}
#: JSON-RPC errors worth a retry: the server's own internal error.
A2A_RETRIABLE_CODES = frozenset({-32603})


@dataclass(frozen=True)
class A2AInterface:
    """Where an A2A agent takes JSON-RPC requests, from its card: the URL, the tenant to name
    in every request (or None), and the DID whose key signed the card (None: unsigned)."""

    url: str
    tenant: str | None
    did: str | None


def card_url(url: str) -> str:
    """Where an agent's card is: `url`, or its `/.well-known/agent-card.json` when it has no
    path. Raises RegistryError for a URL `check_url` refuses."""
    parts = urlsplit(check_url(url, "--card"))
    if parts.path in ("", "/"):
        parts = parts._replace(path=WELL_KNOWN_CARD_PATH)
    return urlunsplit(parts)


def _exchange(
    method: str,
    url: str,
    *,
    body: JSON | None,
    headers: Mapping[str, str],
    timeout: float,
    allow_private: bool,
    what: str,
    operator: Signer | None = None,
) -> tuple[int, str, str]:
    """One request to an agent through `agent_client` (signed by `operator` when given):
    (status, text, Location), the whole reply within `timeout` and 1 MiB.

    Raises AgentRuntimeError: retriable when it cannot be reached or is too slow; not
    retriable when its address is refused or the reply is over 1 MiB.
    """
    deadline = time.monotonic() + timeout
    received = bytearray()
    try:
        with (
            agent_client(timeout, allow_private=allow_private, operator=operator) as client,
            client.stream(
                method,
                url,
                headers=dict(headers),
                content=None if body is None else json.dumps(body).encode("utf-8"),
            ) as response,
        ):
            status = response.status_code
            for chunk in response.iter_bytes():
                received += chunk
                if len(received) > MAX_ANSWER_BYTES:
                    raise AgentRuntimeError(f"{what} sent more than 1 MiB", retriable=False)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the whole reply took too long")
            location = response.headers.get("location", "")
    except httpx.TimeoutException:
        raise AgentRuntimeError(
            f"{what} at {url} did not answer within {timeout:g} s", retriable=True
        ) from None
    except PrivateAddressRefused as exc:
        raise AgentRuntimeError(str(exc), retriable=False) from exc
    except httpx.TransportError as exc:
        raise AgentRuntimeError(f"cannot reach {what} at {url}: {exc}", retriable=True) from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise AgentRuntimeError(
            f"the request to {what} at {url} failed: {exc}", retriable=True
        ) from exc
    return status, received.decode("utf-8", errors="replace"), location


def fetch_agent_card(
    url: str,
    *,
    timeout: float = DEFAULT_HTTP_TIMEOUT,
    allow_private: bool = False,
    operator: Signer | None = None,
) -> JSONObject:
    """The A2A agent card at `url` (its well-known path when `url` has none): one JSON object
    of at most 1 MiB, a 2xx reply, no redirect followed, at a public address unless
    `allow_private`; the GET signed by `operator` when given.

    Raises AgentCardError (a RegistryError) saying why when it cannot be had;
    PrivateEndpointError for a URL naming a non-public address.
    """
    where = card_url(url)
    check_endpoint_address(where, allow_private=allow_private, what="--card")
    try:
        status, text, location = _exchange(
            "GET",
            where,
            body=None,
            headers={"Accept": "application/json"},
            timeout=check_timeout(timeout),
            allow_private=allow_private,
            what="the agent card",
            operator=operator,
        )
    except AgentRuntimeError as exc:
        raise AgentCardError(f"cannot fetch the agent card: {exc.reason}") from exc
    if 300 <= status < 400:
        raise AgentCardError(
            f"the agent card at {where} is a redirect to {location!r} (not followed)"
        )
    if not 200 <= status < 300:
        raise AgentCardError(f"the agent card at {where} answered HTTP {status}: {snippet(text)}")
    try:
        card = parse_json(text)
    except ValueError as exc:
        raise AgentCardError(f"the agent card at {where} is not JSON ({exc})") from exc
    if not isinstance(card, dict):
        raise AgentCardError(f"the agent card at {where} is not a JSON object")
    return card


def a2a_interface(card: JSONObject, *, allow_unsigned: bool = False) -> A2AInterface:
    """The interface accord calls an A2A agent at, from its card, once the card holds.

    The card's signature must verify (`accord.identity.agent_cards.verify_card`); only a card with
    no signatures at all passes unverified, and only with `allow_unsigned`. Raises
    AgentCardError naming why a card is refused, or when it lists no JSON-RPC 1.x interface.
    """
    did: str | None = None
    if card.get("signatures") or not allow_unsigned:
        try:
            did = verify_card(card).did
        except AgentCardError as exc:
            hint = "" if card.get("signatures") else " (--unsigned-card accepts a card without)"
            raise AgentCardError(f"the agent card is refused: {exc}{hint}") from exc
    url, tenant = jsonrpc_interface(card)
    return A2AInterface(url, tenant, did)


def send_message_request(item: JSONObject, tenant: str | None, request_id: str) -> JSONObject:
    """The JSON-RPC `SendMessage` request carrying `item` as one data part (blocking: the
    reply is the finished task or a message)."""
    params: JSONObject = {
        "message": {
            "messageId": request_id,
            "role": "ROLE_USER",
            "parts": [{"data": agent_view(item), "mediaType": "application/json"}],
        },
        "configuration": {"acceptedOutputModes": ["application/json"]},
    }
    if tenant is not None:
        params["tenant"] = tenant
    return {"jsonrpc": "2.0", "id": request_id, "method": SEND_MESSAGE, "params": params}


def _answer_in_parts(parts: object) -> tuple[bool, JSON]:
    """(True, the answer) from the first part that holds `{"answer": ...}`: a data part, or
    a text part whose text is that JSON object; (False, None) when none does. Whole numbers
    come back as integers (`whole_numbers`)."""
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        value: JSON = part.get("data")
        if "data" not in part and isinstance(part.get("text"), str):
            try:
                value = parse_json(part["text"])
            except ValueError:
                continue
        if isinstance(value, dict) and "answer" in value:
            return True, whole_numbers(value["answer"])
    return False, None


def read_send_message_reply(reply: JSON, request_id: str) -> JSON:
    """The answer in a JSON-RPC reply to `SendMessage`: from the task's artifacts, then its
    status message, or from the message it returned, the first part holding `{"answer": ...}`.

    Raises AgentRuntimeError: retriable for a JSON-RPC internal error or a task still
    running; not retriable for a reply that is not JSON-RPC 2.0 for this request, another
    error, a task that failed, was canceled, rejected or wants input, or no answer in it.
    """
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        raise AgentRuntimeError("the A2A agent's reply is not JSON-RPC 2.0", retriable=False)
    if reply.get("id") != request_id:
        raise AgentRuntimeError(
            f"the A2A agent answered request {reply.get('id')!r}, not {request_id!r}",
            retriable=False,
        )
    error = reply.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        raise AgentRuntimeError(
            f"the A2A agent answered JSON-RPC error {code}: {snippet(str(message))}",
            retriable=code in A2A_RETRIABLE_CODES,
        )
    result = reply.get("result")
    if not isinstance(result, dict):
        raise AgentRuntimeError("the A2A agent's reply has no result object", retriable=False)
    task, message = result.get("task"), result.get("message")
    if isinstance(task, dict):
        status = task.get("status")
        state = status.get("state") if isinstance(status, dict) else None
        said = status.get("message") if isinstance(status, dict) else None
        said_parts = said.get("parts") if isinstance(said, dict) else None
        if state in A2A_FAILED_STATES:
            text = " ".join(
                str(p["text"])
                for p in (said_parts if isinstance(said_parts, list) else [])
                if isinstance(p, dict) and "text" in p
            )
            raise AgentRuntimeError(
                f"the A2A agent's task {A2A_FAILED_STATES[str(state)]} ({state})"
                + (f": {snippet(str(text))}" if text else ""),
                retriable=False,
            )
        if state != "TASK_STATE_COMPLETED":
            raise AgentRuntimeError(
                f"the A2A agent's task is not finished ({state})", retriable=True
            )
        artifacts = task.get("artifacts")
        for artifact in artifacts if isinstance(artifacts, list) else []:
            found, answer = _answer_in_parts(
                artifact.get("parts") if isinstance(artifact, dict) else None
            )
            if found:
                return answer
        found, answer = _answer_in_parts(said_parts)
        if found:
            return answer
        raise AgentRuntimeError(
            'the A2A agent\'s task holds no part with {"answer": ...}', retriable=False
        )
    if isinstance(message, dict):
        found, answer = _answer_in_parts(message.get("parts"))
        if found:
            return answer
        raise AgentRuntimeError(
            'the A2A agent\'s message holds no part with {"answer": ...}', retriable=False
        )
    raise AgentRuntimeError(
        "the A2A agent's result is neither a task nor a message", retriable=False
    )


@dataclass(frozen=True)
class A2ARuntime:
    """An A2A v1.0 agent at its JSON-RPC interface `endpoint` (picked from its signed card at
    registration, `a2a_interface`): each item goes as `SendMessage` with one data part
    holding the item, `tenant` named when the card's interface has one; the answer is read
    from the finished task's artifact (a data part `{"answer": ...}`) or the message.

    Requests carry `A2A-Version: 1.0`, take at most `timeout` seconds and 1 MiB, follow no
    redirect, go to public addresses only unless `allow_private`, and are signed by
    `operator` when given (a call from accord). Raises RegistryError for an endpoint that is
    not http(s) or is non-public; ValueError for a bad timeout.
    """

    endpoint: str
    tenant: str | None = None
    timeout: float = DEFAULT_HTTP_TIMEOUT
    allow_private: bool = False
    operator: Signer | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_url(self.endpoint, "the A2A interface")
        check_endpoint_address(
            self.endpoint, allow_private=self.allow_private, what="the A2A interface"
        )
        object.__setattr__(self, "timeout", check_timeout(self.timeout))

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError: retriable when the agent cannot be reached, times out,
        answers 429 or 5xx, a JSON-RPC internal error or an unfinished task; not retriable
        otherwise (see `read_send_message_reply`), and for a redirect or a reply over 1 MiB."""
        request_id = str(uuid.uuid4())
        status, text, location = _exchange(
            "POST",
            self.endpoint,
            body=send_message_request(item, self.tenant, request_id),
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                A2A_VERSION_HEADER: A2A_PROTOCOL_VERSION,
            },
            timeout=self.timeout,
            allow_private=self.allow_private,
            what="the A2A agent",
            operator=self.operator,
        )
        reply = json_reply(status, text, location, who="the A2A agent")
        return read_send_message_reply(reply, request_id)


# --- a chat model ------------------------------------------------------------------------

MODEL_INSTRUCTIONS = (
    "You are an agent doing one item of work in a capability. Solve the item you are given "
    'exactly as its prompt asks. Reply with one JSON object of the form {"answer": <your '
    "answer>} and nothing else: the answer is a JSON value (a number, string, object or list, "
    "as the prompt asks)."
)


def model_prompt(item: JSONObject) -> str:
    """The user message for one item: its capability, prompt and payload as JSON."""
    payload = json.dumps(item.get("payload"), indent=2, sort_keys=True, ensure_ascii=False)
    return (
        f"Capability: {item.get('capability')}\n\n"
        f"{item.get('prompt')}\n\n"
        f"Payload (JSON):\n{payload}\n\n"
        'Reply with the JSON object {"answer": ...} only.'
    )


def retry_prompt(error: str) -> str:
    """The user message after an answer `validate` refused: why, and the format again."""
    return (
        f"Your answer was not accepted: {error}\n\n"
        'Reply again with the corrected JSON object {"answer": ...} only.'
    )


def parse_model_answer(content: str | None, *, lenient: bool = False) -> JSON:
    """The answer in a model's reply: exactly one JSON object `{"answer": ...}`.

    With `lenient` (a reply asked for without JSON mode) the object may sit inside a code
    fence or follow some words; the first `{"answer": ...}` object found is taken.
    Raises AgentRuntimeError (not retriable) when there is none.
    """
    if content is None or not content.strip():
        raise AgentRuntimeError("the model replied with no content", retriable=False)
    if len(content) > MAX_ANSWER_BYTES:
        raise AgentRuntimeError("the model replied with more than 1 MiB", retriable=False)
    try:
        reply = parse_json(content)
    except ValueError as exc:
        found = _find_answer_object(content) if lenient else None
        if found is None:
            raise AgentRuntimeError(
                f"the model did not reply with JSON ({exc}): {snippet(content)}", retriable=False
            ) from exc
        reply = found
    if not isinstance(reply, dict) or set(reply) != {"answer"}:
        raise AgentRuntimeError(
            'the model\'s reply is not a JSON object {"answer": ...}: ' + snippet(content),
            retriable=False,
        )
    return reply["answer"]


def _find_answer_object(text: str) -> JSON | None:
    """The first JSON object in `text` whose only key is "answer", or None."""
    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and set(value) == {"answer"}:
            found: JSON = value
            return found
        start = text.find("{", start + 1)
    return None


@dataclass(frozen=True)
class ChatRuntime:
    """An agent that is a chat model (`accord.identity.chat`, say an OpenAI-compatible server's).

    Each item is asked for `{"answer": ...}` in JSON mode; when the model's server refuses
    JSON mode (the reply says so) the reply is searched for the object.

    `validate(capability, answer)`, when given, checks each answer; when it raises, the model
    is asked once more with the error appended to the conversation, and if the second answer
    is refused too the runtime fails, not retriably.
    """

    chat: ChatModel
    validate: AnswerValidator | None = None

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError: retriable when the server cannot be reached, times out,
        rate-limits or fails (5xx); not retriable for another API error, a reply that is not
        `{"answer": ...}`, or an answer `validate` refuses twice."""
        messages: list[ChatMessage] = [
            {"role": "system", "content": MODEL_INSTRUCTIONS},
            {"role": "user", "content": model_prompt(item)},
        ]
        content, value = self._ask(messages)
        if self.validate is None:
            return value
        capability = str(item.get("capability"))
        try:
            self.validate(capability, value)
            return value
        except Exception as exc:  # the hook's own error type, whatever it is
            messages.append({"role": "assistant", "content": content})
            messages.append({"role": "user", "content": retry_prompt(str(exc))})
        _, value = self._ask(messages)
        try:
            self.validate(capability, value)
        except Exception as exc:  # the hook's own error type, whatever it is
            raise AgentRuntimeError(
                f"the model's answer was refused twice: {snippet(str(exc))}", retriable=False
            ) from exc
        return value

    def _ask(self, messages: list[ChatMessage]) -> tuple[str, JSON]:
        """One reply: its text and the answer parsed from it."""
        try:
            reply = self.chat.complete(messages, json_mode=True)
        except ChatError as exc:
            raise AgentRuntimeError(exc.reason, retriable=exc.retriable) from exc
        return reply.content, parse_model_answer(reply.content, lenient=not reply.json_mode)


def openai_runtime(
    model: str,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_MODEL_TIMEOUT,
    validate: AnswerValidator | None = None,
) -> ChatRuntime:
    """The ChatRuntime for `model` on an OpenAI-compatible server
    (`accord.identity.chat.openai_chat`): the base URL is `endpoint`, else `OPENAI_BASE_URL`, else
    OpenAI's; the key `OPENAI_API_KEY` (from `environ`, default `os.environ`), which only OpenAI's
    own API requires.

    Raises RegistryError for a base URL that is not http(s), or for OpenAI's API without a key;
    ValueError for a bad timeout.
    """
    chat = openai_chat(
        model, endpoint=endpoint, environ=environ, who="an 'openai' agent", timeout=timeout
    )
    return ChatRuntime(chat, validate)


__all__ = [
    "MAX_ANSWER_BYTES",
    "A2AInterface",
    "A2ARuntime",
    "AgentRuntime",
    "AgentRuntimeError",
    "AnswerValidator",
    "ChatRuntime",
    "CommandRuntime",
    "HttpRuntime",
    "RandomRuntime",
    "ReferenceRuntime",
    "a2a_interface",
    "agent_view",
    "check_timeout",
    "exam_item",
    "fetch_agent_card",
    "model_prompt",
    "openai_runtime",
    "parse_model_answer",
    "read_send_message_reply",
    "run_url",
]


def json_reply(status: int, text: str, location: str | None, *, who: str) -> JSON:
    """The JSON of an agent's 2xx reply. Raises AgentRuntimeError for a redirect (never
    followed), another status (retriable for 429 and 5xx), or a body that is not JSON."""
    if 300 <= status < 400:
        raise AgentRuntimeError(
            f"{who} answered HTTP {status}, a redirect to {location!r} "
            "(redirects are not followed)",
            retriable=False,
        )
    if not 200 <= status < 300:
        raise AgentRuntimeError(
            f"{who} answered HTTP {status}: {snippet(text)}",
            retriable=status == 429 or status >= 500,
        )
    try:
        return parse_json(text)
    except ValueError as exc:
        raise AgentRuntimeError(
            f"{who} did not answer with JSON ({exc}): {snippet(text)}", retriable=False
        ) from exc
