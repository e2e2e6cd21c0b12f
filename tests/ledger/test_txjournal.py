"""The journal engine's pure core: every decision `decide` can make, and the fee rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accord.ledger.chain import TxReceipt
from accord.ledger.errors import ChainError, FeesAboveCeilingError
from accord.ledger.fees import FeeMarket, FeePolicy, Fees, below_market, bumped_fees, fees_for
from accord.ledger.txjournal import (
    ChainFacts,
    Confirm,
    Drop,
    Fail,
    OnChain,
    Reorged,
    Replace,
    Resend,
    Reverted,
    Seen,
    SignAnew,
    Superseded,
    TxRules,
    TxView,
    Wait,
    decide,
)

GWEI = 10**9
TX = b"\x01" * 32
TWIN = b"\x02" * 32
OTHER = b"\x03" * 32
HASH_A = b"\xaa" * 32
HASH_B = b"\xbb" * 32
RULES = TxRules(confirmations=2, replace_after_s=60, fees=FeePolicy(ceiling=100 * GWEI))
RECORD = TxView(
    tx_hash=TX, sender="0xS", nonce=5, status="pending", sent_at=1000.0, fees=Fees(3 * GWEI, GWEI)
)
MARKET = FeeMarket(base_fee=GWEI, tip=GWEI)
UNMINED = ChainFacts(
    receipt=None,
    canonical_hash=None,
    head=100,
    nonce_latest=5,
    nonce_pending=6,
    known=True,
    on_chain=None,
    market=MARKET,
    now=1010.0,
)


def mined(block: int, *, ok: bool = True, block_hash: bytes = HASH_A) -> ChainFacts:
    receipt = TxReceipt(TX, block, ok, 50_000, block_hash)
    return replace(UNMINED, receipt=receipt, canonical_hash=HASH_A)


# -- mined -------------------------------------------------------------------------------


def test_mined_deep_enough_is_confirmed() -> None:
    assert decide(RECORD, mined(98), RULES) == Confirm(TX, 98)


def test_mined_but_shallow_is_seen_then_waits() -> None:
    assert decide(RECORD, mined(99), RULES) == Seen(99)
    assert decide(replace(RECORD, block_number=99), mined(99), RULES) == Wait()


def test_mined_in_another_block_after_a_reorg_is_seen_there() -> None:
    assert decide(replace(RECORD, block_number=97), mined(99), RULES) == Seen(99)


def test_a_receipt_whose_block_is_no_longer_canonical_is_a_reorg() -> None:
    facts = mined(98, block_hash=HASH_B)  # the node's canonical block at 98 is HASH_A
    assert decide(replace(RECORD, block_number=98), facts, RULES) == Reorged()


def test_a_reverted_receipt_is_reverted_or_superseded() -> None:
    assert decide(RECORD, mined(98, ok=False), RULES) == Reverted(98)
    beaten = replace(mined(98, ok=False), on_chain=OnChain(OTHER, 97, ours=False))
    assert decide(RECORD, beaten, RULES) == Superseded()


# -- its effect on the contract ----------------------------------------------------------


def test_our_effect_without_a_receipt_confirms_the_transaction_that_made_it() -> None:
    facts = replace(UNMINED, on_chain=OnChain(TWIN, 90, ours=True))
    assert decide(RECORD, facts, RULES) == Confirm(TWIN, 90)
    shallow = replace(UNMINED, on_chain=OnChain(TWIN, 99, ours=True))
    assert decide(RECORD, shallow, RULES) == Seen(99)


def test_an_effect_by_another_transaction_supersedes() -> None:
    facts = replace(UNMINED, on_chain=OnChain(OTHER, 90, ours=False))
    assert decide(RECORD, facts, RULES) == Superseded()


# -- not mined ---------------------------------------------------------------------------


def test_seen_mined_then_gone_is_a_reorg() -> None:
    assert decide(replace(RECORD, block_number=97), UNMINED, RULES) == Reorged()


def test_a_nonce_taken_by_another_transaction_drops_or_signs_anew() -> None:
    facts = replace(UNMINED, nonce_latest=6)
    assert decide(RECORD, facts, RULES) == Drop()
    assert decide(replace(RECORD, status="forgotten"), facts, RULES) == SignAnew()


def test_a_gap_before_its_nonce_drops_or_signs_anew() -> None:
    facts = replace(UNMINED, nonce_latest=3, nonce_pending=3, known=False)
    assert decide(RECORD, facts, RULES) == Drop()
    assert decide(replace(RECORD, status="forgotten"), facts, RULES) == SignAnew()


def test_unknown_to_the_node_is_sent_again_known_waits() -> None:
    assert decide(RECORD, replace(UNMINED, known=False), RULES) == Resend()
    assert decide(RECORD, UNMINED, RULES) == Wait()


def test_stuck_under_a_risen_base_fee_is_replaced_with_bumped_fees() -> None:
    facts = replace(UNMINED, market=FeeMarket(base_fee=10 * GWEI, tip=GWEI), now=1060.0)
    decision = decide(RECORD, facts, RULES)
    assert isinstance(decision, Replace)
    assert decision.fees.max_fee >= RECORD.fees.max_fee * 9 // 8  # type: ignore[union-attr]
    assert decision.fees.tip * 8 >= RECORD.fees.tip * 9  # type: ignore[union-attr]
    assert decision.fees.max_fee >= 10 * GWEI + decision.fees.tip


def test_not_stuck_before_its_time_nor_when_its_fees_suffice() -> None:
    risen = FeeMarket(base_fee=10 * GWEI, tip=GWEI)
    assert decide(RECORD, replace(UNMINED, market=risen, now=1059.0), RULES) == Wait()
    assert decide(RECORD, replace(UNMINED, now=5000.0), RULES) == Wait()
    unknown_fees = replace(RECORD, fees=None)
    assert decide(unknown_fees, replace(UNMINED, market=risen, now=5000.0), RULES) == Wait()


def test_stuck_with_no_room_under_the_ceiling_fails_typed() -> None:
    facts = replace(UNMINED, market=FeeMarket(base_fee=200 * GWEI, tip=GWEI), now=1060.0)
    decision = decide(RECORD, facts, RULES)
    assert isinstance(decision, Fail)
    assert isinstance(decision.error, FeesAboveCeilingError)
    assert isinstance(decision.error, ChainError)
    assert decision.error.ceiling == 100 * GWEI
    assert "fees above your ceiling" in str(decision.error)


# -- fees --------------------------------------------------------------------------------


def test_fees_are_twice_the_base_fee_plus_the_tip_capped_by_the_ceiling() -> None:
    policy = FeePolicy(ceiling=100 * GWEI)
    assert fees_for(FeeMarket(10 * GWEI, 2 * GWEI), policy) == Fees(22 * GWEI, 2 * GWEI)
    assert fees_for(FeeMarket(60 * GWEI, 2 * GWEI), policy) == Fees(100 * GWEI, 2 * GWEI)
    with pytest.raises(FeesAboveCeilingError) as caught:
        fees_for(FeeMarket(99 * GWEI, 2 * GWEI), policy)
    assert caught.value.needed == 101 * GWEI


def test_below_market() -> None:
    assert below_market(Fees(GWEI, GWEI), FeeMarket(GWEI, GWEI))
    assert below_market(Fees(10 * GWEI, GWEI), FeeMarket(GWEI, 2 * GWEI))
    assert not below_market(Fees(3 * GWEI, GWEI), FeeMarket(GWEI, GWEI))


@given(
    max_fee=st.integers(1, 10**12),
    tip=st.integers(0, 10**12),
    base=st.integers(0, 10**12),
    market_tip=st.integers(0, 10**11),
    ceiling=st.integers(1, 10**13),
)
def test_a_replacement_is_at_least_an_eighth_higher_and_never_above_the_ceiling(
    max_fee: int, tip: int, base: int, market_tip: int, ceiling: int
) -> None:
    old = Fees(max_fee, min(tip, max_fee))
    market = FeeMarket(base, market_tip)
    try:
        new = bumped_fees(old, market, FeePolicy(ceiling=ceiling))
    except FeesAboveCeilingError as exc:
        assert exc.ceiling == ceiling and exc.needed > ceiling
        return
    assert new.max_fee * 8 >= old.max_fee * 9 and new.tip * 8 >= old.tip * 9
    assert new.max_fee <= ceiling and new.tip <= new.max_fee
    assert new.max_fee >= market.base_fee + new.tip


def test_bad_rules_and_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="confirmations"):
        TxRules(confirmations=-1)
    with pytest.raises(ValueError, match="replace_after_s"):
        TxRules(replace_after_s=-1)
    with pytest.raises(ValueError, match="ceiling"):
        FeePolicy(ceiling=0)
    with pytest.raises(ValueError, match="tip"):
        FeePolicy(ceiling=10, default_tip=11)


def test_nothing_is_decided_on_nonces_that_were_not_read() -> None:
    facts = replace(UNMINED, nonce_latest=None, nonce_pending=None, known=False)
    assert decide(RECORD, facts, RULES) == Wait()


def test_fees_above_the_ceiling_are_named_in_exact_gwei_with_their_own_problem_kind() -> None:
    from accord.api.problems import domain_problem
    from accord.ledger.errors import gwei_text

    error = FeesAboveCeilingError(1_500_000_001, 500 * 10**9, "anchoring")
    assert "needs 1.500000001 gwei per gas" in str(error)
    assert "ACCORD_MAX_FEE_GWEI allows 500;" in str(error)
    assert [gwei_text(w) for w in (0, 1, 10**9, 2_500_000_000)] == ["0", "0.000000001", "1", "2.5"]
    problem = domain_problem(error)
    assert (problem.status, problem.kind) == (503, "fees-above-ceiling")
