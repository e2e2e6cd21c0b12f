"""The I/O behind a task's checks: the sandbox, the judge model, and the requester's reviews.

    run_python_check  runs the requester's `def check(outputs)` in the box
                      (`accord.identity.challenges.sandbox`) with the check's CPU and memory
                      limits, in a fixed world (`check_world`: the clock at the task's
                      posting, entropy from a seed of the task and check), twice; what it
                      cannot decide from the outputs is inconclusive and counts for the team
    Judge             asks a chat model (`accord.identity.chat`) at temperature 0, in JSON mode;
                      when it cannot be asked the settlement waits
    LogReviews        the requester's signed `review.given` verdicts; a check nobody reviewed
                      is accepted once the review window has ended, and waits until then; a
                      rejection is a dispute, which `ServiceCheckEnvironment` asks the judge
                      to decide

Configuration (read by `judge_from_env`): ACCORD_JUDGE_URL (an OpenAI-compatible base URL),
ACCORD_JUDGE_MODEL, and ACCORD_JUDGE_KEY or OPENAI_API_KEY (optional: local servers need none);
the judge is tried `JUDGE_ATTEMPTS` times, each within `JUDGE_TIMEOUT_S` seconds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accord.identity.address_guard import check_url
from accord.identity.challenges.sandbox import Frozen, SandboxLimits, run_function_cases
from accord.identity.chat import ChatError, ChatModel, ChatReplyError, OpenAIChat
from accord.identity.errors import ExamError
from accord.ledger.sealing import Sealed, seal
from accord.market.checks import CheckResult, Judged, decide_dispute, dispute_prompt, is_disputed
from accord.market.errors import SettlementError, SettlementWaits
from accord.market.tasks import REVIEW_GIVEN, Task, TaskEvent
from accord.market.work import Check, JudgeCheck, PythonCheck, ReviewCheck

MiB = 1 << 20
JUDGE_ATTEMPTS = 3
JUDGE_TIMEOUT_S = 60.0


def _shown(value: Any) -> str:
    """What a check's return value is, never what it says: False, None, or its JSON type."""
    if value is False or value is None:
        return repr(value)
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "an object")


CHECK_RUNS = 2
"""A python check is called this many times on the same outputs, in one box: calls that
disagree make it inconclusive."""
WALL_BACKSTOP_S = 5.0
"""Seconds of wall clock a box may take beyond its CPU limit before the host ends it."""
CHECK_WORLD_VERSION = "accord-check-world/1"


def check_world(task_id: str, posted_at: datetime, check_id: str) -> Frozen:
    """Pure: the world a task's python check runs in, at settlement, before delivery and in
    every audit: the clock stands at the task's posting (whole seconds), and its entropy comes
    from a seed fixed by the task and the check."""
    seed = hashlib.sha256(f"{CHECK_WORLD_VERSION}|{task_id}|{check_id}".encode()).hexdigest()
    return Frozen(at=int(posted_at.timestamp()), seed=seed)


def python_check_limits(check: PythonCheck) -> SandboxLimits:
    """Pure: the box's limits for one python check: CPU for every call and the interpreter's
    start, and a wall clock only as a backstop for code that waits without computing."""
    cpu = check.cpu_seconds * CHECK_RUNS + 1
    return SandboxLimits(
        cpu_seconds=cpu,
        wall_seconds=float(cpu * 2) + WALL_BACKSTOP_S,
        memory_bytes=check.memory_mib * MiB,
    )


def inconclusive(check_id: str, why: str, record: Mapping[str, Any]) -> CheckResult:
    """A verdict that is not a function of the outputs: counted for the team (the requester's
    code, not the team's work, is what could not decide), and named as such."""
    detail = f"inconclusive: {why}; counted as passed (a check must decide from its outputs)"
    return CheckResult(check_id, True, detail, dict(record), inconclusive=True)


def run_python_check(check: PythonCheck, outputs: Mapping[str, Any], world: Frozen) -> CheckResult:
    """The requester's test code on `outputs`, in the box and in `world` (`check_world`):
    passes when `check(outputs)` returns True.

    The check is called `CHECK_RUNS` times on the same outputs. Its verdict is inconclusive
    (`CheckResult.inconclusive`, counted as passed) when it is not a function of its outputs:
    the calls disagree, a call drew entropy, a call ran past the check's CPU limit, or the run
    hit the wall-clock backstop. Memory, syntax, exceptions and other returns fail it: they
    are the same on every machine, so the team can know them before it delivers.

    The detail is a bounded verdict (which limit, which built-in exception class, which JSON
    type came back), never a value the code chose, so the signed settlement cannot carry what
    the code read; the record names the mode the code ran in (`{"sandbox": "bwrap"}`).
    Raises SandboxUnavailable when the box cannot be made (nothing ran), ExamError when the
    unboxed interpreter cannot start.
    """
    limits = python_check_limits(check)
    cases = [[dict(outputs)]] * CHECK_RUNS
    run = run_function_cases(check.code, "check", cases, limits, world=world)
    record = {"sandbox": run.mode}
    if run.failure is not None:
        if run.failure.startswith(("CPU time limit", "wall-clock limit")):
            return inconclusive(
                check.check_id, f"the test code ran out of time ({run.failure})", record
            )
        return CheckResult(check.check_id, False, f"the test code failed: {run.failure}", record)
    first = run.results[0]
    if any(r.cpu_seconds > check.cpu_seconds for r in run.results):
        spent = max(r.cpu_seconds for r in run.results)
        why = f"check(outputs) took {spent:.2f} s of CPU, over its limit of {check.cpu_seconds} s"
        return inconclusive(check.check_id, why, record)
    if any(r.entropy for r in run.results):
        return inconclusive(check.check_id, "check(outputs) drew entropy it did not seed", record)
    if any((r.value, r.error) != (first.value, first.error) for r in run.results[1:]):
        why = f"check(outputs) gave different verdicts in {CHECK_RUNS} calls on the same outputs"
        return inconclusive(check.check_id, why, record)
    if first.error is not None:
        return CheckResult(check.check_id, False, f"check(outputs) {first.error}", record)
    if first.value is True:
        return CheckResult(check.check_id, True, "check(outputs) returned True", record)
    detail = f"check(outputs) returned {_shown(first.value)}, not True"
    return CheckResult(check.check_id, False, detail, record)


class Judge:
    """A judge model: a chat model asked at temperature 0, in JSON mode (its prompts ask for
    one JSON object, `accord.market.checks`)."""

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat

    def ask(self, prompt: str, model: str | None = None) -> tuple[str, str]:
        """The model's answer and the model's name (`model`, else the chat model's own). A
        reply that cannot be used (none, cut off, a refusal) is the answer "", which gives no
        verdict.

        Raises SettlementWaits when the model cannot be asked (its retries spent, or refused).
        """
        name = model or self.chat.model
        try:
            reply = self.chat.complete(
                [{"role": "user", "content": prompt}], json_mode=True, temperature=0, model=name
            )
        except ChatReplyError:
            return "", name
        except ChatError as exc:
            raise SettlementWaits(
                f"the judge model {name} could not be asked ({exc.reason}); "
                "nobody is paid on a guess: settle again when it answers"
            ) from exc
        return reply.content, name


def judge_from_env(environ: Mapping[str, str] | None = None) -> Judge | None:
    """The judge configured by ACCORD_JUDGE_URL and ACCORD_JUDGE_MODEL (default "judge"), or
    None when ACCORD_JUDGE_URL is not set.

    Raises RegistryError for an ACCORD_JUDGE_URL that is not an http(s) URL with a host.
    """
    env = os.environ if environ is None else environ
    url = env.get("ACCORD_JUDGE_URL")
    if not url:
        return None
    check_url(url, "ACCORD_JUDGE_URL")
    chat = OpenAIChat(
        env.get("ACCORD_JUDGE_MODEL") or "judge",
        base_url=url,
        api_key=env.get("ACCORD_JUDGE_KEY") or env.get("OPENAI_API_KEY"),
        timeout=JUDGE_TIMEOUT_S,
        retries=JUDGE_ATTEMPTS - 1,
    )
    return Judge(chat)


@dataclass(frozen=True)
class LogReviews:
    """Reviews as the task's signed events hold them, decided at `now`.

    The first `review.given` by the requester for a check, at or before the window's end,
    counts; with none, the check is accepted once `now` is past the window's end.
    """

    task: Task
    events: Sequence[tuple[int, TaskEvent]]
    now: datetime

    def _given(self, check_id: str) -> CheckResult | None:
        """The requester's first review of `check_id` within the window, as a result."""
        ends = self.task.review_ends
        if ends is None:
            return None
        for index, event in self.events:
            if (
                event.kind == REVIEW_GIVEN
                and event.actor == self.task.requester
                and event.body.get("check") == check_id
                and event.at <= ends
            ):
                verdict = event.body.get("verdict")
                record: dict[str, Any] = {"entry": index, "verdict": verdict}
                if verdict != "accept":
                    record |= {
                        "reason": str(event.body.get("reason", "")),
                        "fee": str(event.body.get("fee", "0")),
                    }
                    if "after_block" in event.body:  # a rejection a panel decides
                        record["after_block"] = event.body["after_block"]
                return CheckResult(
                    check_id,
                    verdict == "accept",
                    f"the requester {'accepted' if verdict == 'accept' else 'rejected'} it",
                    record,
                )
        return None

    def window_open(self) -> bool:
        """Whether the review window is still open at `now`."""
        ends = self.task.review_ends
        return ends is not None and self.now < ends

    def contest(self, check: PythonCheck) -> CheckResult | None:
        """The requester's contest of python check `check` (its rejection of it, logged in
        the window: the service takes one only of a check it found inconclusive then), or
        None."""
        given = self._given(check.check_id)
        return given if given is not None and is_disputed(given) else None

    def review(self, check: ReviewCheck) -> CheckResult:
        """Raises SettlementWaits while the window is open and the check is not reviewed."""
        ends = self.task.review_ends
        if ends is None:
            raise SettlementWaits(f"{self.task.task_id} is not delivered: nothing to review")
        given = self._given(check.check_id)
        if given is not None:
            return given
        if self.now >= ends:
            return CheckResult(
                check.check_id,
                True,
                "no review by the end of the window: accepted",
                {"entry": None, "window_ended": ends.isoformat()},
            )
        raise SettlementWaits(
            f"check {check.check_id} waits for the requester's review until {ends.isoformat()} "
            f"(`accord task review {self.task.task_id} --check {check.check_id} --accept`)"
        )


ContestPanel = Callable[[PythonCheck, Mapping[str, Any], CheckResult, CheckResult], CheckResult]
"""Decides a contested inconclusive python check: (check, outputs, its inconclusive result, the
requester's rejection) -> the check's result as the panel decides it."""


class ServiceCheckEnvironment:
    """The service's `CheckEnvironment` (the audit's is `RecheckEnvironment`), what `settle_task`
    runs checks with: the sandbox, the judge (if any), the reviews; each exchange with the judge
    is sealed (`accord.ledger.sealing`) and handed to `keep` (the service's blob store), so the
    signed record names it without showing the outputs in its prompt."""

    def __init__(
        self,
        reviews: LogReviews,
        judge: Judge | None,
        keep: Callable[[Sealed], None] | None = None,
        panel: Callable[[ReviewCheck, Mapping[str, Any], CheckResult], CheckResult] | None = None,
    ) -> None:
        self.reviews = reviews
        self.judge = judge
        self.keep = keep
        self.panel = panel
        """Decides a dispute by the panel of independent agents (`accord.market.disputes`)."""
        self.contest: ContestPanel | None = None
        """Decides a contested inconclusive python check by its panel
        (`accord.market.disputes.decide_contest`)."""
        self.inconclusive: dict[str, str] = {}
        """The python checks found inconclusive while the review window was open (check id
        -> detail)."""

    def ask_model(self, prompt: str) -> Judged:
        """The judge model's answer to `prompt` (a dispute's panel seat), its exchange sealed
        and kept. Raises SettlementWaits when the model cannot be reached."""
        return self._judged(prompt)

    def _judged(self, prompt: str, model: str | None = None) -> Judged:
        assert self.judge is not None
        answer, name = self.judge.ask(prompt, model)
        exchange = seal({"prompt": prompt, "answer": answer})
        if self.keep is not None:
            self.keep(exchange)
        return Judged(answer, name, exchange.commitment)

    def unopened(self, check: Check) -> CheckResult:
        raise SettlementError(
            f"check {check.check_id} reads an output this service does not hold: nobody is "
            "paid on work that cannot be checked"
        )

    def run_python(self, check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
        """The check in the box. An inconclusive verdict the requester contested within the
        review window goes to the contest's panel (`contest`, after the window) once the
        window has ended; one found while the window is open is counted in `inconclusive`
        (the settlement waits for the window when the requester was told of it in time)."""
        try:
            task = self.reviews.task
            world = check_world(task.task_id, task.posted_at, check.check_id)
            result = run_python_check(check, outputs, world)
        except ExamError as exc:
            raise SettlementWaits(
                f"python check {check.check_id} cannot run, so the settlement waits "
                f"(nothing ran, nobody is paid): {exc}"
            ) from exc
        if not result.inconclusive:
            return result
        if self.reviews.window_open():
            self.inconclusive[check.check_id] = result.detail
            return result
        contested = self.reviews.contest(check)
        if contested is None or self.contest is None:
            return result
        return self.contest(check, outputs, result, contested)

    def ask_judge(self, check: JudgeCheck, prompt: str) -> Judged:
        if self.judge is None:
            raise SettlementWaits(
                f"check {check.check_id} needs a judge model: set ACCORD_JUDGE_URL and "
                "ACCORD_JUDGE_MODEL (any OpenAI-compatible server), then settle again"
            )
        return self._judged(prompt, check.model)

    def review(self, check: ReviewCheck, outputs: Mapping[str, Any]) -> CheckResult:
        """A rejection is a dispute: its panel decides it (`panel`), else the judge, with
        the review's criterion.

        Raises SettlementWaits while the window is open and nobody reviewed, or while a
        dispute has no panel or judge to decide it (the requester does not win by default).
        """
        result = self.reviews.review(check)
        if not is_disputed(result):
            return result
        if self.panel is not None:
            return self.panel(check, outputs, result)
        if self.judge is None:
            raise SettlementWaits(
                f"the requester rejected review check {check.check_id}, which opens a dispute "
                "an independent evaluator decides: set ACCORD_JUDGE_URL and ACCORD_JUDGE_MODEL "
                "(any OpenAI-compatible server), then settle again"
            )
        prompt = dispute_prompt(check, outputs, str((result.record or {}).get("reason", "")))
        return decide_dispute(check, result, self._judged(prompt))
