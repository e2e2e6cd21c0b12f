"""checks: v(S) of a six-member team from the requester's checks, every coalition.

The delivery of a task of six parts (three arithmetic, three extraction), one part per
member, and the contract holder's plan and assembly: the Shapley game's players are the parts,
eight with the plan and the assembly, so 2^8 = 256 coalitions.
The rubric is the requester's 8 checks plus the contract holder's two (`accord.market.work.rubric`):

- 3 expect checks (within a tolerance, equals at a path, matches a pattern) and 1 schema check;
- 2 python checks, each run for real in the sandbox (`run_python_check`: a fresh limited
  interpreter per check), one reading three parts, one two;
- 2 judge checks through `Judge` on an `OpenAIChat` (the real openai client, temperature 0)
  against a local OpenAI-compatible stand-in server on 127.0.0.1 that answers `{"score": 9}`
  and counts the requests it is sent;
- the plan and assembly checks (pure).

One repetition, on a fresh `Valuation` (no memo carried over): `evaluate_all` (each check
once), then `Valuation.value` for all 256 coalitions, then exact Shapley values
(`accord.market.shapley.shapley`, which asks v for the same 256 coalitions, memoised), each
member's sum of its parts' values and the wei split. Each step is timed on its own; the goal
is on their sum. The model calls of a repetition are the stand-in server's count before and
after: each judge check reads one part set, so there are 2 distinct (check, part set) pairs
and there must be exactly 2 calls, however many coalitions are valued.

Run alone: `.venv/bin/python scripts/bench/bench_checks.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Mapping
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _common import Goal, Measure, Section, progress, run_alone

from accord.identity.challenges.sandbox import DEFAULT_WORLD
from accord.identity.chat import OpenAIChat
from accord.ledger.sealing import seal
from accord.market.check_io import Judge, run_python_check
from accord.market.checks import CheckResult, Delivered, Judged, evaluate_all, valuation
from accord.market.money import Wei
from accord.market.payouts import check_shares
from accord.market.shapley import shapley, split_wei
from accord.market.work import (
    ASSEMBLY_PART,
    PLAN_PART,
    Check,
    ExpectCheck,
    JudgeCheck,
    Part,
    PythonCheck,
    ReviewCheck,
    SchemaCheck,
    rubric,
)

GOAL_SECONDS = 2.0
MEMBERS = 6
LEADER = "did:key:zBenchLeader"
PRICE = Wei(5 * 10**17)

INVOICE = "INVOICE No. NW-20931\nIssued: 2026-10-14\nDue: 2026-11-13\nTotal: EUR 3,128.46\n"


FIGURES = ["1200.00", "845.50", "540.00"]


def _fields(*names: str) -> dict[str, Any]:
    return {"document": INVOICE, "fields": {n: {"type": "text", "description": n} for n in names}}


PARTS = (
    Part("lines-sum", "arithmetic", {"kind": "figures", "figures": FIGURES, "operation": "sum"}),
    Part("tax", "arithmetic", {"kind": "expression", "expression": "258550 * 21 / 10000"}),
    Part("total", "arithmetic", {"kind": "expression", "expression": "258550 + 54296"}),
    Part("invoice-fields", "extraction", _fields("invoice_number", "total", "currency")),
    Part("invoice-dates", "extraction", _fields("issue_date", "due_date")),
    Part("payee", "extraction", _fields("payee")),
)
OUTPUTS: dict[str, Any] = {
    "lines-sum": "2585.50",
    "tax": "108591/200",
    "total": "312846/100",
    "invoice-fields": {"invoice_number": "NW-20931", "total": "3128.46", "currency": "EUR"},
    "invoice-dates": {"issue_date": "2026-10-14", "due_date": "2026-11-13"},
    "payee": {"payee": "Northwind Ltd"},
}

TOTALS_AGREE = """
from fractions import Fraction


def check(outputs):
    lines = Fraction(outputs["lines-sum"])
    tax = Fraction(outputs["tax"])
    return abs(lines + tax - Fraction(outputs["total"])) <= Fraction(1, 100)
"""
DATES_ORDERED = """
def check(outputs):
    dates = outputs["invoice-dates"]
    return dates["issue_date"] < dates["due_date"] and outputs["payee"]["payee"] != ""
"""

REQUESTER_CHECKS: tuple[Check, ...] = (
    ExpectCheck("sum-right", 3, ("lines-sum",), "$", "within", "2585.5", "0.005"),
    ExpectCheck("total-right", 2, ("invoice-fields",), "$.total", "equals", "3128.46"),
    ExpectCheck("due-date", 1, ("invoice-dates",), "$.due_date", "matches", r"\d{4}-\d\d-\d\d"),
    SchemaCheck("payee-shape", 1, ("payee",), {"type": "object", "required": ["payee"]}),
    PythonCheck("totals-agree", 2, ("lines-sum", "tax", "total"), TOTALS_AGREE),
    PythonCheck("dates-ordered", 1, ("invoice-dates", "payee"), DATES_ORDERED),
    JudgeCheck("fields-plausible", 2, ("invoice-fields",), "The fields are plausible."),
    JudgeCheck("dates-plausible", 1, ("invoice-dates", "payee"), "The dates fit the payee."),
)


class StandIn:
    """`POST /v1/chat/completions` on 127.0.0.1, always `{"score": 9}`; counts requests."""

    def __init__(self) -> None:
        self.calls = 0
        lock = threading.Lock()
        server = self
        reply = json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 1_770_000_000,
                "model": "bench-judge",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": '{"score": 9}'},
                        "finish_reason": "stop",
                    }
                ],
            }
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    server.calls += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class BenchEnvironment:
    """The sandbox and the judge, as `settle_task` runs them; no review checks here."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def run_python(self, check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
        return run_python_check(check, outputs, DEFAULT_WORLD)

    def ask_judge(self, check: JudgeCheck, prompt: str) -> Judged:
        answer, model = self.judge.ask(prompt, check.model)
        return Judged(answer, model, seal({"prompt": prompt, "answer": answer}).commitment)

    def unopened(self, check: Check) -> CheckResult:
        raise AssertionError("the bench holds every output")

    def review(self, check: ReviewCheck) -> CheckResult:
        raise AssertionError("the bench has no review checks")


def delivery() -> Delivered:
    members = [f"did:key:zBenchMember{k}" for k in range(MEMBERS)]
    producers = {part.part_id: member for part, member in zip(PARTS, members, strict=True)}
    outputs = dict(OUTPUTS)
    commitments = {part: seal(output).commitment for part, output in OUTPUTS.items()}
    outputs[PLAN_PART] = {"assignments": dict(producers)}
    outputs[ASSEMBLY_PART] = [
        {
            "part": p.part_id,
            "producer": producers[p.part_id],
            "output_sha256": commitments[p.part_id],
        }
        for p in PARTS
    ]
    producers[PLAN_PART] = producers[ASSEMBLY_PART] = LEADER
    return Delivered(PARTS, outputs, producers, commitments)


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    section = Section(
        key="checks",
        title=f"checks: v(S) of a {MEMBERS}-member team from 10 checks, all {2 ** (MEMBERS + 2)} "
        "coalitions of its parts",
        method=__doc__ or "",
    )
    checks = rubric(PARTS, REQUESTER_CHECKS)
    shares = check_shares(checks)
    delivered = delivery()
    players = sorted(delivered.producers)  # the parts, with the plan and the assembly
    coalitions = [
        frozenset(c)
        for size in range(len(players) + 1)
        for c in itertools.combinations(players, size)
    ]
    evaluate = Measure("evaluate the 10 checks once (2 python in the sandbox, 2 judge)", "ms")
    values = Measure(f"v(S) for all {len(coalitions)} coalitions", "ms")
    shapley_ms = Measure(f"exact Shapley values of {len(players)} players and the wei split", "ms")
    total = Measure("all of it: checks, every v(S), Shapley and wei", "ms")
    calls = Measure("model calls per repetition", "calls")
    section.measures += [evaluate, values, shapley_ms, total, calls]
    failures: list[str] = []
    server = StandIn()
    try:
        judge = Judge(OpenAIChat("bench-judge", base_url=server.url, api_key="bench-key"))
        env = BenchEnvironment(judge)
        evaluate_all(checks, delivered, env)  # warm-up: imports, the client's connection pool
        for rep in range(reps):
            before = server.calls
            t0 = time.perf_counter()
            results = evaluate_all(checks, delivered, env)
            t1 = time.perf_counter()
            value = valuation(checks, shares, results, delivered)
            table = {coalition: value.value(coalition) for coalition in coalitions}
            t2 = time.perf_counter()
            outcome = shapley(players, value.value)
            payouts = split_wei(PRICE, value.by_producer(outcome.values))
            t3 = time.perf_counter()
            made = server.calls - before
            evaluate.samples.append((t1 - t0) * 1_000)
            values.samples.append((t2 - t1) * 1_000)
            shapley_ms.samples.append((t3 - t2) * 1_000)
            total.samples.append((t3 - t0) * 1_000)
            calls.samples.append(made)
            failed = sorted(c for c, r in results.items() if not r.passed)
            if failed:
                failures.append(f"checks failed on the honest delivery: {failed}")
            if table[frozenset(players)] != 1 or sum(payouts.values()) != PRICE:
                failures.append("v(N) is not 1 or the payouts do not sum to the price")
            if made != 2:
                failures.append(f"{made} model calls in repetition {rep + 1}, not 2")
            progress(f"checks: rep {rep + 1}/{reps}: {(t3 - t0) * 1_000:.0f} ms, {made} calls")
    finally:
        server.close()

    section.goals += [
        Goal(
            f"evaluate the checks and v(S) of all {len(coalitions)} coalitions (median)",
            GOAL_SECONDS,
            total.median / 1_000,
            "s",
            higher_is_better=False,
        ),
        Goal(
            "model calls per settlement (2 distinct (check, part set) pairs)",
            2,
            max(calls.samples) if calls.samples else float("nan"),
            "calls",
            higher_is_better=False,
        ),
    ]
    per_coalition = sum(
        sum(1 for s in coalitions if all(p in s for p in check.reads))
        for check in checks
        if isinstance(check, JudgeCheck)
    )
    section.notes += [
        f"Judged per coalition instead of once, the two judge checks would be asked "
        f"{per_coalition} times (once for each coalition that made every part a check reads); "
        "the python checks likewise, each a fresh interpreter.",
        f"Shares: plan and assembly {shares['_plan-covers-every-part']} each; the 8 requester "
        f"checks share {Fraction(4, 5)} by weight.",
    ]
    if failures:
        section.error = failures[0]
    section.seconds = time.perf_counter() - started
    return section


def main() -> None:
    run_alone(run, "v(S) from checks: a six-member team, every coalition.")


if __name__ == "__main__":
    main()
