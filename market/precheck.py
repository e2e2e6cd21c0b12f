"""The team's own verdicts before it delivers: the requester's machine checks, run by the leader
on the outputs it holds, in the same world the settlement and the audit run them in.

A check's verdict is a function of the outputs it reads (`accord.market.check_io`: python checks
in a fixed world, run twice, inconclusive when they cannot decide), so what the leader gets
here is what the settlement will log for the same outputs. The machine kinds are `expect`,
`schema` and `python`; a `judge` or `review` check is the requester's or a model's to decide
and is not run before delivery.

    Precheck.failing(part, output)  the first machine check reading only `part` that fails on
                                    `output` (the leader gives the part to someone else, or
                                    gives it up), or None
    Precheck.verdicts(outputs)      every machine check whose parts are all in `outputs`

Raises nothing of its own: a box that cannot be made here (SandboxUnavailable) leaves the part
unjudged (None, and no verdict), since the leader's box is not the settlement's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accord.identity.errors import ExamError
from accord.market.check_io import check_world, run_python_check
from accord.market.checks import CheckResult, expect, schema
from accord.market.work import Check, ExpectCheck, PythonCheck, SchemaCheck

MACHINE_KINDS = ("expect", "schema", "python")


@dataclass(frozen=True)
class Precheck:
    """The requester's machine checks of one task, as its leader runs them."""

    task_id: str
    posted_at: datetime
    checks: Sequence[Check]

    def _python(self, check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
        world = check_world(self.task_id, self.posted_at, check.check_id)
        return run_python_check(check, outputs, world)

    def verdict(self, check: Check, outputs: Mapping[str, Any]) -> CheckResult | None:
        """`check` on `outputs` (which must hold every part it reads), as the settlement
        would give it; None for a kind that is not a machine's, or where the box cannot be
        made here."""
        match check:
            case ExpectCheck():
                return expect(check, outputs[check.reads[0]])
            case SchemaCheck():
                return schema(check, outputs[check.reads[0]])
            case PythonCheck():
                try:
                    return self._python(check, {p: outputs[p] for p in check.reads})
                except ExamError:  # SandboxUnavailable among them: no verdict, not a failure
                    return None
        return None

    def failing(self, part_id: str, output: Any) -> CheckResult | None:
        """The first machine check that reads `part_id` alone and fails on `output`."""
        for check in self.checks:
            if check.kind in MACHINE_KINDS and tuple(check.reads) == (part_id,):
                result = self.verdict(check, {part_id: output})
                if result is not None and not result.passed:
                    return result
        return None

    def verdicts(self, outputs: Mapping[str, Any]) -> dict[str, CheckResult]:
        """Every machine check whose parts are all in `outputs`, by check id."""
        results: dict[str, CheckResult] = {}
        for check in self.checks:
            if check.kind in MACHINE_KINDS and all(p in outputs for p in check.reads):
                result = self.verdict(check, outputs)
                if result is not None:
                    results[check.check_id] = result
        return results
