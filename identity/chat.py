"""The one seam to a chat model: what the openai runtime, the LLM policy and the judge ask.

    chat.complete(messages, json_mode=…, temperature=…, model=…) -> ChatReply

`ChatModel` is the protocol (one method); `OpenAIChat` is the implementation for any
OpenAI-compatible server, through the official `openai` client (imported when a request is
made: the client takes half a second to load). Everything about talking to the server is
decided here, once:

    key         `api_key`, else a placeholder ("no-key"): a local server needs none, and the
                client insists on one
    timeout     each request may take `timeout` seconds
    retries     a request that failed in a way that may pass (a timeout, a lost connection
                other than a non-public address refused, 408, 409, 429, 5xx) is sent again,
                up to `retries` more times, after the server's Retry-After (at most a minute)
                or `backoff` seconds doubled each time (at most `max_backoff`); any other
                refusal is not sent again
    JSON mode   `json_mode=True` asks for `response_format` json_object; a server that refuses
                it (HTTP 400 or 422) is asked the same in plain text at once, and in plain text
                from then on (`ChatReply.json_mode` says how the reply was asked for)
    the reply   the first choice's text; no choices, a reply cut off at the length limit, or a
                refusal is a ChatReplyError
    addresses   with `allow_private` given, every request goes through
                `accord.identity.address_guard.agent_client` (a base URL that came from outside:
                public addresses only unless it is True)

Errors (`accord.identity.errors`): ChatError, `retriable` as above, its message naming the server
and what went wrong; ChatReplyError (a ChatError, not retriable) when the server answered but the
reply cannot be used. `openai` errors are mapped here and go no further.

`openai_chat(model, endpoint=…, environ=…)` is the configuration every caller shares: the base
URL is `endpoint`, else OPENAI_BASE_URL, else OpenAI's; the key OPENAI_API_KEY, which only
OpenAI's own API requires.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

from accord.identity.address_guard import PrivateAddressRefused, check_url
from accord.identity.errors import ChatError, ChatReplyError, RegistryError

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 1
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF = 8.0
MAX_RETRY_AFTER = 60.0
#: Sent as the key to a server that needs none: the `openai` client insists on one.
PLACEHOLDER_API_KEY = "no-key"
RETRIABLE_STATUSES = frozenset({408, 409, 429})


class ChatMessage(TypedDict):
    """One message of a conversation with a chat model."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class ChatReply:
    """A model's reply: its text, the model asked, and whether it was asked in JSON mode
    (False when the caller did not ask for it, or the server refuses it: then the text may
    hold the JSON among other words)."""

    content: str
    model: str
    json_mode: bool


class ChatModel(Protocol):
    """A chat model: one method, and the name of the model it asks unless told otherwise."""

    model: str

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_mode: bool = False,
        temperature: float | None = None,
        model: str | None = None,
    ) -> ChatReply:
        """The model's reply to `messages`: one JSON object when `json_mode` (as far as the
        server can promise it), at `temperature` (None: the server's default), from `model`
        (None: the one this ChatModel was made for).

        Raises ChatError (`retriable`), ChatReplyError when the reply cannot be used.
        """
        ...


def snippet(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class OpenAIChat:
    """A chat model behind an OpenAI-compatible server, through the official `openai` client
    (the module docstring says how it asks). `base_url` None means OpenAI's API.

    `calls` counts the HTTP requests sent; `json_mode` turns False once the server refused
    JSON mode. Each `complete` opens a client and closes it. `sleep` is how it waits between
    retries. Raises RegistryError for a base URL that is not http(s), ValueError for an empty
    model name, a timeout that is not positive, or a negative number of retries.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        allow_private: bool | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model or not model.strip():
            raise ValueError("a chat model needs a model name")
        if isinstance(timeout, bool) or not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries}")
        if base_url is not None:
            check_url(base_url, "the model base URL")
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.allow_private = allow_private
        self.sleep = sleep
        self.json_mode = True
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The server, for a message: its base URL, or "OpenAI"."""
        return self.base_url or "OpenAI"

    def __repr__(self) -> str:
        return f"OpenAIChat({self.model!r}, base_url={self.base_url!r})"

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_mode: bool = False,
        temperature: float | None = None,
        model: str | None = None,
    ) -> ChatReply:
        """Raises ChatError (`retriable`) when the model cannot be asked, after the retries;
        ChatReplyError when its reply cannot be used."""
        import openai  # here, not at import: the client takes half a second to load

        name = model or self.model
        with self._client() as client:
            attempt = 0
            while True:
                try:
                    return self._once(client, name, list(messages), json_mode, temperature)
                except openai.OpenAIError as exc:
                    error = self._failure(exc)
                    if not error.retriable or attempt >= self.retries:
                        raise error from exc
                    self.sleep(self._delay(attempt, exc))
                    attempt += 1

    def _client(self) -> openai.OpenAI:
        import openai

        from accord.identity.tls import tls_context

        # openai's own client (its httpx), on the process's TLS context, not a new one each time
        http_client: Any = openai.DefaultHttpxClient(verify=tls_context())
        if self.allow_private is not None:
            from accord.identity.address_guard import agent_client

            http_client = agent_client(self.timeout, allow_private=self.allow_private)
        return openai.OpenAI(
            api_key=self.api_key or PLACEHOLDER_API_KEY,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,  # retried here, counted and mapped once
            # openai accepts an httpx.Client as well as its own (it checks both)
            http_client=http_client,
        )

    def _once(
        self,
        client: openai.OpenAI,
        model: str,
        messages: list[ChatMessage],
        json_mode: bool,
        temperature: float | None,
    ) -> ChatReply:
        """One request (two when the server refuses JSON mode). Raises what `openai` raises,
        ChatReplyError for an unusable reply."""
        import openai

        options: dict[str, Any] = {"model": model, "messages": messages}
        if temperature is not None:
            options["temperature"] = temperature
        asked = json_mode and self.json_mode
        if asked:
            try:
                completion = self._create(
                    client, {**options, "response_format": {"type": "json_object"}}
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError):
                completion = self._create(client, options)
                self.json_mode = asked = False
        else:
            completion = self._create(client, options)
        return ChatReply(self._content(completion), model, asked)

    def _create(self, client: openai.OpenAI, options: dict[str, Any]) -> ChatCompletion:
        with self._lock:
            self.calls += 1
        completion: ChatCompletion = client.chat.completions.create(**options)
        return completion

    def _content(self, completion: ChatCompletion) -> str:
        """The first choice's text. Raises ChatReplyError: no choices, cut off, a refusal."""
        if not completion.choices:
            raise ChatReplyError(f"the reply of the model at {self.where} has no choices")
        choice = completion.choices[0]
        if choice.finish_reason == "length":
            raise ChatReplyError(f"the reply of the model at {self.where} was cut off (length)")
        if choice.message.refusal:
            raise ChatReplyError(
                f"the reply of the model at {self.where} is a refusal: "
                + snippet(choice.message.refusal)
            )
        return choice.message.content or ""

    def _failure(self, exc: Exception) -> ChatError:
        """What an `openai` error means, for a person, and whether asking again may help."""
        import openai

        where = self.where
        if isinstance(exc, openai.APITimeoutError):
            return ChatError(
                f"the model at {where} did not answer within {self.timeout:g} s", retriable=True
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            return ChatError(
                f"cannot reach the model at {where}: {snippet(str(cause or exc))}",
                # a non-public address refused by the address guard stays refused
                retriable=not isinstance(cause, PrivateAddressRefused),
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            return ChatError(
                f"the model at {where} answered HTTP {status}: {snippet(str(exc.message))}",
                retriable=status in RETRIABLE_STATUSES or status >= 500,
            )
        return ChatError(f"the model at {where} failed: {snippet(str(exc))}", retriable=False)

    def _delay(self, attempt: int, exc: Exception) -> float:
        """Seconds before retry `attempt + 1`: the server's Retry-After when it gives one of
        at most a minute, else `backoff` doubled per attempt, at most `max_backoff`."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            after = retry_after(exc.response.headers)
            if after is not None:
                return after
        return float(min(self.backoff * 2**attempt, self.max_backoff))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a reply asks for (`retry-after-ms`, else `retry-after` in seconds), when it is
    a number from 0 to a minute; None otherwise (an HTTP date is not honoured)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if 0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
    return None


def openai_chat(
    model: str,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    who: str = "a model",
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    allow_private: bool | None = None,
) -> OpenAIChat:
    """The OpenAIChat for `model` as configured: the base URL is `endpoint`, else
    OPENAI_BASE_URL, else OpenAI's; the key OPENAI_API_KEY (from `environ`, default
    `os.environ`), which only OpenAI's own API requires. `who` names the caller in a message.

    Raises RegistryError for a base URL that is not http(s), or for OpenAI's API without a
    key; ValueError as OpenAIChat does.
    """
    env = os.environ if environ is None else environ
    api_key = env.get("OPENAI_API_KEY") or None
    base_url = endpoint or env.get("OPENAI_BASE_URL") or None
    if base_url is not None:
        check_url(base_url, "--endpoint" if endpoint else "OPENAI_BASE_URL")
    elif api_key is None:
        raise RegistryError(
            f"{who} on OpenAI's API needs OPENAI_API_KEY "
            "(a local server without keys needs OPENAI_BASE_URL or --endpoint instead)"
        )
    return OpenAIChat(
        model,
        base_url=base_url,
        api_key=api_key,
        timeout=timeout,
        retries=retries,
        allow_private=allow_private,
    )


__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "PLACEHOLDER_API_KEY",
    "ChatError",
    "ChatMessage",
    "ChatModel",
    "ChatReply",
    "ChatReplyError",
    "OpenAIChat",
    "openai_chat",
    "retry_after",
]
