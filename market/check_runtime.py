"""The I/O behind a task's checks: the sandbox, the judge model, and the requester's reviews.

    run_python_check  runs the requester's `def check(outputs)` in the box
                      (`identity.challenges.sandbox`) with the check's CPU and memory limits
    OpenAIJudge     asks an OpenAI-compatible model at temperature 0, through the `openai`
                    client, retrying; when it cannot be reached the settlement waits
    LogReviews      the requester's signed `review.given` verdicts; a check nobody reviewed is
                    accepted once the review window has ended, and waits until then; a
                    rejection is a dispute, which `SettleEnvironment` asks the judge to decide

Configuration (read by `judge_from_env`): ACCORD_JUDGE_URL (an OpenAI-compatible base URL),
ACCORD_JUDGE_MODEL, and ACCORD_JUDGE_KEY or OPENAI_API_KEY (optional: local servers need none).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from identity.challenges.sandbox import SandboxLimits, run_function_cases
from identity.errors import ExamError
from ledger.sealing import Sealed, seal
from market.checks import CheckResult, Judged, decide_dispute, dispute_prompt, is_disputed
from market.errors import SettlementError, SettlementWaits
from market.tasks import REVIEW_GIVEN, Task, TaskEvent
from market.work import Check, JudgeCheck, PythonCheck, ReviewCheck

if TYPE_CHECKING:
    import openai

MiB = 1 << 20
JUDGE_ATTEMPTS = 3
JUDGE_TIMEOUT_S = 60.0


def _shown(value: Any) -> str:
    """What a check's return value is, never what it says: False, None, or its JSON type."""
    if value is False or value is None:
        return repr(value)
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "an object")


def run_python_check(check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
    """The requester's test code on `outputs`, in the box: passes when `check(outputs)`
    returns True.

    The detail is a bounded verdict (which limit, which built-in exception class, which JSON
    type came back), never a value the code chose, so the signed settlement cannot carry what
    the code read; the record names the mode the code ran in (`{"sandbox": "bwrap"}`).
    Raises SandboxUnavailable when the box cannot be made (nothing ran), ExamError when the
    unboxed interpreter cannot start.
    """
    limits = SandboxLimits(
        cpu_seconds=check.cpu_seconds,
        wall_seconds=float(check.cpu_seconds * 2 + 3),
        memory_bytes=check.memory_mib * MiB,
    )
    run = run_function_cases(check.code, "check", [[dict(outputs)]], limits)
    record = {"sandbox": run.mode}
    if run.failure is not None:
        return CheckResult(check.check_id, False, f"the test code failed: {run.failure}", record)
    result = run.results[0]
    if result.error is not None:
        return CheckResult(check.check_id, False, f"check(outputs) {result.error}", record)
    if result.value is True:
        return CheckResult(check.check_id, True, "check(outputs) returned True", record)
    detail = f"check(outputs) returned {_shown(result.value)}, not True"
    return CheckResult(check.check_id, False, detail, record)


class OpenAIJudge:
    """A judge model behind an OpenAI-compatible endpoint. `calls` counts the requests made."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        attempts: int = JUDGE_ATTEMPTS,
        timeout_s: float = JUDGE_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.attempts = attempts
        import openai  # here, not at import: the client takes a second to load, and every
        # command that opens the market imports this module

        # Local servers take no key; the client insists on one, so it gets a placeholder.
        self.client: openai.OpenAI = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0
        )
        self.calls = 0

    def ask(self, prompt: str, model: str | None = None) -> tuple[str, str]:
        """The model's answer at temperature 0 and the model's name.

        Raises SettlementWaits when every attempt fails to reach the model or is refused.
        """
        import openai

        name = model or self.model
        last = "no attempt"
        for _ in range(self.attempts):
            self.calls += 1
            try:
                reply = self.client.chat.completions.create(
                    model=name,
                    temperature=0,
                    messages=[{"role": "user", "content": prompt}],
                )
            except openai.OpenAIError as exc:
                last = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            content = reply.choices[0].message.content if reply.choices else None
            return (content or ""), name
        raise SettlementWaits(
            f"the judge model {name} at {self.base_url} could not be reached ({last}); "
            "nobody is paid on a guess: settle again when it answers"
        )


def judge_from_env(environ: Mapping[str, str] | None = None) -> OpenAIJudge | None:
    """The judge configured by ACCORD_JUDGE_URL and ACCORD_JUDGE_MODEL, or None."""
    env = os.environ if environ is None else environ
    url = env.get("ACCORD_JUDGE_URL")
    if not url:
        return None
    key = env.get("ACCORD_JUDGE_KEY") or env.get("OPENAI_API_KEY")
    return OpenAIJudge(url, env.get("ACCORD_JUDGE_MODEL", "judge"), key)


@dataclass(frozen=True)
class LogReviews:
    """Reviews as the task's signed events hold them, decided at `now`.

    The first `review.given` by the requester for a check, at or before the window's end,
    counts; with none, the check is accepted once `now` is past the window's end.
    """

    task: Task
    events: Sequence[tuple[int, TaskEvent]]
    now: datetime

    def review(self, check: ReviewCheck) -> CheckResult:
        """Raises SettlementWaits while the window is open and the check is not reviewed."""
        ends = self.task.review_ends
        if ends is None:
            raise SettlementWaits(f"{self.task.task_id} is not delivered: nothing to review")
        for index, event in self.events:
            if (
                event.kind == REVIEW_GIVEN
                and event.actor == self.task.requester
                and event.body.get("check") == check.check_id
                and event.at <= ends
            ):
                verdict = event.body.get("verdict")
                record: dict[str, Any] = {"entry": index, "verdict": verdict}
                if verdict != "accept":
                    record |= {
                        "reason": str(event.body.get("reason", "")),
                        "fee": str(event.body.get("fee", "0")),
                    }
                return CheckResult(
                    check.check_id,
                    verdict == "accept",
                    f"the requester {'accepted' if verdict == 'accept' else 'rejected'} it",
                    record,
                )
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


class SettleEnvironment:
    """What `settle_task` runs checks with: the sandbox, the judge (if any), the reviews; each
    exchange with the judge is sealed (`ledger.sealing`) and handed to `keep` (the service's
    blob store), so the signed record names it without showing the outputs in its prompt."""

    def __init__(
        self,
        reviews: LogReviews,
        judge: OpenAIJudge | None,
        keep: Callable[[Sealed], None] | None = None,
    ) -> None:
        self.reviews = reviews
        self.judge = judge
        self.keep = keep

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
        try:
            return run_python_check(check, outputs)
        except ExamError as exc:
            raise SettlementWaits(
                f"python check {check.check_id} cannot run, so the settlement waits "
                f"(nothing ran, nobody is paid): {exc}"
            ) from exc

    def ask_judge(self, check: JudgeCheck, prompt: str) -> Judged:
        if self.judge is None:
            raise SettlementWaits(
                f"check {check.check_id} needs a judge model: set ACCORD_JUDGE_URL and "
                "ACCORD_JUDGE_MODEL (any OpenAI-compatible server), then settle again"
            )
        return self._judged(prompt, check.model)

    def review(self, check: ReviewCheck, outputs: Mapping[str, Any]) -> CheckResult:
        """A rejection is a dispute: the judge decides it with the review's criterion.

        Raises SettlementWaits while the window is open and nobody reviewed, or while a
        dispute has no judge to decide it (the requester does not win by default).
        """
        result = self.reviews.review(check)
        if not is_disputed(result):
            return result
        if self.judge is None:
            raise SettlementWaits(
                f"the requester rejected review check {check.check_id}, which opens a dispute "
                "an independent evaluator decides: set ACCORD_JUDGE_URL and ACCORD_JUDGE_MODEL "
                "(any OpenAI-compatible server), then settle again"
            )
        prompt = dispute_prompt(check, outputs, str((result.record or {}).get("reason", "")))
        return decide_dispute(check, result, self._judged(prompt))
