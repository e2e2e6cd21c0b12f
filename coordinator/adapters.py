"""Agent adapters: how an agent plugs into a team, one method `run(task) -> answer`.

Every adapter satisfies `coordinator.work.AgentAdapter` and carries the DID of the agent it
speaks for and a `timeout` in seconds. Every failure is an `AgentFailure` naming the agent;
`retriable` is True when asking again later may help (the agent could not be reached, timed
out, or failed on its side), False when it answered but not usably, or refused.

    InProcessAdapter   a Python function `fn(task) -> answer`, run in a worker thread
    reference_adapter  the built-in reference agent (`identity.challenges.reference.solve`),
                       the same skills as the capability exams, in process
    HttpAdapter        an agent service (`coordinator.agent_service`, or anything that speaks
                       its protocol): POST `{"task": task.to_json()}`, read `{"answer": ...}`
    SubprocessAdapter  a program: the task JSON on stdin, the answer JSON on stdout
    OpenAIAdapter      an OpenAI-compatible chat model through the official `openai` client,
                       asked for a JSON object `{"answer": ...}` (the exam `openai` runtime)

A hanging agent never holds the caller much beyond its timeout: an in-process function is
abandoned (its thread may linger until the function returns: Python cannot stop a thread), a
subprocess is killed with its whole process group, an HTTP exchange is cut at the deadline.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from coordinator.errors import AgentFailure
from coordinator.work import JSON, SubTask
from identity.agents import (
    MAX_ANSWER_BYTES,
    AgentRuntime,
    AgentRuntimeError,
    check_url,
    openai_runtime,
    reference_runtime,
)
from identity.errors import ExamError, RegistryError

DEFAULT_TIMEOUT = 30.0
DEFAULT_MODEL_TIMEOUT = 60.0
RUN_PATH = "/run"


def _snippet(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _check_json(agent: str, value: JSON) -> JSON:
    """`value` if it is a JSON value (no NaN/Infinity, string keys); AgentFailure otherwise."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AgentFailure(agent, f"the answer is not JSON: {exc}") from exc
    return value


def _seen(task: SubTask) -> dict[str, JSON]:
    """What an exam agent sees of the task's item: item_id, capability, prompt, payload."""
    item = task.item
    return {
        "item_id": item.get("item_id"),
        "capability": item.get("capability", task.capability),
        "prompt": item.get("prompt"),
        "payload": item.get("payload"),
    }


# --- in-process ---------------------------------------------------------------------------


class InProcessAdapter:
    """An agent that is a Python function `fn(task) -> answer`.

    `fn` runs in a fresh daemon worker thread; after `timeout` seconds the adapter stops
    waiting and raises AgentFailure (retriable). The thread itself cannot be stopped and may
    linger until `fn` returns; its result is then dropped. An exception from `fn` becomes
    AgentFailure (an AgentFailure raised by `fn` passes through, re-labelled with this agent).
    """

    def __init__(
        self,
        agent_did: str,
        fn: Callable[[SubTask], JSON],
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.agent_did = agent_did
        self.fn = fn
        self.timeout = _check_timeout(timeout)

    def run(self, task: SubTask) -> JSON:
        outcome: list[tuple[bool, object]] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append((True, self.fn(task)))
            except BaseException as exc:  # handed to the caller below
                outcome.append((False, exc))
            finally:
                done.set()

        worker = threading.Thread(target=work, name=f"agent-{task.sub_id}", daemon=True)
        worker.start()
        if not done.wait(self.timeout):
            raise AgentFailure(
                self.agent_did,
                f"sub-task {task.sub_id} took longer than {self.timeout:g} s",
                retriable=True,
            )
        ok, value = outcome[0]
        if ok:
            return _check_json(self.agent_did, value)
        if isinstance(value, AgentFailure):
            raise AgentFailure(self.agent_did, value.reason, retriable=value.retriable) from value
        assert isinstance(value, BaseException)
        if not isinstance(value, Exception):
            raise value
        retriable = bool(getattr(value, "retriable", False))
        raise AgentFailure(
            self.agent_did, f"sub-task {task.sub_id} failed: {value}", retriable=retriable
        ) from value


def solve_task(task: SubTask) -> JSON:
    """The reference agent's answer to `task`'s item (the exam skills, offline).

    Raises ExamError for an item it has no skill for or cannot parse.
    """
    return reference_runtime(_seen(task))


def reference_adapter(agent_did: str, timeout: float = DEFAULT_TIMEOUT) -> InProcessAdapter:
    """The built-in reference agent for `agent_did`, in process."""
    return InProcessAdapter(agent_did, solve_task, timeout)


# --- HTTP agent service -------------------------------------------------------------------


def run_url(endpoint: str) -> str:
    """The URL tasks are POSTed to: `endpoint`, with `/run` added when it has no path.

    Raises ValueError for a URL that is not http(s), has no host, or carries credentials.
    """
    try:
        check_url(endpoint, "the agent endpoint")
    except RegistryError as exc:
        raise ValueError(str(exc)) from exc
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        parts = parts._replace(path=RUN_PATH)
    return urlunsplit(parts)


class HttpAdapter:
    """An agent behind an HTTP agent service (another process, or another machine).

    POSTs `{"task": task.to_json()}` to `endpoint` (a URL without a path gets `/run`) and
    reads `{"answer": ...}` from a 2xx reply of at most 1 MiB, all within `timeout` seconds;
    redirects are not followed. AgentFailure is retriable when the service cannot be reached,
    times out, or answers 429 or 5xx; not retriable for another status, a body that is not
    JSON, or JSON without an `answer`.
    """

    def __init__(self, agent_did: str, endpoint: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.agent_did = agent_did
        self.endpoint = run_url(endpoint)
        self.timeout = _check_timeout(timeout)

    def _fail(self, reason: str, *, retriable: bool) -> AgentFailure:
        return AgentFailure(self.agent_did, reason, retriable=retriable)

    def run(self, task: SubTask) -> JSON:
        where = self.endpoint
        deadline = time.monotonic() + self.timeout
        body = bytearray()
        try:
            with (
                httpx.Client(timeout=self.timeout, follow_redirects=False) as client,
                client.stream(
                    "POST",
                    where,
                    json={"task": task.to_json()},
                    headers={"Accept": "application/json"},
                ) as response,
            ):
                status = response.status_code
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise self._fail("the agent service sent more than 1 MiB", retriable=False)
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the whole answer took too long")
                location = response.headers.get("location", "")
        except httpx.TimeoutException:
            raise self._fail(
                f"the agent service at {where} did not answer within {self.timeout:g} s",
                retriable=True,
            ) from None
        except httpx.TransportError as exc:
            raise self._fail(
                f"cannot reach the agent service at {where}: {exc}", retriable=True
            ) from exc
        except httpx.HTTPError as exc:
            raise self._fail(
                f"the request to the agent service at {where} failed: {exc}", retriable=True
            ) from exc
        text = body.decode("utf-8", errors="replace")
        if 300 <= status < 400:
            raise self._fail(
                f"the agent service answered HTTP {status}, a redirect to {location!r} "
                "(redirects are not followed)",
                retriable=False,
            )
        if not 200 <= status < 300:
            raise self._fail(
                f"the agent service answered HTTP {status}: {_snippet(text)}",
                retriable=status == 429 or status >= 500,
            )
        try:
            reply = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self._fail(
                f"the agent service did not answer with JSON ({exc}): {_snippet(text)}",
                retriable=False,
            ) from exc
        if not isinstance(reply, dict) or "answer" not in reply:
            raise self._fail(
                'the agent service\'s JSON has no "answer": ' + _snippet(text), retriable=False
            )
        return _check_json(self.agent_did, reply["answer"])


# --- subprocess ---------------------------------------------------------------------------


class SubprocessAdapter:
    """An agent that is a program: `task.to_json()` as JSON on stdin, the answer as one JSON
    value on stdout (at most 1 MiB), within `timeout` seconds (the exam `command` runtime's
    protocol, with the whole task instead of the bare item).

    The program runs in its own session; on timeout its whole process group is killed.
    AgentFailure is retriable for a timeout, not retriable when the program cannot start,
    exits non-zero or prints something that is not one JSON value.
    """

    def __init__(
        self,
        agent_did: str,
        argv: Sequence[str],
        timeout: float = DEFAULT_TIMEOUT,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        self.agent_did = agent_did
        self.argv = list(argv)
        self.timeout = _check_timeout(timeout)
        self.env = None if env is None else dict(env)

    def _fail(self, reason: str, *, retriable: bool = False) -> AgentFailure:
        return AgentFailure(self.agent_did, reason, retriable=retriable)

    def run(self, task: SubTask) -> JSON:
        try:
            process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                env=self.env,
            )
        except OSError as exc:
            raise self._fail(f"cannot run the agent command: {exc}") from exc
        with process:
            try:
                stdout, stderr = process.communicate(json.dumps(task.to_json()), self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                raise self._fail(
                    f"the agent command took longer than {self.timeout:g} s", retriable=True
                ) from None
            except BaseException:
                _kill_group(process)
                raise
        if process.returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or [""]
            raise self._fail(f"the agent command exited {process.returncode}: {tail[0]}")
        if len(stdout) > MAX_ANSWER_BYTES:
            raise self._fail("the agent command printed more than 1 MiB")
        try:
            value: JSON = json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise self._fail(
                f"the agent command did not print JSON ({exc}): {_snippet(stdout)}"
            ) from exc
        return _check_json(self.agent_did, value)


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill `process` and everything in its process group, then reap it (briefly)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        process.communicate(timeout=2)


# --- OpenAI-compatible model --------------------------------------------------------------


class OpenAIAdapter:
    """An agent that is an OpenAI-compatible chat model (the exam `openai` runtime).

    Each run opens an `openai.OpenAI` client (closed after use), sends the task's item as the
    exam runtime does, with `response_format={"type": "json_object"}`, and parses the reply
    strictly as `{"answer": ...}`. `base_url` defaults to `OPENAI_BASE_URL`, else OpenAI's;
    `api_key` to `OPENAI_API_KEY`. `max_retries` (default 0) is the client's own retries:
    each attempt may take up to `timeout`. AgentFailure is retriable when the model cannot be
    reached, times out, rate-limits (429) or fails (5xx); not retriable for another API error
    or a reply that is not `{"answer": ...}`. Raises ValueError at construction for a bad
    base URL or no key.
    """

    def __init__(
        self,
        agent_did: str,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_MODEL_TIMEOUT,
        *,
        max_retries: int = 0,
    ) -> None:
        self.agent_did = agent_did
        self.model = model
        self.timeout = _check_timeout(timeout)
        environ: dict[str, str] = {}
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if key:
            environ["OPENAI_API_KEY"] = key
        url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
        if url:
            environ["OPENAI_BASE_URL"] = url
        try:
            self._runtime: AgentRuntime = openai_runtime(
                model, environ=environ, timeout=self.timeout, max_retries=max_retries
            )
        except (ExamError, RegistryError) as exc:
            raise ValueError(str(exc)) from exc

    def run(self, task: SubTask) -> JSON:
        try:
            answer = self._runtime(_seen(task))
        except AgentRuntimeError as exc:
            reason = str(exc).removesuffix(" (retriable)")
            raise AgentFailure(self.agent_did, reason, retriable=exc.retriable) from exc
        except ExamError as exc:
            raise AgentFailure(self.agent_did, str(exc)) from exc
        return _check_json(self.agent_did, answer)


__all__ = [
    "DEFAULT_TIMEOUT",
    "HttpAdapter",
    "InProcessAdapter",
    "OpenAIAdapter",
    "SubprocessAdapter",
    "reference_adapter",
    "run_url",
    "solve_task",
]
