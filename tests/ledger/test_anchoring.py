"""Anchoring through the in-memory chain: record, send, reconcile, never twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accord.ledger.anchor_journal import AnchorJournal
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.database import make_engine
from accord.ledger.errors import ChainUnavailableError
from accord.ledger.events import make_entry
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.verify import verify_log

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def setup(tmp_path: Path) -> tuple[LogStore, MemoryAnchorChain, Anchorer, Ed25519Signer, Clock]:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "test-log")
    chain = MemoryAnchorChain()
    operator = Ed25519Signer(bytes(range(32)))
    clock = Clock()
    anchorer = Anchorer(
        store, chain, operator, clock, every_entries=10, every_seconds=60, receipt_timeout=0.05
    )
    return store, chain, anchorer, operator, clock


def _append(store: LogStore, signer: Ed25519Signer, count: int) -> None:
    first = (store.last_seq(signer.did) or 0) + 1
    store.append_batch(
        [make_entry(signer, kind="note.added", seq=first + i, at=START) for i in range(count)]
    )


def test_anchor_confirms_and_is_not_repeated(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    assert anchorer.anchor_latest().status == "empty"
    _append(store, operator, 3)
    outcome = anchorer.anchor_latest()
    assert outcome.status == "confirmed" and outcome.size == 3
    assert chain.root_at("test-log", 3) == store.root(3)
    assert anchorer.anchor_latest().status == "already-anchored"
    assert len(chain.anchors("test-log")) == 1
    assert [a.status for a in anchorer.journal.records()] == ["confirmed"]


def test_chain_down_loses_nothing_and_anchors_later(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    _append(store, operator, 4)
    chain.available = False
    with pytest.raises(ChainUnavailableError, match="does not answer"):
        anchorer.anchor_latest()
    _append(store, operator, 2)  # appends never need the chain
    assert store.size() == 6
    chain.available = True
    outcome = anchorer.anchor_latest()
    assert (outcome.status, outcome.size) == ("confirmed", 6)
    assert verify_log(store, operator.did, chain).ok


def test_lost_broadcast_reply_is_reconciled_not_resent_with_new_nonce(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    _append(store, operator, 5)
    chain.lose_broadcast_replies = 1  # the tx reaches the node, the reply is lost
    with pytest.raises(ChainUnavailableError):
        anchorer.anchor_latest()
    [pending] = anchorer.journal.pending()
    outcome = anchorer.anchor_latest()
    assert outcome.status == "confirmed"
    assert outcome.tx_hash == pending.tx_hash  # the same signed transaction, not a new one
    assert len(chain.anchors("test-log")) == 1


def test_unmined_transaction_is_rebroadcast_byte_for_byte(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    _append(store, operator, 5)
    chain.auto_mine = False
    outcome = anchorer.anchor_latest()
    assert outcome.status == "pending"
    # A crash here, then a restart: a new Anchorer over the same store.
    restarted = Anchorer(store, chain, operator, anchorer.clock, receipt_timeout=0.05)
    chain.auto_mine = True
    again = restarted.anchor_latest()
    assert again.status == "confirmed" and again.tx_hash == outcome.tx_hash
    assert chain.account_nonce(latest=True) == 1  # exactly one transaction was ever mined


def test_crash_before_broadcast_sends_the_recorded_transaction(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    _append(store, operator, 7)
    chain.available = True
    # Simulate a crash right after the record step: build and record, never send.
    tx = chain.build_anchor_tx("test-log", 7, store.root(7))
    from accord.ledger.anchor_journal import AnchorRecord

    anchorer.journal.add(
        AnchorRecord(
            7,
            store.root(7),
            "pending",
            31337,
            chain.registry_address(),
            tx.nonce,
            tx.tx_hash,
            tx.raw,
            None,
            "2026-11-29T12:00:00.000Z",
        )
    )
    outcome = anchorer.anchor_latest()
    assert outcome.status == "confirmed" and outcome.tx_hash == tx.tx_hash
    assert [a.size for a in chain.anchors("test-log")] == [7]


def test_pending_whose_nonce_was_spent_elsewhere_is_dropped_then_anchored_fresh(setup) -> None:
    store, chain, anchorer, operator, _ = setup
    _append(store, operator, 3)
    chain.auto_mine = False
    pending = anchorer.anchor_latest()
    assert pending.status == "pending"
    # Another transaction of the operator's account takes the nonce (e.g. a manual anchor
    # of another log); ours can never be mined now.
    chain._mempool.clear()  # the node dropped ours...
    other = chain.build_anchor_tx("other-log", 1, b"\x01" * 32)  # ...and the nonce went here
    assert other.nonce == pending_nonce(anchorer.journal)
    chain.broadcast(other)
    chain.mine()
    chain.auto_mine = True
    [dropped] = anchorer.reconcile()
    assert dropped.status == "dropped"  # the dead record is forgotten...
    final = anchorer.anchor_latest()  # ...and only then a fresh transaction is signed
    assert final.status == "confirmed" and final.tx_hash != pending.tx_hash
    assert [a.size for a in chain.anchors("test-log")] == [3]


def pending_nonce(journal: AnchorJournal) -> int:
    [record] = journal.pending()
    return record.nonce


def test_due_by_entries_and_by_time(setup) -> None:
    store, _chain, anchorer, operator, clock = setup
    assert not anchorer.due(clock())
    _append(store, operator, 3)
    assert not anchorer.due(clock())
    clock.now = START + timedelta(seconds=61)
    assert anchorer.due(clock())
    anchorer.anchor_latest()
    _append(store, operator, 9)
    assert not anchorer.due(clock())
    _append(store, operator, 1)
    assert anchorer.due(clock())  # 10 entries since the last anchor


def test_ledger_appends_through_a_chain_outage_and_records_why(setup) -> None:
    store, chain, anchorer, operator, clock = setup
    ledger = Ledger(store, operator, clock, anchorer)
    chain.available = False
    for _ in range(12):
        ledger.append(operator, "note.added", body={"text": "hi"})
    assert store.size() == 12
    assert isinstance(ledger.last_anchor_error, ChainUnavailableError)
    chain.available = True
    ledger.append(operator, "note.added")
    assert ledger.last_anchor_error is None
    assert chain.latest_size("test-log") == 13


# -- a public chain's faults (the journal engine over the in-memory chain) ----------------

GWEI = 10**9


def test_a_stuck_anchor_is_replaced_at_its_nonce_not_duplicated(tmp_path: Path) -> None:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "test-log")
    chain = MemoryAnchorChain()
    operator = Ed25519Signer(bytes(range(32)))
    clock = Clock()
    anchorer = Anchorer(store, chain, operator, clock, receipt_timeout=0, replace_after_s=30)
    _append(store, operator, 4)
    chain.auto_mine = False
    stuck = anchorer.anchor_latest()
    assert stuck.status == "pending"
    [record] = anchorer.journal.pending()
    old_fees = chain.fees_of(record.raw_tx)
    assert old_fees is not None
    chain.base_fee = 20 * GWEI  # the market rose above its maxFee: it will never be mined
    chain.mine()
    assert chain.receipt(stuck.tx_hash or b"") is None
    clock.now += timedelta(seconds=29)
    assert anchorer.reconcile()[0].tx_hash == stuck.tx_hash  # not stuck long enough yet
    clock.now += timedelta(seconds=1)
    [replaced] = anchorer.reconcile()
    [record] = anchorer.journal.pending()
    assert replaced.tx_hash == record.tx_hash != stuck.tx_hash
    assert record.nonce == stuck_nonce(chain, stuck.tx_hash)  # the same nonce
    new_fees = chain.fees_of(record.raw_tx)
    assert new_fees is not None and new_fees.max_fee * 8 >= old_fees.max_fee * 9
    assert new_fees.tip * 8 >= old_fees.tip * 9 and new_fees.max_fee >= 21 * GWEI
    chain.auto_mine = True
    final = anchorer.anchor_latest()
    assert final.status == "confirmed" and final.tx_hash == record.tx_hash
    assert [a.size for a in chain.anchors("test-log")] == [4]  # one anchor, one nonce
    assert chain.account_nonce(latest=True) == 1


def stuck_nonce(chain: MemoryAnchorChain, tx_hash: bytes | None) -> int:
    import json

    assert tx_hash is not None
    return min(json.loads(tx.raw)["nonce"] for tx in chain._mempool.values())


def test_fees_above_the_ceiling_record_and_send_nothing(tmp_path: Path) -> None:
    from accord.ledger.errors import FeesAboveCeilingError
    from accord.ledger.fees import FeePolicy

    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "test-log")
    chain = MemoryAnchorChain(fee_policy=FeePolicy(ceiling=5 * GWEI))
    operator = Ed25519Signer(bytes(range(32)))
    anchorer = Anchorer(store, chain, operator, Clock(), receipt_timeout=0)
    _append(store, operator, 2)
    chain.base_fee = 5 * GWEI
    with pytest.raises(FeesAboveCeilingError, match="ACCORD_MAX_FEE_GWEI"):
        anchorer.anchor_latest()
    assert anchorer.journal.records() == [] and chain.account_nonce(latest=False) == 0
    chain.base_fee = 2 * GWEI  # cheaper again: max fee = min(2 * 2 + 1, 5) gwei
    assert anchorer.anchor_latest().status == "confirmed"
    [record] = anchorer.journal.records()
    assert chain.fees_of(record.raw_tx) == fees(5 * GWEI, GWEI)


def fees(max_fee: int, tip: int) -> object:
    from accord.ledger.fees import Fees

    return Fees(max_fee, tip)


def test_a_reorganised_anchor_waiting_for_depth_is_sent_again_once(tmp_path: Path) -> None:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "test-log")
    chain = MemoryAnchorChain()
    operator = Ed25519Signer(bytes(range(32)))
    anchorer = Anchorer(store, chain, operator, Clock(), receipt_timeout=0, confirmations=2)
    _append(store, operator, 3)
    first = anchorer.anchor_latest()
    assert (first.status, first.block_number) == ("pending", 1)  # mined, not deep
    chain.rewind(0)  # a reorg takes its block away (and the mempool)
    again = anchorer.anchor_latest()
    assert again.status == "pending" and again.tx_hash == first.tx_hash  # the same bytes
    chain.mine_empty(2)
    done = anchorer.anchor_latest()
    assert done.status == "confirmed" and done.tx_hash == first.tx_hash
    assert [a.size for a in chain.anchors("test-log")] == [3]
