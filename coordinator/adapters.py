"""Agent adapters: how an agent plugs into a team, one method `run(task) -> answer`.

Team work reaches agents through the same seam as exams (`accord.identity.runtimes`): a sub-task's
item has exactly the shape of an exam item (`ExamItem.for_agent()`), and an adapter hands it
to the agent's runtime. Every adapter satisfies `accord.coordinator.work.AgentAdapter` and carries
the DID of the agent it speaks for; every failure is an `AgentFailure` naming that agent, with
the runtime's `retriable`.

    RuntimeAdapter     any `accord.identity.runtimes.AgentRuntime` (a program, an HTTP agent
                       service, an OpenAI-compatible model, ...): `runtime.answer(task's item)`
    HttpAdapter        a RuntimeAdapter over an `HttpRuntime` at `endpoint`
    InProcessAdapter   a Python function `fn(task) -> answer`, run in a worker thread
    reference_adapter  the built-in reference agent, in process

A hanging agent never holds the caller much beyond its timeout: an in-process function is
abandoned (its thread may linger until the function returns: Python cannot stop a thread), a
program is killed with its whole process group, an HTTP exchange is cut at the deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from accord.coordinator.errors import AgentFailure
from accord.coordinator.work import JSON, SubTask
from accord.identity.errors import ExamError
from accord.identity.runtimes import (
    AgentRuntime,
    AgentRuntimeError,
    HttpRuntime,
    ReferenceRuntime,
    agent_view,
    check_timeout,
)
from accord.ledger.signing import Signer

DEFAULT_TIMEOUT = 30.0


def work_item(task: SubTask) -> dict[str, JSON]:
    """What the agent is sent for `task`: its item as an exam item is seen (item_id,
    capability, prompt, payload), the capability the task's when the item names none."""
    item = agent_view(task.item)
    if item["capability"] is None:
        item["capability"] = task.capability
    return item


def _check_json(agent: str, value: JSON) -> JSON:
    """`value` if it is a JSON value (no NaN/Infinity, string keys); AgentFailure otherwise."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AgentFailure(agent, f"the answer is not JSON: {exc}") from exc
    return value


class RuntimeAdapter:
    """An agent behind an `accord.identity.runtimes.AgentRuntime`: `run(task)` sends the task's item
    (`work_item`) to `runtime.answer`. The runtime's AgentRuntimeError becomes AgentFailure
    with the same `retriable`; another ExamError, AgentFailure not retriable."""

    def __init__(self, agent_did: str, runtime: AgentRuntime) -> None:
        self.agent_did = agent_did
        self.runtime = runtime

    def run(self, task: SubTask) -> JSON:
        try:
            answer = self.runtime.answer(work_item(task))
        except AgentRuntimeError as exc:
            raise AgentFailure(self.agent_did, exc.reason, retriable=exc.retriable) from exc
        except ExamError as exc:
            raise AgentFailure(self.agent_did, str(exc)) from exc
        return _check_json(self.agent_did, answer)


class HttpAdapter(RuntimeAdapter):
    """An agent behind an HTTP agent service at `endpoint` (see HttpRuntime: `/run` added to a
    URL without a path, public addresses only unless `allow_private`, each request signed by
    `operator` when given). Raises RegistryError for a bad endpoint, ValueError for a bad
    timeout."""

    def __init__(
        self,
        agent_did: str,
        endpoint: str,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        allow_private: bool = False,
        operator: Signer | None = None,
    ) -> None:
        runtime = HttpRuntime(endpoint, timeout, allow_private=allow_private, operator=operator)
        super().__init__(agent_did, runtime)
        self.endpoint = runtime.endpoint


class InProcessAdapter:
    """An agent that is a Python function `fn(task) -> answer`.

    `fn` runs in a fresh daemon worker thread; after `timeout` seconds the adapter stops
    waiting and raises AgentFailure (retriable). The thread itself cannot be stopped and may
    linger until `fn` returns; its result is then dropped. An exception from `fn` becomes
    AgentFailure (an AgentFailure raised by `fn` passes through, re-labelled with this agent;
    another exception's `retriable` attribute, if any, is kept). Raises ValueError for a
    timeout that is not a positive number.
    """

    def __init__(
        self,
        agent_did: str,
        fn: Callable[[SubTask], JSON],
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.agent_did = agent_did
        self.fn = fn
        self.timeout = check_timeout(timeout)

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

    Raises AgentRuntimeError (not retriable) for an item it has no skill for.
    """
    return ReferenceRuntime().answer(work_item(task))


def reference_adapter(agent_did: str, timeout: float = DEFAULT_TIMEOUT) -> InProcessAdapter:
    """The built-in reference agent for `agent_did`, in process, within `timeout` seconds."""
    return InProcessAdapter(agent_did, solve_task, timeout)


__all__ = [
    "DEFAULT_TIMEOUT",
    "HttpAdapter",
    "InProcessAdapter",
    "RuntimeAdapter",
    "reference_adapter",
    "solve_task",
    "work_item",
]
