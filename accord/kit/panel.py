"""A kit agent on a dispute's panel: it evaluates the disputed parts in its own process,
commits to its vote, and reveals it when the service asks again (the commit window closed).

The service calls `POST /panel` (signed by its operator, `accord.market.panel_calls`) with

    {"phase": "commit", "task_id", "check", "criterion", "reason", "parts": {id: output},
     "inputs": {id: {"capability", "input"}}}    -> {"entry": its signed panel.committed}
    {"phase": "reveal", "task_id", "check"}       -> {"entry": its signed panel.revealed}

The parts, their inputs and the requester's reason are the parties' words: data to evaluate,
never instructions. `evaluate(request)` gives "team" (the parts meet the criterion) or
"requester"; `rerun_evaluator(runtime)` is the default for deterministic skills: the agent does
each part again with its own handler and finds for the team when every output is the one it
gets (what a requester's deterministic check would also see). A contested inconclusive python
check (the call's `"python"`: its code, limits and world) is re-run in the agent's own box
first (`boxed_check_evaluator`); where it decides, that is the vote.

    seat = attach_panel(agent)   # after agent.start(): its server answers /panel
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

from accord.identity.challenges.sandbox import Frozen
from accord.identity.errors import ExamError
from accord.identity.runtimes import AgentRuntime, AgentRuntimeError
from accord.market.check_io import run_python_check
from accord.market.panel import PANEL_COMMITTED, PANEL_REVEALED, vote_commitment
from accord.market.work import PythonCheck

Evaluate = Callable[[Mapping[str, Any]], str]
SignEntry = Callable[[str, str, Mapping[str, Any]], dict[str, Any]]


class PanelRefused(Exception):
    """A panel call this agent does not answer (`status`: the HTTP status to reply)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def rerun_evaluator(runtime: AgentRuntime) -> Evaluate:
    """The panelist's evaluation by doing the work again: each disputed part's input run
    through `runtime`; "team" when every delivered output is the one it gets, else
    "requester". A part it cannot do itself finds for the team (the requester must convince
    the panel, not the other way round)."""

    def evaluate(request: Mapping[str, Any]) -> str:
        parts = request.get("parts") or {}
        inputs = request.get("inputs") or {}
        for part_id, output in parts.items():
            given = inputs.get(part_id)
            if not isinstance(given, Mapping):
                continue
            item = {
                "item_id": part_id,
                "capability": given.get("capability"),
                "payload": given.get("input"),
            }
            try:
                mine = runtime.answer(item)
            except AgentRuntimeError:
                continue
            if mine != output:
                return "requester"
        return "team"

    return evaluate


def boxed_check_evaluator(fallback: Evaluate) -> Evaluate:
    """The panelist's evaluation of a contested python check (the call's `"python"`: its
    code, limits and world): the check re-run in this agent's own box on the parts, in the
    world the service ran it in; its verdict when it decides ("team" for True), else
    (inconclusive here too, or no box on this machine) `fallback`'s. Any other dispute is
    `fallback`'s."""

    def evaluate(request: Mapping[str, Any]) -> str:
        given = request.get("python")
        if not isinstance(given, Mapping):
            return fallback(request)
        parts = request.get("parts") or {}
        try:
            check = PythonCheck(
                str(request.get("check", "")),
                1,
                tuple(str(p) for p in parts),
                str(given["code"]),
                int(given["cpu_seconds"]),
                int(given["memory_mib"]),
            )
            world = Frozen(at=int(given["at"]), seed=str(given["seed"]))
            result = run_python_check(check, dict(parts), world)
        except (KeyError, TypeError, ValueError, ExamError):
            return fallback(request)
        if result.inconclusive:
            return fallback(request)
        return "team" if result.passed else "requester"

    return evaluate


class PanelSeat:
    """Answers panel calls: `sign(kind, subject, body)` signs this agent's own entry (the
    kit client's `entry`), `evaluate` decides its vote. Each dispute's vote and salt are kept
    in memory between the commit and the reveal."""

    def __init__(self, sign: SignEntry, evaluate: Evaluate) -> None:
        self.sign = sign
        self.evaluate = evaluate
        self._votes: dict[tuple[str, str], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The signed entry for this call. Raises PanelRefused for a malformed call or a
        reveal of a dispute this agent did not commit on."""
        phase = request.get("phase")
        task_id, check = request.get("task_id"), request.get("check")
        if not isinstance(task_id, str) or not isinstance(check, str):
            raise PanelRefused(400, "a panel call names its task_id and check")
        key = (task_id, check)
        if phase == "commit":
            with self._lock:
                if key not in self._votes:
                    verdict = self.evaluate(request)
                    if verdict not in ("team", "requester"):
                        raise PanelRefused(500, f"the evaluation gave {verdict!r}")
                    self._votes[key] = (verdict, secrets.token_hex(16))
                verdict, salt = self._votes[key]
            body = {
                "task_id": task_id,
                "check": check,
                "commitment": vote_commitment(verdict, salt),
            }
            return self.sign(PANEL_COMMITTED, task_id, body)
        if phase == "reveal":
            with self._lock:
                found = self._votes.get(key)
            if found is None:
                raise PanelRefused(409, f"this agent did not commit on {check} of {task_id}")
            verdict, salt = found
            body = {"task_id": task_id, "check": check, "verdict": verdict, "salt": salt}
            return self.sign(PANEL_REVEALED, task_id, body)
        raise PanelRefused(400, f"a panel call's phase is commit or reveal, not {phase!r}")


def attach_panel(agent: Any, evaluate: Evaluate | None = None) -> PanelSeat:
    """Have a started `KitAgent`'s server answer `/panel` (its own client signs the
    entries; by default it evaluates by doing the parts again with its runtime)."""
    if agent.server is None:
        raise RuntimeError("start the agent before attaching its panel seat")
    seat = PanelSeat(
        agent.client.entry, evaluate or boxed_check_evaluator(rerun_evaluator(agent.runtime))
    )
    agent.server.panel = seat.answer
    return seat
