"""Settlement: pay the team of a delivered task by Shapley value, on chain, exactly once.

    1. run the task's checks on the delivered parts once each (`accord.market.checks`): v(S) for
       every set S of parts is the share of the passed checks that read only parts in S
    2. Shapley values over the delivered parts, the plan and the assembly among them (exact up
       to 16; sampled with a logged seed beyond); each producer's value is the sum of its
       parts' values, so holding parts under one identity or several pays the same
    3. the amount paid, the auction price times the share of the requester's check weight that
       passed (`accord.market.payouts.paid_share`, rounded down to the wei), less the fees of the
       disputes the team lost, split by producer value into integer wei by largest remainder:
       the parts sum exactly to the amount; nothing passed, nothing paid. The fees of every
       decided dispute (the team's, and the requester's from its refund) go to the evaluator
    4. `settlement.computed` logged with every v(S) used, the seed, payouts and payout addresses,
       then the log is anchored
    5. `TaskEscrow.settle(payees, amounts)` (journalled; the rest of the deposit is credited to
       the requester; a payout whose payee has bound no payout account is paid to the escrow's
       own address, which holds it under the task, and `release_held` credits it to the
       account its owner binds later), then `task.settled` with each contributor's delivered
       quality and the track record (each part's producer and score,
       `accord.market.reputation`), the credentials that record makes due are revoked
       (`Market.revoke_failing`), and the log is anchored again so that `accord audit` finds
       the whole settlement anchored

Every step first looks at what is already done (a logged computation is reused, never
recomputed with another seed; an escrow paid out is not paid again), so a crash anywhere and a
second run pay each payee once. `recompute_settlement` is the pure part the audit replays.

Several processes (or machines) may settle one task at once: the log takes one
`settlement.computed` and one `task.settled` per task (the store refuses a second with
AlreadyLoggedError), and the escrow one payout. Losing a race is not an error: the loser pays
what the winner logged, waits for the winner's payment when it is under way, and returns the
logged outcome.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from accord.identity.onboarding import Onboarding
from accord.ledger.errors import AlreadyLoggedError, ChainError, SealError
from accord.ledger.events import Entry
from accord.ledger.sealing import is_commitment, open_sealed
from accord.market.check_io import Judge, LogReviews, ServiceCheckEnvironment, judge_from_env
from accord.market.checks import (
    SEALED,
    CheckEnvironment,
    CheckResult,
    Delivered,
    Valuation,
    dispute_costs,
    evaluate,
    evaluate_all,
    valuation,
)
from accord.market.disputes import JudgeSeat, decide_by_panel, decide_contest
from accord.market.early import accepted_in_full
from accord.market.errors import EscrowError, SettlementError, SettlementWaits
from accord.market.escrow.port import EscrowReceipt
from accord.market.money import Wei
from accord.market.panel import JUDGE_SEAT, PanelError, decided_disputes, settle_disputes
from accord.market.panel_calls import panelist_caller
from accord.market.payouts import CONTRACTOR_SHARE, amount_paid, check_shares, paid_share
from accord.market.reputation import SettledWork, scored_parts
from accord.market.service import MAX_TASK_EVENTS, Market, task_event
from accord.market.shapley import ShapleyResult, shapley, split_wei
from accord.market.tasks import (
    CHECKS_PREVIEWED,
    REVIEW_GIVEN,
    TASK_DELIVERED,
    TASK_SETTLED,
    Task,
    TaskEvent,
)
from accord.market.tasks import SETTLEMENT_COMPUTED as SETTLEMENT_COMPUTED  # logged here
from accord.market.tasks import SETTLEMENT_RELEASED as SETTLEMENT_RELEASED  # logged here
from accord.market.work import (
    ASSEMBLY_PART,
    PLAN_PART,
    PythonCheck,
    ReviewCheck,
    file_refs,
    part_refs,
    resolve_files,
    resolve_parts,
)

#: How long a settle that lost the race waits for the winner's payment to be mined.
SETTLE_RACE_WAIT_S = 30.0
_RACE_POLL_S = 0.2


@dataclass(frozen=True)
class Settlement:
    """What a settlement decided, as logged."""

    task_id: str
    players: tuple[str, ...]
    """The Shapley game's players: the delivered parts, `_plan` and `_assembly` among them."""
    method: str
    seed: int
    part_values: Mapping[str, Fraction]
    """Each part's Shapley value."""
    producers: Mapping[str, str]
    """Each part's producer (DID)."""
    values: Mapping[str, Fraction]
    """Each producer's value: the sum of its parts' values (what its pay is in proportion to)."""
    evaluated: Mapping[frozenset[str], Fraction]
    total_value: Fraction
    paid_share: Fraction
    """The share of the price paid: the requester's check weight that passed."""
    amount: Wei
    """What the team is paid: the price times `paid_share`, less the disputes it lost."""
    evaluator_fee: Wei
    """The decided disputes' fees paid to the operator's judge model: a judge-only dispute's
    (a settlement from before panels), and the judge's seat's pay on a panel."""
    payouts: Mapping[str, Wei]
    quality: Mapping[str, Fraction]
    checks: Mapping[str, CheckResult]
    shares: Mapping[str, Fraction]
    panel_payouts: Mapping[str, Wei] = field(default_factory=dict)
    """Each coherent panelist's pay (DID), from the losing side's stake
    (`accord.market.panel.settle_disputes`); the judge's seat's is in `evaluator_fee`."""
    answers_taken: Mapping[str, Wei] = field(default_factory=dict)
    """Of each answering account's answers (by address), what paid the panel of a dispute
    the team answered and lost; the rest of every answer goes back to its account."""

    def to_json(self, payees: Mapping[str, str]) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "players": list(self.players),
            "method": self.method,
            "seed": self.seed,
            "checks": [
                {**result.to_json(), "share": _text(self.shares[check_id])}
                for check_id, result in self.checks.items()
            ],
            "contractor_share": _text(CONTRACTOR_SHARE),
            "producers": dict(self.producers),
            "part_values": {p: _text(v) for p, v in self.part_values.items()},
            "values": {p: _text(v) for p, v in self.values.items()},
            "evaluated": [
                {"coalition": sorted(coalition), "value": _text(value)}
                for coalition, value in sorted(
                    self.evaluated.items(), key=lambda kv: (len(kv[0]), sorted(kv[0]))
                )
            ],
            "total_value": _text(self.total_value),
            "paid_share": _text(self.paid_share),
            "amount": str(self.amount),
            "evaluator_fee": str(self.evaluator_fee),
            "payouts": {p: str(w) for p, w in self.payouts.items()},
            **(
                {"panel_payouts": {p: str(w) for p, w in self.panel_payouts.items()}}
                if self.panel_payouts
                else {}
            ),
            **(
                {"answers_taken": {a: str(w) for a, w in self.answers_taken.items()}}
                if self.answers_taken
                else {}
            ),
            "payees": dict(payees),
            "quality": {p: _text(q) for p, q in self.quality.items()},
        }


def _text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def settlement_seed(task_id: str) -> int:
    """The sampling seed of a task's settlement (48 bits, so JSON carries it exactly)."""
    return int.from_bytes(hashlib.sha256(f"accord-shapley|{task_id}".encode()).digest()[:6])


def opener(read: Callable[[str], bytes | None], *, required: bool) -> Callable[[str], Any]:
    """The value sealed under a commitment (`accord.ledger.sealing`), from the bytes `read` gives
    for it; where it gives none, `SEALED` (an auditor without the outputs), or, when `required`
    (the settlement, which pays only on checked work), SettlementError. Bytes that do not open
    to their commitment raise SettlementError."""

    def open_value(commitment: str) -> Any:
        data = read(commitment)
        if data is None:
            if required:
                raise SettlementError(
                    f"the sealed output {commitment} is not held here: nobody is paid on work "
                    "that cannot be checked"
                )
            return SEALED
        try:
            return open_sealed(data, commitment).value
        except SealError as exc:
            raise SettlementError(str(exc)) from exc

    return open_value


def delivered_work(
    task: Task, body: Mapping[str, Any], open_value: Callable[[str], Any] | None = None
) -> Delivered:
    """What `task.delivered` holds, as the checks read it: each part's producer and the
    commitment to its output from the team's signed reports (the first report of a part
    counts), the output opened by `open_value` (`opener`; by default every output is
    `SEALED`), and the contract holder's plan and assembly from the deliverable it signed.

    Raises SettlementError for a delivery that does not parse, and what `open_value` raises.
    """
    if task.winner is None:
        raise SettlementError(f"{task.task_id} was never awarded: nothing was delivered")
    wanted = {p.part_id for p in task.spec.parts}
    outputs: dict[str, Any] = {}
    producers: dict[str, str] = {}
    commitments: dict[str, str] = {}
    try:
        for contribution in body["deliverable"]["contributions"]:
            part_id = contribution["part"]
            if part_id in wanted and part_id not in outputs:
                commitment = contribution["output_sha256"]
                if not is_commitment(commitment):
                    raise TypeError(f"part {part_id} names no output commitment")
                commitments[part_id] = commitment
                outputs[part_id] = SEALED if open_value is None else open_value(commitment)
                producers[part_id] = str(contribution["agent"])
        document = body.get("document")
        if isinstance(document, Mapping):
            outputs[PLAN_PART] = document.get("plan")
            outputs[ASSEMBLY_PART] = document.get("parts")
            producers[PLAN_PART] = producers[ASSEMBLY_PART] = task.winner
    except (KeyError, TypeError, AttributeError) as exc:
        raise SettlementError(f"the delivery of {task.task_id} is malformed: {exc!r}") from exc
    return Delivered(task.spec.parts, outputs, producers, commitments)


def recompute_settlement(
    task: Task,
    delivered_body: Mapping[str, Any],
    env: CheckEnvironment,
    open_value: Callable[[str], Any],
    *,
    seed: int | None = None,
) -> tuple[Settlement, Valuation, ShapleyResult]:
    """Run the rubric's checks on the delivery (its outputs opened by `open_value`, see
    `opener`), value every coalition, split the amount paid.

    Raises SettlementError when there is no winner price or nobody contributed, or an output
    cannot be opened where it must be, and SettlementWaits (from `env`) when a check cannot be
    decided yet.
    """
    if task.price is None:
        raise SettlementError(f"{task.task_id} was never awarded: nothing to settle")
    delivered = delivered_work(task, delivered_body, open_value)
    checks = task.spec.rubric
    shares = check_shares(checks)
    results = evaluate_all(checks, delivered, env)
    value = valuation(checks, shares, results, delivered)
    players = value.players
    if not players:
        raise SettlementError(f"the deliverable of {task.task_id} has no contributions")
    run_seed = settlement_seed(task.task_id) if seed is None else seed
    # Shapley over the parts, then each producer paid the sum of its parts' values: how many
    # identities hold the parts changes nobody's pay (`accord.market.checks.Valuation`).
    result = shapley(players, value.value, seed=run_seed)
    by_producer = value.by_producer(result.values)
    total = value.value(frozenset(players))
    share = paid_share(checks, {c: r.passed for c, r in results.items()})
    earned = amount_paid(task.price, share)
    team_fees, requester_fees = dispute_costs(results)  # judge-only disputes (before panels)
    borne = min(team_fees, earned)
    try:
        after, seat_pay, taken = settle_disputes(
            decided_disputes({c: r.record for c, r in results.items()}), earned - borne
        )
    except PanelError as exc:
        raise SettlementError(str(exc)) from exc
    amount = Wei(after)
    judge_pay = seat_pay.pop(JUDGE_SEAT, 0)
    payouts = split_wei(amount, by_producer)
    settlement = Settlement(
        task_id=task.task_id,
        players=players,
        method=result.method,
        seed=run_seed,
        part_values=result.values,
        producers=dict(value.producers),
        values=by_producer,
        evaluated=result.evaluated,
        total_value=total,
        paid_share=share,
        amount=amount,
        evaluator_fee=Wei(borne + requester_fees + judge_pay),
        payouts=payouts,
        quality={p: value.quality(p) for p in value.contributors},
        checks=results,
        shares=shares,
        panel_payouts={seat: Wei(wei) for seat, wei in sorted(seat_pay.items()) if wei > 0},
        answers_taken={a: Wei(w) for a, w in sorted(taken.items()) if w > 0},
    )
    return settlement, value, result


def delivery_body(market: Market, task_id: str) -> dict[str, Any]:
    """The body of the task's `task.delivered` event. Raises SettlementError."""
    found = market.ledger.store.find(kind=TASK_DELIVERED, subject=task_id, limit=1)
    if not found:
        raise SettlementError(f"{task_id} has no delivery to settle")
    return dict(Entry.from_bytes(found[0].data).event.body)


def service_check_environment(
    market: Market, task: Task, judge: Judge | None, onboarding: Onboarding | None = None
) -> ServiceCheckEnvironment:
    """The sandbox, the judge, and the requester's reviews as the log holds them now; a
    rejection's panel (`accord.market.disputes`), with the judge in one seat, and with
    `onboarding`, its panelists called in their own processes (`panel_calls`)."""
    events = [
        (stored.index, task_event(stored))
        for stored in market.ledger.store.find(
            subject=task.task_id, kind=REVIEW_GIVEN, limit=MAX_TASK_EVENTS
        )
    ]

    env = ServiceCheckEnvironment(
        LogReviews(task, events, market.clock()), judge, market.keep_sealed
    )
    seat = None if judge is None else JudgeSeat(env.ask_model, lambda c: _answer_of(market, c))

    call = None if onboarding is None else panelist_caller(onboarding, market.ledger.operator)

    def by_panel(
        check: ReviewCheck, outputs: Mapping[str, Any], rejected: CheckResult
    ) -> CheckResult:
        inputs = part_inputs(market, task, check.reads) if call is not None else None
        return decide_by_panel(
            market.panels, task, check, rejected, outputs, seat, call=call, inputs=inputs
        )

    def by_contest(
        check: PythonCheck, outputs: Mapping[str, Any], ran: CheckResult, rejected: CheckResult
    ) -> CheckResult:
        inputs = part_inputs(market, task, check.reads) if call is not None else None
        return decide_contest(
            market.panels, task, check, ran, rejected, outputs, seat, call=call, inputs=inputs
        )

    env.panel = by_panel
    env.contest = by_contest
    return env


def part_inputs(market: Market, task: Task, reads: Collection[str]) -> dict[str, Any]:
    """The capability and input (its files' text in place, and the delivered outputs of the
    parts it is made of in place of their `{"$part": id}`) of each part in `reads`: what a
    panelist is given beside the outputs. Raises TaskError, BlobError for a missing file,
    SettlementError for a delivered output the service cannot open."""
    found: dict[str, Any] = {}
    made: Mapping[str, Any] | None = None
    for part in task.spec.parts:
        if part.part_id not in reads:
            continue
        texts = {sha: market.file_text(task, sha) for sha in file_refs(part.input)}
        given = resolve_files(part.input, texts)
        if part_refs(given):
            if made is None:
                body = delivery_body(market, task.task_id)
                made = delivered_work(
                    task, body, opener(market.sealed_bytes, required=True)
                ).outputs
            given = resolve_parts(given, made)
        found[part.part_id] = {"capability": part.capability, "input": given}
    return found


def _answer_of(market: Market, commitment: str) -> str | None:
    """The answer of the judge's exchange sealed under `commitment`, if the service holds it."""
    data = market.sealed_bytes(commitment)
    if data is None:
        return None
    try:
        value = open_sealed(data, commitment).value
    except SealError:
        return None
    return str(value.get("answer", "")) if isinstance(value, Mapping) else None


def logged_settlement(market: Market, task_id: str) -> dict[str, Any] | None:
    """The body of the task's `settlement.computed` event, if one is logged."""
    found = market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)
    return None if not found else dict(Entry.from_bytes(found[0].data).event.body)


@dataclass(frozen=True)
class SettleOutcome:
    task_id: str
    payouts: Mapping[str, Wei]
    payees: Mapping[str, str]
    values: Mapping[str, str]
    amount: Wei
    refund: Wei
    tx_hash: str
    already: bool
    held: Mapping[str, Wei] = field(default_factory=dict)
    """The payouts the escrow still holds, by payee (none bound a payout account yet)."""


SETTLE_RECHECKS = 3
"""How many times a settlement's checks run again when the task's log changed while they ran
(a review logged meanwhile) before the settlement waits for a later round."""


def settle_task(
    market: Market,
    onboarding: Onboarding,
    task_id: str,
    *,
    judge: Judge | None = None,
    race_wait_s: float = SETTLE_RACE_WAIT_S,
    lock: contextlib.AbstractContextManager[Any] | None = None,
) -> SettleOutcome:
    """Settle a delivered task (idempotent, and safe from several processes at once; see the
    module docstring). Judge checks use `judge`, else the judge configured by
    ACCORD_JUDGE_URL.

    A contributor that has bound no payout address is not paid directly: its payout is held in
    the escrow under the task (paid to the escrow's own address, logged as `held`), and the
    others are paid. Settling a settled task again releases each held payout whose owner has
    bound an address since (`release_held`).

    `lock` (the service's write lock) is held only to log and pay: the checks, which run
    strangers' code, run before it is taken, and what they decided is logged under it only
    when none of the task's entries was logged meanwhile (else they run again, at most
    `SETTLE_RECHECKS` times).

    Raises TransitionError/TaskError for a task that is not delivered, SettlementWaits while a
    review window is open, the judge cannot be reached or the task's log keeps changing while
    its checks run, EscrowError and ChainError from the chain (an EscrowError only once
    another settler's payment has not appeared within `race_wait_s`).
    """
    held = contextlib.nullcontext() if lock is None else lock
    for _ in range(SETTLE_RECHECKS):
        task = market.task(task_id)
        computed: Settlement | None = None
        seen: list[int] = []
        if task.state == "delivered" and logged_settlement(market, task_id) is None:
            seen = _task_entries(market, task_id)
            computed = _compute(market, onboarding, task, judge)  # strangers' code: unlocked
        with held:
            if computed is not None and _task_entries(market, task_id) != seen:
                continue  # the task's log changed while its checks ran: run them again
            return _settle_held(market, onboarding, task_id, computed, race_wait_s)
    raise SettlementWaits(
        f"{task_id}'s log kept changing while its checks ran; it is settled on a later round"
    )


def _task_entries(market: Market, task_id: str) -> list[int]:
    """The log indices of the task's entries (what its checks' environment reads)."""
    return [s.index for s in market.ledger.store.find(subject=task_id, limit=MAX_TASK_EVENTS)]


def _settle_held(
    market: Market,
    onboarding: Onboarding,
    task_id: str,
    computed: Settlement | None,
    race_wait_s: float,
) -> SettleOutcome:
    """`settle_task` with the lock held: log `computed` (the checks' verdicts, when this
    settler ran them), pay, log `task.settled`. Raises what `settle_task` raises."""
    task = market.task(task_id)
    if task.state == "settled":
        released = release_held(market, onboarding, task_id)  # owners that bound since
        if (market.revoke_failing(task_id) or released) and market.ledger.anchorer is not None:
            with contextlib.suppress(ChainError):  # a crash left the track-record rule undone
                market.ledger.anchorer.anchor_latest()
        return _logged_outcome(market, task)
    if task.state != "delivered":
        raise SettlementError(f"{task_id} is {task.state}: only a delivered task is settled")
    body = logged_settlement(market, task_id)
    if body is None:
        if computed is None:  # delivered since this settler looked: its checks did not run
            raise SettlementWaits(f"{task_id} was delivered meanwhile; it is settled next round")
        body = _log_computed(market, onboarding, task, computed)

    # (5): pay once. An escrow paid out is not paid out again.
    # answers sent since the settlement was computed go back whole: the escrow pays them all
    paid = paid_out(body, market.escrow.answers_of(task_id))
    tx_hash = _pay(market, task_id, paid, race_wait_s)
    try:
        market.ledger.append(
            market.ledger.operator,
            TASK_SETTLED,
            subject=task_id,
            body={
                "task_id": task_id,
                "tx_hash": tx_hash,
                "quality": dict(body["quality"]),
                "track_record": track_record(market, task, body).to_json(),
            },
        )
    except AlreadyLoggedError:
        return _logged_outcome(market, market.task(task_id))  # another settler logged it
    market.revoke_failing(task_id)  # the track-record rule (`accord.market.reputation`)
    if market.ledger.anchorer is not None:
        # Paid and logged: anchored again so the audit finds `task.settled` anchored too. A
        # chain that went away now leaves it to `accord ledger anchor` (the audit says so).
        with contextlib.suppress(ChainError):
            market.ledger.anchorer.anchor_latest()
    return _outcome(task, body, tx_hash=tx_hash, already=False)


def track_record(market: Market, task: Task, computed: Mapping[str, Any]) -> SettledWork:
    """What `task.settled` records for reputation (`accord.market.reputation`): each delivered
    part's producer, scored by the requester's checks as the logged settlement `computed` decided
    them. Raises SettlementError for a delivery or a settlement that does not parse."""
    producers = delivered_work(task, delivery_body(market, task.task_id)).producers
    try:
        passed = {str(c["id"]): c["passed"] is True for c in computed["checks"]}
    except (KeyError, TypeError) as exc:
        raise SettlementError(f"the settlement of {task.task_id} does not parse: {exc!r}") from exc
    return SettledWork(-1, task.task_id, task.requester, scored_parts(task.spec, producers, passed))


def payees_and_held(
    payouts: Mapping[str, Wei], address_of: Callable[[str], str | None]
) -> tuple[dict[str, str], dict[str, Wei]]:
    """Pure: the payout address of each player paid more than 0 that has one (`address_of`),
    and the payouts of those that have none, which the escrow holds for them: a payee that
    has bound no payout account never stops the others being paid."""
    payees: dict[str, str] = {}
    held: dict[str, Wei] = {}
    for player, payout in payouts.items():
        if payout == 0:
            continue
        address = address_of(player)
        if address is None:
            held[player] = payout
        else:
            payees[player] = address
    return payees, held


def paid_out(
    computed: Mapping[str, Any], answered: Mapping[str, int] | None = None
) -> list[tuple[str, Wei]]:
    """Pure: the (address, wei) a logged settlement pays through `TaskEscrow.settle`: each
    payout to its payee's address, or to the escrow itself (`holder`) where it is held, the
    evaluator's fee, then each answering account's answers less what they paid the panel
    (`answers_taken`). `answered` is what each account answered on chain when the escrow is
    paid (by default what the settlement logged, `answered`): an answer sent after the
    settlement was computed goes back whole. Raises SettlementError for a settlement that
    does not parse, or answers taken beyond what an account answered."""
    try:
        payees = dict(computed["payees"])
        held = dict(computed.get("held") or {})
        paid: list[tuple[str, Wei]] = []
        owed = {**computed["payouts"], **(computed.get("panel_payouts") or {})}
        for player, wei in owed.items():
            if int(wei) == 0:
                continue
            if player in held:
                if int(held[player]) != int(wei):
                    raise ValueError(f"{player} is held {held[player]}, not its payout {wei}")
                paid.append((str(computed["holder"]), Wei(int(wei))))
            else:
                paid.append((str(payees[player]), Wei(int(wei))))
        fee = Wei(int(computed.get("evaluator_fee", "0")))
        if fee > 0:
            paid.append((str(computed["evaluator"]), fee))
        paid.extend(answers_back(computed, answered))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SettlementError(f"the logged settlement does not parse: {exc!r}") from exc
    return paid


def answers_back(
    computed: Mapping[str, Any], answered: Mapping[str, int] | None = None
) -> list[tuple[str, Wei]]:
    """Pure: what goes back to each account that answered the task's disputes (`paid_out`),
    by address in address order. Raises ValueError, KeyError, TypeError for a settlement
    that does not parse or takes more from an account than it answered."""
    held = dict(computed.get("answered") or {}) if answered is None else dict(answered)
    by_account = {str(a).lower(): (str(a), int(w)) for a, w in held.items()}
    taken = {str(a).lower(): int(w) for a, w in (computed.get("answers_taken") or {}).items()}
    back: list[tuple[str, Wei]] = []
    for account in sorted(set(by_account) | set(taken)):
        address, wei = by_account.get(account, (account, 0))
        if taken.get(account, 0) > wei:
            raise ValueError(f"{address} answered {wei} wei, less than the {taken[account]} taken")
        if wei - taken.get(account, 0) > 0:
            back.append((address, Wei(wei - taken.get(account, 0))))
    return back


@dataclass(frozen=True)
class Release:
    """A held share credited to the payout address its owner bound since."""

    agent: str
    address: str
    amount: Wei
    tx_hash: str


def release_held(market: Market, onboarding: Onboarding, task_id: str) -> list[Release]:
    """Release each share the task's settlement holds to its owner, once it has bound a
    payout account: `TaskEscrow.release`, then `settlement.released` (once per task and
    owner). Idempotent: a release logged is not made again, and one made but not logged
    (a crash between) is found done in the escrow journal, keyed by its owner, and logged
    with the address it went to, even where the owner bound another address since. Owners
    still without an account stay held. Raises EscrowError, ChainError from the chain."""
    body = logged_settlement(market, task_id)
    held = dict((body or {}).get("held") or {})
    if not held:
        return []
    done = _released(market, task_id)
    chain_id = market.escrow.chain_id()
    released: list[Release] = []
    for agent, wei in sorted(held.items()):
        address = onboarding.payout_address(agent, chain_id)
        if agent in done or address is None:
            continue
        receipt = market.escrow.release(task_id, address, Wei(int(wei)), agent)
        # the address paid: one bound before a crash, where the release was made to it then
        release = Release(agent, receipt.payee or address, Wei(int(wei)), receipt.tx_hash)
        with contextlib.suppress(AlreadyLoggedError):  # another settler logged it first
            market.ledger.append(
                market.ledger.operator,
                SETTLEMENT_RELEASED,
                subject=task_id,
                body={
                    "task_id": task_id,
                    "agent": agent,
                    "address": release.address,
                    "amount": str(release.amount),
                    "tx_hash": release.tx_hash,
                },
                once_key=f"{task_id}|{agent}",
            )
        released.append(release)
    return released


def _compute(market: Market, onboarding: Onboarding, task: Task, judge: Judge | None) -> Settlement:
    """(1)-(3): run the checks and compute (no lock is held: strangers' code runs here).

    While the review window is open, the python checks found inconclusive are logged once
    (`checks.previewed`, the requester may contest them) and hold the settlement until the
    window ends; a task whose requester still has reviews to give is previewed so, its
    python checks run alone, the first time it is looked at in its window.

    Raises SettlementError, SettlementWaits."""
    env = service_check_environment(
        market, task, judge_from_env() if judge is None else judge, onboarding
    )
    body = delivery_body(market, task.task_id)
    open_value = opener(market.sealed_bytes, required=True)
    previewed = market.previewed(task.task_id)
    if env.reviews.window_open():
        if previewed:
            raise _held_for_contest(task, previewed)
        if previewed is None and not accepted_in_full(task, _reviews_of(market, task.task_id)):
            delivered = delivered_work(task, body, open_value)
            for check in task.spec.requester_checks:
                if isinstance(check, PythonCheck):
                    evaluate(check, delivered, env)
            _preview(market, task, env.inconclusive)  # logged, named or not: previewed
    settlement, _, _ = recompute_settlement(task, body, env, open_value)
    if env.reviews.window_open() and previewed is None and env.inconclusive:
        _preview(market, task, env.inconclusive)
    return settlement


def _reviews_of(market: Market, task_id: str) -> list[TaskEvent]:
    stored = market.ledger.store.find(subject=task_id, kind=REVIEW_GIVEN, limit=MAX_TASK_EVENTS)
    return [task_event(entry) for entry in stored]


def _preview(market: Market, task: Task, inconclusive: Mapping[str, str]) -> None:
    """Log `checks.previewed` (once per task) naming `inconclusive`; raises SettlementWaits,
    the settlement held for the window, when it names any."""
    body = {
        "task_id": task.task_id,
        "inconclusive": dict(sorted(inconclusive.items())),
        "until": task.review_ends.isoformat() if task.review_ends else None,
    }
    with contextlib.suppress(AlreadyLoggedError):
        market.ledger.append(
            market.ledger.operator,
            CHECKS_PREVIEWED,
            subject=task.task_id,
            body=body,
            once_key=task.task_id,
        )
    logged = market.previewed(task.task_id)
    if logged:
        raise _held_for_contest(task, logged)


def _held_for_contest(task: Task, inconclusive: Mapping[str, str]) -> SettlementWaits:
    ends = task.review_ends.isoformat() if task.review_ends else "its end"
    return SettlementWaits(
        f"python checks {', '.join(sorted(inconclusive))} of {task.task_id} are inconclusive: "
        f"its requester may contest them until the review window ends ({ends}), "
        f"`accord task review {task.task_id} --check CHECK --reject --reason TEXT`"
    )


def _log_computed(
    market: Market, onboarding: Onboarding, task: Task, settlement: Settlement
) -> dict[str, Any]:
    """(4): log the computed settlement once and anchor; the logged computation is the one
    paid, so a settler that lost the race to log it takes the winner's. Raises
    SettlementError."""
    task_id = task.task_id
    chain_id = market.escrow.chain_id()
    payees, held = payees_and_held(
        {**settlement.payouts, **settlement.panel_payouts},
        lambda player: onboarding.payout_address(player, chain_id),
    )
    body = settlement.to_json(payees)
    if held:  # paid to the escrow itself, which holds them under the task until released
        body["held"] = {player: str(wei) for player, wei in held.items()}
        body["holder"] = market.escrow.escrow_address()
    if settlement.evaluator_fee > 0:
        body["evaluator"] = market.escrow.operator_address()
    bonded = market.escrow.bonded(task_id)
    if bonded > 0:  # the requester's dispute bonds, paid out with the deposit
        body["bonded"] = str(bonded)
    answered = {a: w for a, w in market.escrow.answers_of(task_id).items() if w > 0}
    if answered:  # the team's answers (and anyone's), paid out with the deposit
        body["answered"] = {a: str(w) for a, w in answered.items()}
    try:
        answers_back(body)
    except ValueError as exc:
        raise SettlementError(f"{task_id}'s answers do not cover the settlement: {exc}") from exc
    try:
        market.ledger.append(
            market.ledger.operator, SETTLEMENT_COMPUTED, subject=task_id, body=body
        )
    except AlreadyLoggedError as exc:
        logged = logged_settlement(market, task_id)
        if logged is None:
            raise SettlementError(f"{task_id}'s settlement is logged but unreadable") from exc
        return logged
    if market.ledger.anchorer is not None:
        # Anchored before it is paid; if the chain is away, paying below says so.
        with contextlib.suppress(ChainError):
            market.ledger.anchorer.anchor_latest()
    return body


def _pay(market: Market, task_id: str, paid: Sequence[tuple[str, Wei]], wait_s: float) -> str:
    """Pay out the escrow unless it is paid out already; returns the transaction hash ("" when
    it was paid before, by this process or another). When the escrow refuses, or another
    process's payout is under way, waits up to `wait_s` for the escrow to close.

    Raises EscrowError when there is no escrow or it stays open, ChainError.
    """
    deposit = market.escrow.deposit_of(task_id)
    if deposit is None:
        raise EscrowError(f"no escrow for {task_id} on chain")
    if not deposit[1]:
        return ""
    try:
        receipt: EscrowReceipt = market.escrow.pay_out(
            task_id, [a for a, _ in paid], [w for _, w in paid]
        )
    except EscrowError:
        deadline = time.monotonic() + wait_s
        while True:
            deposit = market.escrow.deposit_of(task_id)
            if deposit is not None and not deposit[1]:
                return ""  # another settler paid it
            if time.monotonic() >= deadline:
                raise
            time.sleep(_RACE_POLL_S)
    return receipt.tx_hash


def _logged_outcome(market: Market, task: Task) -> SettleOutcome:
    body = logged_settlement(market, task.task_id)
    if body is None:
        raise SettlementError(f"{task.task_id} is settled but its settlement is not logged")
    released = _released(market, task.task_id)
    return _outcome(task, body, tx_hash="", already=True, released=released)


def _released(market: Market, task_id: str) -> set[str]:
    """The payees whose held payouts were released (`release_held`)."""
    return {
        str(Entry.from_bytes(stored.data).event.body.get("agent"))
        for stored in market.ledger.store.find(
            kind=SETTLEMENT_RELEASED, subject=task_id, limit=MAX_TASK_EVENTS
        )
    }


def _outcome(
    task: Task,
    body: Mapping[str, Any],
    *,
    tx_hash: str,
    already: bool,
    released: Collection[str] = (),
) -> SettleOutcome:
    payouts = {p: Wei(int(w)) for p, w in body["payouts"].items()}
    held = {p: Wei(int(w)) for p, w in (body.get("held") or {}).items() if p not in released}
    amount = Wei(int(body["amount"]))
    fee = Wei(int(body.get("evaluator_fee", "0")))
    fee = Wei(fee + sum(int(w) for w in (body.get("panel_payouts") or {}).values()))
    fee = Wei(fee - sum(int(w) for w in (body.get("answers_taken") or {}).values()))
    return SettleOutcome(
        task.task_id,
        payouts,
        dict(body["payees"]),
        dict(body["values"]),
        amount,
        Wei(task.spec.budget + int(body.get("bonded", "0")) - amount - fee),
        tx_hash,
        already,
        held,
    )


def deliverable_view(
    market: Market, task_id: str, readable: Collection[str] | None = None
) -> dict[str, Any]:
    """What the requester gets back: every part's producer and output commitment, the output
    itself for the parts in `readable` (None: every part; see `accord.market.privacy` for who reads
    which), the contract holder's plan, and, once settled, each check's result and the payouts.

    `withheld` lists the delivered parts whose outputs are not shown. `openings` maps the
    commitment of every output shown, and, where every part is readable, of every exchange
    with an evaluator the checks name, to its sealed text (`accord.ledger.sealing`): what an auditor
    needs to re-run the checks (`accord audit TASK --outputs DIR`).

    Raises TaskError before delivery, BlobError when the stored deliverable was altered,
    SettlementError when a sealed output does not open to its commitment.
    """
    task = market.task(task_id)
    document = market.delivered_document(task_id)
    body = logged_settlement(market, task_id)
    found = market.ledger.store.find(kind=TASK_DELIVERED, subject=task_id, limit=1)
    digest = Entry.from_bytes(found[0].data).event.body.get("sha256")
    openings: dict[str, str] = {}

    def read(commitment: str) -> bytes | None:
        """The service's sealed bytes, remembered as an opening (`opener` checks them)."""
        data = market.sealed_bytes(commitment) if is_commitment(commitment) else None
        if data is not None:
            openings[commitment] = data.decode()
        return data

    open_value = opener(read, required=False)

    def opened(commitment: object) -> Any:
        return open_value(str(commitment))

    parts: list[dict[str, Any]] = []
    withheld: list[str] = []
    for entry in document.get("parts", []):
        shown = dict(entry)
        value = SEALED
        if readable is None or shown.get("part") in readable:
            value = opened(shown.get("output_sha256"))
        if value is SEALED:
            withheld.append(str(shown.get("part")))
        else:
            shown["output"] = value
        parts.append(shown)
    checks = None if body is None else list(body.get("checks", []))
    if not withheld:
        for exchange in _exchanges(checks or []):
            opened(exchange)
    return {
        "task_id": task_id,
        "title": task.spec.title,
        "state": market.state(task),
        "sha256": digest,
        "leader": document.get("leader"),
        "plan": document.get("plan"),
        "parts": parts,
        "withheld": withheld,
        "missing": [
            p.part_id
            for p in task.spec.parts
            if p.part_id not in {entry.get("part") for entry in document.get("parts", [])}
        ],
        "checks": checks,
        "payouts": None if body is None else body.get("payouts"),
        "openings": openings,
    }


def _exchanges(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The commitments of the evaluators' exchanges logged check results name."""
    found = []
    for check in checks:
        record = check.get("record")
        if not isinstance(record, Mapping):
            continue
        dispute = record.get("dispute")
        for holder in (record, dispute if isinstance(dispute, Mapping) else {}):
            if is_commitment(holder.get("exchange")):
                found.append(str(holder["exchange"]))
    return found
