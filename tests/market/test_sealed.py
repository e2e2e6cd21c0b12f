"""Commit-reveal admission (market.sealed): every rejection reason, replays, round trips."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.ledger.canonical import canonical_json
from accord.ledger.signing import Ed25519Signer, b64url
from accord.market.errors import BidRejected, TaskError
from accord.market.money import Wei
from accord.market.sealed import (
    Commitment,
    Reveal,
    SealedTerms,
    check_commitment,
    check_reveal,
    check_within_budget,
    commit_bid,
    commitment_hash,
    forfeited,
    reveal_bid,
)
from accord.market.states import TASK_STATES

ALICE = Ed25519Signer(bytes([1]) * 32)
BOB = Ed25519Signer(bytes([2]) * 32)
SALT = bytes(range(16))
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DURING_BIDDING = T0 + timedelta(seconds=10)
DURING_REVEAL = T0 + timedelta(seconds=40)


def terms(state: str = "bidding", task_id: str = "task-1", budget: int = 1000) -> SealedTerms:
    return SealedTerms(
        task_id=task_id,
        budget=Wei(budget),
        state=state,
        bidding_opens=T0,
        bidding_closes=T0 + timedelta(seconds=30),
        reveal_closes=T0 + timedelta(seconds=60),
    )


def admit_commitment(commitment: Commitment, **overrides: object) -> None:
    arguments: dict[str, object] = {
        "terms": terms(),
        "committed": frozenset(),
        "eligible": True,
        "now": DURING_BIDDING,
    }
    arguments.update(overrides)
    check_commitment(commitment, **arguments)  # type: ignore[arg-type]


def admit_reveal(reveal: Reveal, commitment: Commitment | None, **overrides: object) -> None:
    commitments = {} if commitment is None else {commitment.bidder: commitment}
    arguments: dict[str, object] = {
        "terms": terms("revealing"),
        "commitments": commitments,
        "revealed": frozenset(),
        "now": DURING_REVEAL,
    }
    arguments.update(overrides)
    check_reveal(reveal, **arguments)  # type: ignore[arg-type]


def rejected(reason: str, message: str) -> pytest.RaisesExc[BidRejected]:
    return pytest.raises(BidRejected, match=f"^{reason}: .*{message}")


# -- the commitment hash ----------------------------------------------------------------------


def test_commitment_hash_is_sha256_of_the_canonical_preimage() -> None:
    expected = hashlib.sha256(
        canonical_json(
            {"task": "task-1", "bidder": ALICE.did, "price": str(10**20), "salt": b64url(SALT)}
        )
    ).digest()
    assert commitment_hash("task-1", ALICE.did, Wei(10**20), SALT) == expected
    # the price is a decimal string, so a price beyond 2**53 is exact
    assert commitment_hash("task-1", ALICE.did, Wei(10**20 + 1), SALT) != expected


def test_commitment_hash_binds_task_bidder_price_and_salt() -> None:
    base = commitment_hash("task-1", ALICE.did, Wei(5), SALT)
    assert commitment_hash("task-2", ALICE.did, Wei(5), SALT) != base
    assert commitment_hash("task-1", BOB.did, Wei(5), SALT) != base
    assert commitment_hash("task-1", ALICE.did, Wei(6), SALT) != base
    assert commitment_hash("task-1", ALICE.did, Wei(5), bytes(16)) != base


@pytest.mark.parametrize("salt", [b"", bytes(15), bytes(65), "0" * 16])
def test_short_long_or_non_bytes_salt_is_malformed(salt: bytes) -> None:
    with rejected("malformed", "salt"):
        commitment_hash("task-1", ALICE.did, Wei(5), salt)


def test_negative_price_is_malformed() -> None:
    with rejected("malformed", "price"):
        commitment_hash("task-1", ALICE.did, Wei(-1), SALT)


# -- commitments ------------------------------------------------------------------------------


def test_valid_commitment_admitted() -> None:
    admit_commitment(commit_bid(ALICE, "task-1", Wei(500), SALT))
    with rejected("early", "not escrowed yet"):  # a posted task has no escrow yet: no bids
        admit_commitment(commit_bid(ALICE, "task-1", Wei(500), SALT), terms=terms("posted"))
    admit_commitment(commit_bid(ALICE, "task-1", Wei(500), SALT), now=T0)  # opens inclusive


def test_commitment_not_eligible() -> None:
    with rejected("not-eligible", "holds no valid credentials"):
        admit_commitment(commit_bid(ALICE, "task-1", Wei(5), SALT), eligible=False)


def test_commitment_own_task() -> None:
    own = SealedTerms(**{**terms().__dict__, "requester": ALICE.did})
    with rejected("own-task", "may not bid on it"):
        admit_commitment(commit_bid(ALICE, "task-1", Wei(5), SALT), terms=own)
    admit_commitment(commit_bid(BOB, "task-1", Wei(5), SALT), terms=own)


def test_commitment_second_bid() -> None:
    with rejected("second-bid", "already committed"):
        admit_commitment(
            commit_bid(ALICE, "task-1", Wei(5), SALT), committed=frozenset({ALICE.did})
        )


@pytest.mark.parametrize(
    ("state", "now"),
    [
        ("bidding", T0 + timedelta(seconds=30)),  # the close is exclusive
        ("bidding", T0 + timedelta(days=1)),
        ("revealing", DURING_BIDDING),
        ("awarded", DURING_BIDDING),
        ("expired", DURING_BIDDING),
        ("cancelled", DURING_BIDDING),  # cancelled before its escrow opened: a refusal
        ("closed", DURING_BIDDING),
    ],
)
def test_commitment_late(state: str, now: datetime) -> None:
    with rejected("late", "bidding on task task-1 has closed"):
        admit_commitment(commit_bid(ALICE, "task-1", Wei(5), SALT), terms=terms(state), now=now)


@pytest.mark.parametrize("state", TASK_STATES)
def test_every_task_state_gets_a_bid_answer_never_an_unknown_state(state: str) -> None:
    """The bid checks read the task states from `accord.market.states`: a state the state
    machine can reach is admitted or refused as a bid, never "unknown task state"."""
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(5), SALT)
    for check in (
        lambda: admit_commitment(commitment, terms=terms(state), now=DURING_BIDDING),
        lambda: admit_reveal(reveal, commitment, terms=terms(state), now=DURING_REVEAL),
    ):
        try:
            check()
        except BidRejected as refused:
            assert refused.reason in {"early", "late"}, refused


def test_commitment_early() -> None:
    with rejected("early", "has not opened"):
        admit_commitment(commit_bid(ALICE, "task-1", Wei(5), SALT), now=T0 - timedelta(seconds=1))


def test_commitment_replayed_from_another_task_is_wrong_task() -> None:
    from_other_task = commit_bid(ALICE, "task-0", Wei(5), SALT)
    with rejected("wrong-task", "for task task-0, not task-1"):
        admit_commitment(from_other_task)
    # relabelling it for this task breaks the signature, which covers the task id
    with rejected("bad-signature", "not signed by"):
        admit_commitment(replace(from_other_task, task_id="task-1"))


def test_commitment_bad_signature() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("bad-signature", f"commitment is not signed by {BOB.did}"):
        admit_commitment(replace(commitment, bidder=BOB.did))
    with rejected("bad-signature", "not signed by"):
        admit_commitment(replace(commitment, signature=bytes(64)))


def test_commitment_from_a_non_did_key_is_malformed() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("malformed", "not a did:key"):
        admit_commitment(replace(commitment, bidder="did:web:example.com"))


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {},
        {"task": "task-1", "bidder": "did:key:z", "commitment": "AA", "signature": "AA"},
        {"task": "task-1", "bidder": ALICE.did, "commitment": "@@", "signature": "AA"},
        {"task": "", "bidder": ALICE.did, "commitment": b64url(bytes(32)), "signature": "AA"},
        {"task": "t", "bidder": "alice", "commitment": b64url(bytes(32)), "signature": "AA"},
        {"task": "t", "bidder": ALICE.did, "commitment": b64url(bytes(32)), "signature": 1},
        {"task": "t", "bidder": ALICE.did, "commitment": b64url(bytes(32)), "extra": "x"},
    ],
)
def test_malformed_commitment_body(body: object) -> None:
    with pytest.raises(BidRejected, match=r"^malformed: ") as info:
        Commitment.from_json(body)
    assert info.value.reason == "malformed"


# -- reveals ----------------------------------------------------------------------------------


def test_valid_reveal_admitted() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(1000), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(1000), SALT)
    admit_reveal(reveal, commitment)
    admit_reveal(reveal, commitment, terms=terms("bidding"))  # state not advanced yet
    admit_reveal(reveal, commitment, now=T0 + timedelta(seconds=30))  # opens inclusive


def test_reveal_early() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("early", "reveal window of task task-1 is not open"):
        admit_reveal(reveal, commitment, now=DURING_BIDDING)
    with rejected("early", "not open"):
        admit_reveal(reveal, commitment, terms=terms("posted"))


@pytest.mark.parametrize(
    ("state", "now"),
    [
        ("revealing", T0 + timedelta(seconds=60)),
        ("awarded", DURING_REVEAL),
        ("settled", DURING_REVEAL),
        ("cancelled", DURING_REVEAL),
        ("closed", DURING_BIDDING),
    ],
)
def test_reveal_late(state: str, now: datetime) -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("late", "reveal window of task task-1 has closed"):
        admit_reveal(reveal, commitment, terms=terms(state), now=now)


def test_reveal_over_budget() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(1001), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(1001), SALT)
    with rejected("over-budget", "price 1001 wei exceeds the budget of task task-1"):
        admit_reveal(reveal, commitment)


def test_a_bidder_checks_its_own_price_before_committing() -> None:
    check_within_budget("task-1", Wei(1000), Wei(1000))  # the whole budget may be asked
    with rejected("over-budget", "price 1001 wei exceeds the budget of task task-1"):
        check_within_budget("task-1", Wei(1001), Wei(1000))
    # the commitment alone hides the price: the market admits it, and refuses at the reveal
    admit_commitment(commit_bid(ALICE, "task-1", Wei(1001), SALT))


def test_reveal_mismatch() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("mismatch", "do not open"):
        admit_reveal(reveal_bid(ALICE, "task-1", Wei(6), SALT), commitment)
    with rejected("mismatch", "do not open"):
        admit_reveal(reveal_bid(ALICE, "task-1", Wei(5), bytes(16)), commitment)


def test_reveal_unknown_commitment() -> None:
    with rejected("unknown-commitment", "made no commitment to task task-1"):
        admit_reveal(reveal_bid(ALICE, "task-1", Wei(5), SALT), None)
    # another bidder's commitment does not count
    with rejected("unknown-commitment", "made no commitment"):
        admit_reveal(
            reveal_bid(ALICE, "task-1", Wei(5), SALT), commit_bid(BOB, "task-1", Wei(5), SALT)
        )


def test_reveal_second_bid() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("second-bid", "already revealed"):
        admit_reveal(
            reveal_bid(ALICE, "task-1", Wei(5), SALT), commitment, revealed=frozenset({ALICE.did})
        )


def test_reveal_replayed_from_another_task_is_wrong_task() -> None:
    # Alice bid on task-0 and revealed there; the same commitment and reveal replayed to task-1
    old_reveal = reveal_bid(ALICE, "task-0", Wei(5), SALT)
    with rejected("wrong-task", "reveal is for task task-0, not task-1"):
        admit_reveal(old_reveal, commit_bid(ALICE, "task-1", Wei(5), SALT))
    with rejected("bad-signature", "reveal is not signed by"):
        admit_reveal(
            replace(old_reveal, task_id="task-1"), commit_bid(ALICE, "task-1", Wei(5), SALT)
        )
    # a digest copied from task-0 into a fresh task-1 commitment opens only for task-0
    copied = commit_bid(ALICE, "task-0", Wei(5), SALT).digest
    signed_here = Commitment(
        "task-1",
        ALICE.did,
        copied,
        ALICE.sign(replace(commit_bid(ALICE, "task-1", Wei(5), SALT), digest=copied).message()),
    )
    admit_commitment(signed_here)
    with rejected("mismatch", "do not open"):
        admit_reveal(reveal_bid(ALICE, "task-1", Wei(5), SALT), signed_here)


def test_someone_else_cannot_reveal_a_published_bid() -> None:
    # after Alice's reveal is public, Bob commits the same digest and reveals Alice's price/salt
    alice = commit_bid(ALICE, "task-1", Wei(5), SALT)
    bob = Commitment(
        "task-1", BOB.did, alice.digest, BOB.sign(replace(alice, bidder=BOB.did).message())
    )
    admit_commitment(bob)
    with rejected("mismatch", "do not open"):
        admit_reveal(reveal_bid(BOB, "task-1", Wei(5), SALT), bob)


def test_reveal_bad_signature() -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(5), SALT)
    reveal = reveal_bid(ALICE, "task-1", Wei(5), SALT)
    with rejected("bad-signature", "not signed by"):
        admit_reveal(replace(reveal, signature=BOB.sign(reveal.message())), commitment)


@pytest.mark.parametrize(
    "body",
    [
        None,
        {"task": "t", "bidder": ALICE.did, "price": "5", "salt": b64url(SALT)},
        {"task": "t", "bidder": ALICE.did, "price": "05", "salt": b64url(SALT), "signature": ""},
        {"task": "t", "bidder": ALICE.did, "price": "-5", "salt": b64url(SALT), "signature": ""},
        {"task": "t", "bidder": ALICE.did, "price": "5.0", "salt": b64url(SALT), "signature": ""},
        {"task": "t", "bidder": ALICE.did, "price": 5, "salt": b64url(SALT), "signature": ""},
        {"task": "t", "bidder": ALICE.did, "price": "5", "salt": b64url(bytes(8)), "signature": ""},
        {"task": "t", "bidder": ALICE.did, "price": "5", "salt": b64url(SALT), "signature": "AA"},
        {"task": "t", "bidder": ALICE.did, "price": "9" * 79, "salt": "", "signature": ""},
    ],
)
def test_malformed_reveal_body(body: object) -> None:
    with pytest.raises(BidRejected, match=r"^malformed: ") as info:
        Reveal.from_json(body)
    assert info.value.reason == "malformed"


def test_bad_terms_refused() -> None:
    with pytest.raises(TaskError, match="unknown task state"):
        terms("open")
    with pytest.raises(TaskError, match="budget"):
        terms(budget=0)
    with pytest.raises(TaskError, match="out of order"):
        SealedTerms("t", Wei(1), "bidding", T0, T0 - timedelta(seconds=1), T0)
    with pytest.raises(TaskError, match="time zone"):
        SealedTerms("t", Wei(1), "bidding", datetime(2026, 1, 1), T0, T0)


# -- forfeits ---------------------------------------------------------------------------------


def test_forfeited_are_committed_never_revealed_in_commitment_order() -> None:
    carol = Ed25519Signer(bytes([3]) * 32)
    commitments = [commit_bid(s, "task-1", Wei(5), SALT) for s in (BOB, ALICE, carol)]
    reveals = [reveal_bid(ALICE, "task-1", Wei(5), SALT)]
    assert forfeited(commitments, reveals) == [BOB.did, carol.did]
    assert forfeited(commitments, []) == [BOB.did, ALICE.did, carol.did]
    assert forfeited([], reveals) == []


# -- properties -------------------------------------------------------------------------------

signers = st.sampled_from([ALICE, BOB])
task_ids = st.text(min_size=1, max_size=20)
prices = st.integers(min_value=0, max_value=2**256 - 1)
salts = st.binary(min_size=16, max_size=64)


@settings(max_examples=60, deadline=None)
@given(signer=signers, task_id=task_ids, price=prices, salt=salts)
def test_commitment_and_reveal_round_trip_through_json(
    signer: Ed25519Signer, task_id: str, price: int, salt: bytes
) -> None:
    commitment = commit_bid(signer, task_id, Wei(price), salt)
    reveal = reveal_bid(signer, task_id, Wei(price), salt)
    assert Commitment.from_json(commitment.to_json()) == commitment
    assert Reveal.from_json(reveal.to_json()) == reveal
    # JSON bodies are canonicalizable (prices as strings, beyond 2**53)
    canonical_json(commitment.to_json())
    canonical_json(reveal.to_json())


@settings(max_examples=60, deadline=None)
@given(signer=signers, price=st.integers(min_value=0, max_value=10**6), salt=salts)
def test_every_honest_bid_within_budget_is_admitted(
    signer: Ed25519Signer, price: int, salt: bytes
) -> None:
    commitment = commit_bid(signer, "task-1", Wei(price), salt)
    admit_commitment(commitment)
    reveal = reveal_bid(signer, "task-1", Wei(price), salt)
    if price <= 1000:
        admit_reveal(reveal, commitment)
    else:
        with rejected("over-budget", "exceeds the budget"):
            admit_reveal(reveal, commitment)


@settings(max_examples=60, deadline=None)
@given(price=prices, other=prices, salt=salts, other_salt=salts)
def test_a_reveal_opens_only_its_own_commitment(
    price: int, other: int, salt: bytes, other_salt: bytes
) -> None:
    commitment = commit_bid(ALICE, "task-1", Wei(price), salt)
    reveal = reveal_bid(ALICE, "task-1", Wei(other), other_salt)
    wide = terms("revealing", budget=2**256)
    if (price, salt) == (other, other_salt):
        admit_reveal(reveal, commitment, terms=wide)
    else:
        with rejected("mismatch", "do not open"):
            admit_reveal(reveal, commitment, terms=wide)
