"""Agent runtimes: the one seam through which accord asks an agent for an answer.

Exams, team work and bids send an agent the same thing, an item as an agent sees it
(`ExamItem.for_agent()`): `{"item_id", "capability", "prompt", "payload"}`. Every runtime
answers it through one method,

    runtime.answer(item) -> JSON

which raises AgentRuntimeError (an ExamError) when it cannot; its `retriable` says whether
asking again later may help (the agent could not be reached, timed out, was overloaded or
failed on its side) or not (it answered, but not in a usable form, or refused).

    ReferenceRuntime  the built-in reference agent (`identity.challenges.reference.solve`)
    RandomRuntime     answers of the right shape, at random (`reference.random_answer`)
    CommandRuntime    a program: the item as JSON on stdin, the answer as JSON on stdout
                      (at most 1 MiB), within a timeout; it runs in its own session and its
                      whole process group is killed when the time is up
    HttpRuntime       an agent service: POST `{"item": item}` to its endpoint (`/run` when
                      the URL has no path), a 2xx reply `{"answer": ...}` of at most 1 MiB,
                      within a timeout; redirects never followed; only public addresses
                      unless private agents are allowed (`identity.address_guard`)
    OpenAIRuntime     an OpenAI-compatible chat model through the official `openai` client,
                      asked for the JSON object `{"answer": ...}`; an optional `validate`
                      hook checks the answer and the model gets one more try

`identity.agents.runtime_for` builds the runtime a registered agent's record names;
`coordinator.adapters` runs team work through the same runtimes.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from identity.address_guard import PrivateAddressRefused, agent_client, check_endpoint_address
from identity.challenges import JSON, ExamItem, JSONObject, reference
from identity.errors import ExamError, RegistryError

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

DEFAULT_COMMAND_TIMEOUT = 30.0
DEFAULT_HTTP_TIMEOUT = 30.0
DEFAULT_MODEL_TIMEOUT = 60.0
MODEL_MAX_RETRIES = 1
MAX_ANSWER_BYTES = 1 << 20
RUN_PATH = "/run"
ITEM_KEYS = ("item_id", "capability", "prompt", "payload")
#: Sent as the key to a server that needs none: the `openai` client insists on one.
PLACEHOLDER_API_KEY = "no-key"

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
    """Exactly what an agent sees of an item: its item_id, capability, prompt and payload."""
    return {key: item.get(key) for key in ITEM_KEYS}


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


def snippet(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> JSON:
    """`text` as one JSON value (NaN and Infinity refused). Raises ValueError otherwise."""
    value: JSON = json.loads(text, parse_constant=_refuse_constant)
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
    """An agent behind an HTTP agent service (`coordinator.agent_service`, or anything that
    speaks its protocol): POST `{"item": item}`, read `{"answer": ...}`.

    `endpoint` gets `/run` when it has no path. Unless `allow_private`, the endpoint may not
    be a non-public address and every connection goes to a public address only
    (`identity.address_guard`). Raises RegistryError for a URL that is not http(s), or
    names a non-public address (PrivateEndpointError); ValueError for a bad timeout.
    """

    endpoint: str
    timeout: float = DEFAULT_HTTP_TIMEOUT
    allow_private: bool = False

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
                agent_client(self.timeout, allow_private=self.allow_private) as client,
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
        if 300 <= status < 400:
            raise AgentRuntimeError(
                f"the agent service answered HTTP {status}, a redirect to {location!r} "
                "(redirects are not followed)",
                retriable=False,
            )
        if not 200 <= status < 300:
            raise AgentRuntimeError(
                f"the agent service answered HTTP {status}: {snippet(text)}",
                retriable=status == 429 or status >= 500,
            )
        try:
            reply = parse_json(text)
        except ValueError as exc:
            raise AgentRuntimeError(
                f"the agent service did not answer with JSON ({exc}): {snippet(text)}",
                retriable=False,
            ) from exc
        if not isinstance(reply, dict) or "answer" not in reply:
            raise AgentRuntimeError(
                'the agent service\'s JSON has no "answer": ' + snippet(text), retriable=False
            )
        return reply["answer"]


# --- an OpenAI-compatible model -----------------------------------------------------------

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


@dataclass
class OpenAIRuntime:
    """An agent that is an OpenAI-compatible chat model, through the official `openai` client.

    `base_url` None means OpenAI's API; `api_key` None means a server that needs no key (a
    placeholder is sent, since the client insists on one). Each answer opens a client (closed
    after use) and asks for `{"answer": ...}` with `response_format` json_object; a server
    that refuses that (HTTP 400 or 422) is asked again without it, and from then on, and its
    reply is searched for the object. `max_retries` are the client's own retries, each
    attempt taking up to `timeout`.

    `validate(capability, answer)`, when given, checks each answer; when it raises, the model
    is asked once more with the error appended to the conversation, and if the second answer
    is refused too the runtime fails, not retriably.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = DEFAULT_MODEL_TIMEOUT
    max_retries: int = MODEL_MAX_RETRIES
    validate: AnswerValidator | None = None
    json_mode: bool = True

    def __post_init__(self) -> None:
        if self.base_url is not None:
            check_url(self.base_url, "the model base URL")
        self.timeout = check_timeout(self.timeout)

    @property
    def where(self) -> str:
        return self.base_url or "OpenAI"

    def answer(self, item: JSONObject) -> JSON:
        """Raises AgentRuntimeError: retriable when the server cannot be reached, times out,
        rate-limits or fails (5xx); not retriable for another API error, a reply that is not
        `{"answer": ...}`, or an answer `validate` refuses twice."""
        messages: list[ChatCompletionMessageParam] = [
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

    def _ask(self, messages: list[ChatCompletionMessageParam]) -> tuple[str, JSON]:
        """One completion: the reply's text and the answer parsed from it."""
        import openai  # here, not at import: the client takes half a second to load

        json_mode = self.json_mode
        try:
            with openai.OpenAI(
                api_key=self.api_key or PLACEHOLDER_API_KEY,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            ) as client:
                try:
                    completion = client.chat.completions.create(
                        model=self.model,
                        messages=messages,
                        response_format={"type": "json_object"} if json_mode else openai.omit,
                    )
                except (openai.BadRequestError, openai.UnprocessableEntityError):
                    if not json_mode:
                        raise
                    # The server refuses JSON mode: ask in plain text, now and from now on.
                    json_mode = self.json_mode = False
                    completion = client.chat.completions.create(model=self.model, messages=messages)
        except openai.APITimeoutError:
            raise AgentRuntimeError(
                f"the model at {self.where} did not answer within {self.timeout:g} s",
                retriable=True,
            ) from None
        except openai.APIConnectionError as exc:
            raise AgentRuntimeError(
                f"cannot reach the model at {self.where}: {exc}", retriable=True
            ) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            raise AgentRuntimeError(
                f"the model at {self.where} answered HTTP {status}: {snippet(str(exc.message))}",
                retriable=status in (408, 409, 429) or status >= 500,
            ) from exc
        except openai.OpenAIError as exc:
            raise AgentRuntimeError(
                f"the model at {self.where} failed: {snippet(str(exc))}", retriable=False
            ) from exc
        if not completion.choices:
            raise AgentRuntimeError("the model replied with no choices", retriable=False)
        choice = completion.choices[0]
        if choice.finish_reason == "length":
            raise AgentRuntimeError("the model's reply was cut off (length)", retriable=False)
        if choice.message.refusal:
            raise AgentRuntimeError(
                f"the model refused: {snippet(choice.message.refusal)}", retriable=False
            )
        content = choice.message.content or ""
        return content, parse_model_answer(content, lenient=not json_mode)


def openai_runtime(
    model: str,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_MODEL_TIMEOUT,
    max_retries: int = MODEL_MAX_RETRIES,
    validate: AnswerValidator | None = None,
) -> OpenAIRuntime:
    """The OpenAIRuntime for `model` as configured: the base URL is `endpoint`, else
    `OPENAI_BASE_URL`, else OpenAI's; the key `OPENAI_API_KEY` (from `environ`, default
    `os.environ`), which only OpenAI's own API requires.

    Raises RegistryError for a base URL that is not http(s), or for OpenAI's API without a key.
    """
    env = os.environ if environ is None else environ
    api_key = env.get("OPENAI_API_KEY") or None
    base_url = endpoint or env.get("OPENAI_BASE_URL") or None
    if base_url is not None:
        check_url(base_url, "--endpoint" if endpoint else "OPENAI_BASE_URL")
    elif api_key is None:
        raise RegistryError(
            "an 'openai' agent on OpenAI's API needs OPENAI_API_KEY "
            "(a local server without keys needs OPENAI_BASE_URL or --endpoint instead)"
        )
    return OpenAIRuntime(
        model,
        base_url=base_url,
        api_key=api_key,
        timeout=timeout,
        max_retries=max_retries,
        validate=validate,
    )


__all__ = [
    "MAX_ANSWER_BYTES",
    "AgentRuntime",
    "AgentRuntimeError",
    "AnswerValidator",
    "CommandRuntime",
    "HttpRuntime",
    "OpenAIRuntime",
    "RandomRuntime",
    "ReferenceRuntime",
    "agent_view",
    "check_timeout",
    "check_url",
    "exam_item",
    "model_prompt",
    "openai_runtime",
    "parse_model_answer",
    "run_url",
]
