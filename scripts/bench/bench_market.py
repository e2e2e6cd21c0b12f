"""market: clearing an auction of 10,000 sealed bids, and posting a task with its escrow.

Clearing (offline, side by side in each repetition). Setup, untimed: N bidders
(`Ed25519Signer.generate`), each with a signed commitment and reveal (`sealed.commit_bid`,
`sealed.reveal_bid`: random price up to the budget, 32-byte salt), an exam score k/30 and a
reputation (`accord.market.reputation.reputation` of a few random deliveries); a `Task` replayed
(`tasks.replay`) from a synthetic `task.posted` + `escrow.opened` pair. Timed:

- the floor: raw Ed25519 verification (PyNaCl `VerifyKey(pk).verify`) of the 2·N signed
  messages, built beforehand, with the raw public keys (no did:key decoding, no JCS);
- the signatures as replay checks them: `sealed.verify_commitment_signature` and
  `verify_reveal_signature` for every bid (rebuild each message, JCS, did:key, Ed25519);
- `clear_auction` alone over the N `RevealedBid`s (exact `Fraction` scores, ranking, price);
- admission, with the pure checks: `sealed.check_commitment` for each of the N commitments (the
  committed set growing as each is admitted), then `sealed.check_reveal` for each reveal
  (every commitment known, the revealed set growing), each inside its window;
- `accord.market.award.replay_award(task, commitments, reveals, reputations)`: every commitment and
  reveal signature, every commitment re-hashed from its reveal, then `clear_auction` and forfeits;
  this is the goal (what an auditor, and `Market.award`, runs to clear the auction).

The did:key → public key and public key → VerifyKey caches of `accord.ledger.signing` are cleared
before every variant that verifies a signature, so each one pays the decoding like an auditor
replaying a log it has never seen.

Posting (anvil). A managed `Devnet` on a free port in a tmp `ACCORD_HOME`
(`Settings.from_env({"ACCORD_HOME", "ACCORD_DEVNET_PORT"})`), always stopped; the TaskEscrow
deployed by `ensure_escrow`, then the market opened as `accord.market.wiring.open_market` does
(SQLite ledger anchoring on the same devnet, onboarding, journalled escrow). Alternating task
by task (rotating the order), one of each untimed first as a warm-up:

- `EscrowActions.open` alone: reconcile, sign, journal (its own SQLite journal), broadcast,
  wait for the receipt (anvil automine), from anvil's third account;
- `Market.post`: log `task.posted` (signed, SQLite), `EscrowActions.open` through the
  market's journal from anvil's second account, log `escrow.opened`, replay the task.

Run alone: `.venv/bin/python scripts/bench/bench_market.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import cProfile
import math
import pstats
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import nacl.signing
from _common import TIMES, Goal, Measure, Section, progress, run_alone, side_by_side, temp_root

from accord.identity.challenges import REGISTRY
from accord.ledger import signing
from accord.ledger.chain import DEVNET_OPERATOR_KEY
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import devnet_for
from accord.market import sealed
from accord.market.auction import RevealedBid, clear_auction
from accord.market.award import AdmittedCommitment, AdmittedReveal, replay_award
from accord.market.escrow import EscrowActions, SqlEscrowJournal, Web3EscrowChain, ensure_escrow
from accord.market.money import Wei
from accord.market.reputation import reputation
from accord.market.tasks import ESCROW_OPENED, TASK_POSTED, Task, TaskEvent, TaskSpec, replay
from accord.market.wiring import DEVNET_REQUESTER_KEY, ESCROW_DEPLOYMENT_FILE, open_market
from accord.market.work import ExpectCheck, Part

BUDGET = Wei(10**18)
DEPOSIT = Wei(10**15)
GOAL_CLEAR_SECONDS = 3.0
GOAL_POST_SECONDS = 2.0
EXAM_ITEMS = 30
#: anvil's third default account: the requester of the bare `EscrowActions.open` runs, so its
#: nonces never interleave with the market's requester (anvil's second account).
BARE_REQUESTER_KEY = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"


EXPECTED_SUM = REGISTRY["arithmetic"].example()[1]
"""What the benchmark task's part must give: its correctness check (the service has no judge)."""


def _spec(title: str) -> TaskSpec:
    return TaskSpec(
        title=title,
        description="a benchmark task",
        parts=(Part("sum", "arithmetic", REGISTRY["arithmetic"].example()[0]),),
        checks=(ExpectCheck("right", 1, ("sum",), "$", "equals", EXPECTED_SUM),),
        budget=BUDGET,
        bidding=timedelta(hours=1),
        reveal=timedelta(hours=1),
        delivery=timedelta(days=1),
    )


def _clear_key_caches() -> None:
    signing.public_key_from_did.cache_clear()
    signing._verify_key.cache_clear()


@dataclass
class Auction:
    """Everything clearing one task's auction needs, built once (untimed)."""

    task: Task
    terms: sealed.SealedTerms
    commitments: list[AdmittedCommitment]
    reveals: list[AdmittedReveal]
    reputations: dict[str, Fraction]
    bids: list[RevealedBid]
    raw: list[tuple[bytes, bytes, bytes]]
    """(public key, message, signature) of every commitment and reveal."""


def build_auction(count: int, seed: int = 31) -> Auction:
    rng = random.Random(seed)
    posted_at = datetime.now(UTC).replace(microsecond=0)
    task_id = "task-bench00000000"
    requester = Ed25519Signer.generate()
    task = replay(
        [
            TaskEvent(
                0,
                TASK_POSTED,
                requester.did,
                posted_at,
                {"task_id": task_id, "spec": _spec("clear 10,000 sealed bids").to_json()},
            ),
            TaskEvent(1, ESCROW_OPENED, requester.did, posted_at, {"task_id": task_id}),
        ]
    )
    terms = sealed.SealedTerms(
        task_id, task.spec.budget, task.state, posted_at, task.bidding_ends, task.reveal_ends
    )
    commitments: list[AdmittedCommitment] = []
    reveals: list[AdmittedReveal] = []
    reputations: dict[str, Fraction] = {}
    bids: list[RevealedBid] = []
    raw: list[tuple[bytes, bytes, bytes]] = []
    for i in range(count):
        signer = Ed25519Signer.generate()
        price = Wei(rng.randint(BUDGET // 10, BUDGET))
        salt = rng.randbytes(32)
        commitment = sealed.commit_bid(signer, task_id, price, salt)
        reveal = sealed.reveal_bid(signer, task_id, price, salt)
        exam = Fraction(rng.randint(EXAM_ITEMS * 6 // 10, EXAM_ITEMS), EXAM_ITEMS)
        deliveries = [Fraction(rng.randint(0, 100), 100) for _ in range(rng.randint(0, 6))]
        rep = reputation(deliveries, forfeits=rng.choice((0, 0, 0, 1)))
        commitments.append(AdmittedCommitment(2 + i, commitment, exam))
        reveals.append(AdmittedReveal(2 + count + i, reveal))
        reputations[signer.did] = rep
        bids.append(RevealedBid(signer.did, price, rep, exam, 2 + i))
        raw.append((signer.public_key, commitment.message(), commitment.signature))
        raw.append((signer.public_key, reveal.message(), reveal.signature))
    return Auction(task, terms, commitments, reveals, reputations, bids, raw)


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    count = 10_000
    tasks = 5 if quick else 20
    section = Section(
        key="market",
        title=(
            f"market: clearing {count:,} sealed bids, posting a task with its escrow (anvil, "
            f"{tasks} tasks)"
        ),
        method=__doc__ or "",
    )
    failures: list[str] = []
    clear_s = _clearing(section, count, reps, failures)
    market_ms = _posting(section, tasks, failures)
    if failures:
        section.error = failures[0]
    section.goals += [
        Goal(
            f"clear {count:,} sealed bids (replay_award, signatures and commitments checked)",
            GOAL_CLEAR_SECONDS,
            clear_s,
            "s",
            higher_is_better=False,
        ),
        Goal(
            "post a task with its escrow (Market.post, anvil)",
            GOAL_POST_SECONDS * 1_000,
            market_ms,
            "ms",
            higher_is_better=False,
        ),
    ]
    section.notes += [
        "The issue sets the 3 s target for clearing and asks only for the posting latency. "
        f"The posting goal ({GOAL_POST_SECONDS:g} s) is a modest ceiling set here: posting is an "
        "interactive command, and on anvil (automine, local) the transaction is mined at once, "
        "so a FAIL means something waits that should not (a receipt poll stuck, a slow "
        "journal), not a slow chain; on a public chain the block time (about 12 s on Ethereum "
        "mainnet) dominates and this goal does not apply.",
    ]
    section.seconds = time.perf_counter() - started
    return section


def _clearing(section: Section, count: int, reps: int, failures: list[str]) -> float:
    built = time.perf_counter()
    auction = build_auction(count)
    progress(
        f"market: {count:,} bidders, commitments and reveals built in "
        f"{time.perf_counter() - built:.1f} s"
    )
    expected, _ = replay_award(
        auction.task, auction.commitments, auction.reveals, auction.reputations
    )
    direct = clear_auction(
        auction.bids,
        budget=auction.task.spec.budget,
        weights=auction.task.spec.weights,
        rule=auction.task.spec.rule,
    )
    if (expected.winner, expected.price) != (direct.winner, direct.price):
        failures.append("replay_award and clear_auction disagree on the winner or the price")
    if expected.winner is None or len(expected.ranking) != count:
        failures.append(f"the auction ranked {len(expected.ranking)} of {count} bids")

    floor = Measure(f"Ed25519 verify, raw PyNaCl, {2 * count:,} messages (floor)", "s")
    signatures = Measure(
        f"sealed.verify_*_signature, {count:,} commitments + {count:,} reveals",
        "s",
        baseline=floor.name,
    )
    clearing = Measure(f"clear_auction alone, {count:,} bids (exact Fractions)", "s")
    admit_commit = Measure(f"check_commitment {TIMES}{count:,} (admission)", "s")
    admit_reveal = Measure(f"check_reveal {TIMES}{count:,} (admission)", "s")
    award = Measure(
        f"replay_award, {count:,} bids (signatures, commitments, clearing)",
        "s",
        baseline=floor.name,
    )
    per_bid = Measure("replay_award per bid", "µs/bid")
    section.measures += [floor, signatures, clearing, admit_commit, admit_reveal, award, per_bid]

    task, terms = auction.task, auction.terms
    commit_now = terms.bidding_opens + timedelta(minutes=1)
    reveal_now = terms.bidding_closes + timedelta(minutes=1)
    commitment_of = {a.commitment.bidder: a.commitment for a in auction.commitments}

    def verify_floor() -> float:
        start = time.perf_counter()
        for public_key, message, signature in auction.raw:
            nacl.signing.VerifyKey(public_key).verify(message, signature)
        return time.perf_counter() - start

    def verify_sealed() -> float:
        _clear_key_caches()
        start = time.perf_counter()
        for admitted in auction.commitments:
            sealed.verify_commitment_signature(admitted.commitment)
        for shown in auction.reveals:
            sealed.verify_reveal_signature(shown.reveal)
        return time.perf_counter() - start

    def clear_only() -> float:
        start = time.perf_counter()
        outcome = clear_auction(
            auction.bids, budget=task.spec.budget, weights=task.spec.weights, rule=task.spec.rule
        )
        seconds = time.perf_counter() - start
        if outcome.price != expected.price:
            failures.append("clear_auction changed its price between runs")
        return seconds

    def check_commitments() -> float:
        _clear_key_caches()
        committed: set[str] = set()
        start = time.perf_counter()
        for admitted in auction.commitments:
            commitment = admitted.commitment
            sealed.check_commitment(
                commitment, terms=terms, committed=committed, eligible=True, now=commit_now
            )
            committed.add(commitment.bidder)
        return time.perf_counter() - start

    def check_reveals() -> float:
        _clear_key_caches()
        revealed: set[str] = set()
        start = time.perf_counter()
        for shown in auction.reveals:
            reveal = shown.reveal
            sealed.check_reveal(
                reveal, terms=terms, commitments=commitment_of, revealed=revealed, now=reveal_now
            )
            revealed.add(reveal.bidder)
        return time.perf_counter() - start

    def award_all() -> float:
        _clear_key_caches()
        start = time.perf_counter()
        outcome, forfeits = replay_award(
            task, auction.commitments, auction.reveals, auction.reputations
        )
        seconds = time.perf_counter() - start
        if (outcome.winner, outcome.price) != (expected.winner, expected.price) or forfeits:
            failures.append("replay_award changed its outcome between runs")
        per_bid.samples.append(seconds / count * 1e6)
        return seconds

    side_by_side(
        reps,
        [
            (award, award_all),
            (floor, verify_floor),
            (signatures, verify_sealed),
            (clearing, clear_only),
            (admit_commit, check_commitments),
            (admit_reveal, check_reveals),
        ],
        label="market (clearing): ",
    )

    rest = award.median - signatures.median - clearing.median
    section.notes += [
        f"{count:,} bidders, every bid revealed and valid; the winner is paid "
        f"{expected.price:,} wei of a {BUDGET:,} wei budget (second-score rule). "
        f"replay_award ≈ signatures {signatures.median:.2f} s + clearing "
        f"{clearing.median:.2f} s + the rest (re-hashing {count:,} commitments, building the "
        f"RevealedBids, forfeits) ≈ {max(rest, 0.0):.2f} s; the signatures cost "
        f"{signatures.median / floor.median:.1f}{TIMES} the raw Ed25519 floor "
        "(message rebuild, JCS, did:key decoding).",
        "Admission checks one bid at a time as it arrives (one signature each); replay_award "
        "checks them all again at once, so the two admission rows together are about its "
        "signature work plus the re-hash.",
    ]
    if award.median > GOAL_CLEAR_SECONDS:
        section.notes.append("Where replay_award's time goes: " + _profile(auction))
    return award.median


def _profile(auction: Auction, top: int = 6) -> str:
    """The functions with the most own time in one profiled replay_award."""
    _clear_key_caches()
    profiler = cProfile.Profile()
    profiler.enable()
    replay_award(auction.task, auction.commitments, auction.reveals, auction.reputations)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)  # type: ignore[attr-defined]
    total = sum(row[1][2] for row in rows) or 1.0
    parts = [
        f"{name} ({Path(file).name}) {own / total:.0%}"
        for (file, _line, name), (_cc, _nc, own, _cum, _callers) in rows[:top]
    ]
    return "; ".join(parts) + " (share of own time under cProfile)."


def _posting(section: Section, tasks: int, failures: list[str]) -> float:
    work = Path(tempfile.mkdtemp(prefix="accord-bench-market-", dir=temp_root()))
    port = find_free_port()
    settings = Settings.from_env(
        {"ACCORD_HOME": str(work / "home"), "ACCORD_DEVNET_PORT": str(port)}
    )
    devnet = devnet_for(settings)
    bare = Measure("EscrowActions.open (sign, journal, broadcast, receipt)", "ms")
    post = Measure("Market.post (log, escrow open, log, replay)", "ms", baseline=bare.name)
    section.measures += [bare, post]
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        info = devnet.up()
        progress(f"market: anvil pid {info.pid} on {info.rpc_url}")
        deployment = ensure_escrow(
            info.rpc_url, DEVNET_OPERATOR_KEY, settings.home / ESCROW_DEPLOYMENT_FILE
        )
        context = open_market(settings)  # reuses that deployment
        escrow_address = context.escrow.chain.escrow_address()
        if escrow_address.lower() != deployment.address.lower():
            failures.append("open_market did not reuse the escrow deployment")
        progress(f"market: TaskEscrow at {escrow_address}, market open in {settings.home}")
        journal_engine = make_engine(f"sqlite:///{work / 'bare-journal.db'}")
        actions = EscrowActions(
            Web3EscrowChain(info.rpc_url, escrow_address), SqlEscrowJournal(journal_engine)
        )
        requester = Ed25519Signer.generate()
        deadline = int(time.time()) + 3 * 86_400
        opened = 0
        last_task = ""

        def open_bare() -> float:
            nonlocal opened
            opened += 1
            start = time.perf_counter()
            outcome = actions.open(BARE_REQUESTER_KEY, f"bare-{opened:05d}", DEPOSIT, deadline)
            ms = (time.perf_counter() - start) * 1_000
            if outcome.status != "confirmed":
                failures.append(f"EscrowActions.open ended {outcome.status}")
            return ms

        def post_task() -> float:
            nonlocal last_task
            start = time.perf_counter()
            task = context.market.post(
                requester, _spec("a posted task"), requester_key=DEVNET_REQUESTER_KEY
            )
            ms = (time.perf_counter() - start) * 1_000
            last_task = task.task_id
            if task.state != "bidding" or not task.escrowed:
                failures.append(f"Market.post left the task {task.state}")
            return ms

        open_bare()  # warm-up: the first of each connects, reads the chain id, may anchor
        post_task()
        side_by_side(tasks, [(bare, open_bare), (post, post_task)], label="market (posting): ")
        deposit = context.escrow.deposit_of(last_task)
        if deposit is None or deposit[0] != BUDGET or not deposit[1]:
            failures.append(f"the last posted task's escrow reads {deposit}")
        context.market.ledger.store.engine.dispose()
        journal_engine.dispose()
    finally:
        try:
            devnet.down()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    progress("market: devnet stopped")
    section.notes.append(
        f"Posting, {tasks} tasks each after one warm-up: EscrowActions.open median "
        f"{bare.median:.0f} ms, p90 {_p90(bare.samples):.0f} ms; Market.post median "
        f"{post.median:.0f} ms, p90 {_p90(post.samples):.0f} ms (n is the number of tasks)."
    )
    return post.median


def _p90(samples: list[float]) -> float:
    """The 90th percentile (nearest rank)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


if __name__ == "__main__":
    run_alone(run, "clearing 10,000 sealed bids and posting a task with its escrow")
