"""The escrow seam and its crash-safe actions on MemoryEscrowChain (same rules as TaskEscrow).

The same state machine as on anvil (tests/integration/test_escrow_chain.py) runs here too.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from web3 import Web3

from accord.ledger.errors import ChainError, ChainUnavailableError
from accord.market.escrow import (
    EscrowActions,
    EscrowIntent,
    EscrowPendingError,
    EscrowRefusedError,
    EscrowState,
    EscrowTxRejectedError,
    MemoryEscrowChain,
    MemoryEscrowJournal,
    SqlEscrowJournal,
    address_of,
    open_intent,
    pay_out_intent,
    refund_intent,
    task_id_hash,
    withdraw_intent,
)
from tests.integration.test_escrow_chain import (
    ADDR,
    OPERATOR,
    OTHER,
    PAYEE_A,
    REQUESTER,
    Harness,
    run_state_machine,
)
from tests.ledger.conftest import postgres_schema_url
from tests.rpc_stand_in import serving

DAY = 86_400


@pytest.fixture
def chain() -> MemoryEscrowChain:
    return MemoryEscrowChain(ADDR[0])


def do(chain: MemoryEscrowChain, key: str, intent: EscrowIntent) -> None:
    tx = chain.build_tx(key, intent)
    chain.broadcast(tx)
    receipt = chain.receipt(tx.tx_hash)
    assert receipt is not None and receipt.status_ok


def reason(chain: MemoryEscrowChain, key: str, intent: EscrowIntent) -> str:
    with pytest.raises(EscrowRefusedError) as caught:
        chain.build_tx(key, intent)
    return caught.value.reason


def test_task_id_hash_is_keccak_of_the_utf8_id() -> None:
    assert task_id_hash("t-1") == bytes(Web3.keccak(text="t-1"))


def test_intent_json_round_trips_big_amounts() -> None:
    intent = pay_out_intent("t", [ADDR[3]], [2**200])
    assert EscrowIntent.from_json(intent.to_json()) == intent


def test_happy_path_and_events(chain: MemoryEscrowChain) -> None:
    deadline = chain.timestamp + DAY
    do(chain, REQUESTER, open_intent("t", 1_000, deadline))
    do(chain, OPERATOR, pay_out_intent("t", [ADDR[3]], [700]))
    assert (chain.credit(ADDR[3]), chain.credit(ADDR[1]), chain.balance()) == (700, 300, 1_000)
    do(chain, PAYEE_A, withdraw_intent())
    assert (chain.credit(ADDR[3]), chain.balance()) == (0, 300)
    do(chain, REQUESTER, open_intent("u", 50, deadline))
    chain.advance_time(2 * DAY)
    do(chain, REQUESTER, refund_intent("u"))
    record = chain.escrow("u")
    assert record is not None and record.state == EscrowState.REFUNDED
    assert chain.credit(ADDR[1]) == 350
    assert [e.name for e in chain.events()] == [
        "Opened",
        "Settled",
        "Withdrawn",
        "Opened",
        "Refunded",
    ]
    assert [e.name for e in chain.events("t")] == ["Opened", "Settled"]


def test_every_rule(chain: MemoryEscrowChain) -> None:
    deadline = chain.timestamp + DAY
    assert reason(chain, REQUESTER, open_intent("t", 0, deadline)) == "ZeroDeposit"
    assert reason(chain, REQUESTER, open_intent("t", 1, chain.timestamp)) == "DeadlineNotInFuture"
    do(chain, REQUESTER, open_intent("t", 100, deadline))
    assert reason(chain, OTHER, open_intent("t", 1, deadline)) == "AlreadyOpened"
    assert reason(chain, REQUESTER, pay_out_intent("t", [], [])) == "NotOperator"
    assert reason(chain, OPERATOR, pay_out_intent("t", [ADDR[3]], [101])) == "OverDeposit"
    assert reason(chain, OPERATOR, EscrowIntent("settle", "t", payees=(ADDR[3],))) == (
        "LengthMismatch"
    )
    assert reason(chain, REQUESTER, refund_intent("t")) == "DeadlineNotReached"
    chain.advance_time(DAY)
    assert reason(chain, OTHER, refund_intent("t")) == "NotRequester"
    do(chain, REQUESTER, refund_intent("t"))
    assert reason(chain, REQUESTER, refund_intent("t")) == "NotOpen"
    assert reason(chain, OPERATOR, pay_out_intent("t", [], [])) == "NotOpen"
    do(chain, REQUESTER, open_intent("s", 100, chain.timestamp + DAY))
    do(chain, OPERATOR, pay_out_intent("s", [], []))
    assert reason(chain, OPERATOR, pay_out_intent("s", [], [])) == "NotOpen"
    chain.advance_time(2 * DAY)
    assert reason(chain, REQUESTER, refund_intent("s")) == "NotOpen"
    assert reason(chain, PAYEE_A, withdraw_intent()) == "NothingToWithdraw"


def test_a_lost_broadcast_reply_is_reconciled(chain: MemoryEscrowChain) -> None:
    journal = MemoryEscrowJournal()
    chain.lose_broadcast_replies = 1
    with pytest.raises(ChainUnavailableError):
        EscrowActions(chain, journal).open(REQUESTER, "t", 10, chain.timestamp + DAY)
    [record] = journal.pending()
    [outcome] = EscrowActions(chain, journal).reconcile()
    assert outcome.status == "confirmed" and outcome.tx_hash == record.tx_hash
    assert chain.balance() == 10 and journal.pending() == []


def test_one_unresolved_transaction_per_account(chain: MemoryEscrowChain) -> None:
    journal = MemoryEscrowJournal()
    actions = EscrowActions(chain, journal, receipt_timeout=0)
    chain.auto_mine = False
    first = actions.open(REQUESTER, "t", 10, chain.timestamp + DAY)
    assert first.status == "pending"
    assert actions.open(REQUESTER, "t", 10, chain.timestamp + DAY).status == "pending"
    with pytest.raises(EscrowPendingError):
        actions.open(REQUESTER, "u", 10, chain.timestamp + DAY)
    chain.mine()
    chain.auto_mine = True
    assert [o.status for o in actions.reconcile()] == ["confirmed"]
    assert actions.open(REQUESTER, "t", 10, first.intent.deadline).status == "already-done"
    assert chain.balance() == 10


def test_a_taken_nonce_is_rejected_by_the_node(chain: MemoryEscrowChain) -> None:
    chain.auto_mine = False
    a = chain.build_tx(REQUESTER, open_intent("a", 1, chain.timestamp + DAY))
    b = chain.build_tx(REQUESTER, open_intent("b", 1, chain.timestamp + DAY))
    chain.broadcast(a)
    chain.broadcast(a)  # idempotent
    with pytest.raises(EscrowTxRejectedError):
        chain.broadcast(b)


def test_a_down_chain_raises_unavailable(chain: MemoryEscrowChain) -> None:
    chain.available = False
    with pytest.raises(ChainUnavailableError):
        EscrowActions(chain, MemoryEscrowJournal()).withdraw(PAYEE_A)


def test_sql_journal_survives_a_restart(chain: MemoryEscrowChain, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'market.db'}")
    actions = EscrowActions(chain, SqlEscrowJournal(engine))
    actions.open(REQUESTER, "t", 500, chain.timestamp + DAY)
    record = actions.record(OPERATOR, pay_out_intent("t", [ADDR[3]], [400]))  # then "crash"
    restarted = EscrowActions(chain, SqlEscrowJournal(engine))
    [outcome] = restarted.reconcile()
    assert outcome.status == "confirmed" and outcome.tx_hash == record.tx_hash
    assert restarted.pay_out(OPERATOR, "t", [ADDR[3]], [400]).status == "already-done"
    statuses = [(r.intent.kind, r.status) for r in restarted.journal.records("t")]
    assert statuses == [("open", "confirmed"), ("settle", "confirmed")]
    assert (chain.credit(ADDR[3]), chain.credit(ADDR[1])) == (400, 100)


def test_state_machine_with_crashes_in_memory(chain: MemoryEscrowChain) -> None:
    def pass_time() -> None:
        chain.advance_time(10_000)

    def steal(key: str, nonce: int) -> None:
        assert chain.account_nonce(address_of(key), latest=True) == nonce
        chain.spend_nonce(address_of(key))

    def now() -> int:
        return chain.timestamp

    def block_number() -> int:
        return max((e.block_number for e in chain.events()), default=0)

    harness = Harness(chain, pass_time, steal, now, block_number)
    stats = run_state_machine(harness, runs=300, seed=11)
    assert stats.get("confirmed", 0) > 100 and stats.get("dropped", 0) > 10
    assert stats.get("answer confirmed", 0) > 10 and stats.get("answer dropped", 0) > 0


# -- a public chain's faults (the journal engine over the in-memory chain) ----------------

GWEI = 10**9


class Seconds:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _stuck_settle(chain: MemoryEscrowChain) -> tuple[EscrowActions, Seconds, bytes]:
    clock = Seconds()
    actions = EscrowActions(
        chain, MemoryEscrowJournal(), receipt_timeout=0, replace_after_s=60, clock=clock
    )
    actions.open(REQUESTER, "t", 500, chain.timestamp + DAY)
    chain.auto_mine = False
    pending = actions.pay_out(OPERATOR, "t", [ADDR[3]], [400])
    assert pending.status == "pending" and pending.tx_hash is not None
    chain.base_fee = 30 * GWEI  # the market rose above its maxFee
    chain.mine()
    clock.now += 60
    return actions, clock, pending.tx_hash


def test_a_stuck_settle_is_replaced_at_its_nonce_and_paid_once(chain: MemoryEscrowChain) -> None:
    actions, _clock, stuck = _stuck_settle(chain)
    [replaced] = actions.reconcile()
    assert replaced.status == "pending" and replaced.tx_hash != stuck
    old, new = actions.journal.records("t")[1:]
    assert (old.status, new.status) == ("replaced", "pending") and old.nonce == new.nonce
    old_fees, new_fees = chain.fees_of(old.raw), chain.fees_of(new.raw)
    assert old_fees is not None and new_fees is not None
    assert new_fees.max_fee * 8 >= old_fees.max_fee * 9 and new_fees.tip * 8 >= old_fees.tip * 9
    chain.mine()
    [done] = actions.reconcile()
    assert done.status == "confirmed" and done.tx_hash == new.tx_hash
    assert chain.receipt(stuck) is None  # only one of the two was ever mined
    assert [e.name for e in chain.events("t")] == ["Opened", "Settled"]
    assert chain.credit(ADDR[3]) == 400


def test_when_the_replaced_twin_is_mined_the_journal_follows_it(chain: MemoryEscrowChain) -> None:
    actions, _clock, stuck = _stuck_settle(chain)
    actions.reconcile()  # replaced by a better-paid twin...
    old, new = actions.journal.records("t")[1:]
    chain._mempool.clear()
    chain._mempool[old.tx_hash] = (old.signed(), old.intent)  # ...but the old one is mined
    chain.base_fee = GWEI
    chain.mine()
    [done] = actions.reconcile()
    assert done.status == "confirmed" and done.tx_hash == stuck
    statuses = {r.tx_hash: r.status for r in actions.journal.records("t")}
    assert (statuses[old.tx_hash], statuses[new.tx_hash]) == ("confirmed", "replaced")
    assert actions.pay_out(OPERATOR, "t", [ADDR[3]], [400]).status == "already-done"
    assert chain.credit(ADDR[3]) == 400


def test_a_stuck_settle_under_the_ceiling_fails_typed_and_sends_nothing_more() -> None:
    from accord.ledger.errors import FeesAboveCeilingError
    from accord.ledger.fees import FeePolicy

    chain = MemoryEscrowChain(ADDR[0], fee_policy=FeePolicy(ceiling=20 * GWEI))
    actions, _clock, stuck = _stuck_settle(chain)
    with pytest.raises(FeesAboveCeilingError, match="fees above your ceiling"):
        actions.reconcile()
    [record] = actions.journal.pending()
    assert record.tx_hash == stuck and len(actions.journal.records("t")) == 2
    with pytest.raises(FeesAboveCeilingError):  # nothing new is signed for a new action
        actions.open(REQUESTER, "u", 1, chain.timestamp + DAY)
    assert [r.intent.task_id for r in actions.journal.records()] == ["t", "t"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_old_journal_table_gains_sent_at_and_keeps_its_records(
    chain: MemoryEscrowChain, tmp_path: Path, backend: str
) -> None:
    from contextlib import nullcontext

    from sqlalchemy import text

    from accord.ledger.database import make_engine
    from tests.ledger.conftest import postgres_schema_url

    where = (
        nullcontext(f"sqlite:///{tmp_path / 'old.db'}")
        if backend == "sqlite"
        else postgres_schema_url()
    )
    with where as url:
        engine = make_engine(url)
        try:
            actions = EscrowActions(chain, SqlEscrowJournal(engine))
            actions.open(REQUESTER, "t", 500, chain.timestamp + DAY)
            with engine.begin() as connection:  # the table as an older accord made it
                connection.execute(text("ALTER TABLE market_escrow_txs DROP COLUMN sent_at"))
            reopened = SqlEscrowJournal(engine)
            [record] = reopened.records("t")
            assert (record.status, record.sent_at) == ("confirmed", None)
            settled = EscrowActions(chain, reopened).pay_out(OPERATOR, "t", [ADDR[3]], [1])
            assert settled.status == "confirmed"
            assert reopened.records("t")[1].sent_at is not None
            SqlEscrowJournal(engine)  # opening it again changes nothing
        finally:
            engine.dispose()


def test_the_intact_mark_is_recorded_twice_and_the_last_wins(tmp_path: Path) -> None:
    journal = SqlEscrowJournal(create_engine(f"sqlite:///{tmp_path / 'market.db'}"))
    assert journal.intact_through() is None
    journal.record_intact(3, b"\x03" * 32)
    journal.record_intact(9, b"\x09" * 32)
    assert journal.intact_through() == (9, b"\x09" * 32)


@pytest.mark.postgres
def test_two_services_recording_the_intact_mark_at_once_both_succeed() -> None:
    """Services sharing one PostgreSQL database reconcile at the same time. One holds its
    uncommitted row; the other's record waits on the key, then, once the first commits,
    updates the row instead of failing on it (found by a run under load of
    test_forgetting.py: 'duplicate key value violates unique constraint')."""
    with postgres_schema_url() as url:
        first, second = create_engine(url), create_engine(url)
        try:
            SqlEscrowJournal(first)
            journal = SqlEscrowJournal(second)
            outcome: list[BaseException | None] = []
            with first.connect() as holder:
                holder.execute(
                    text(
                        "INSERT INTO market_escrow_intact (id, block_number, block_hash)"
                        " VALUES (1, 3, :hash)"
                    ),
                    {"hash": b"\x03" * 32},
                )  # the first service's transaction, not yet committed

                def record() -> None:
                    try:
                        journal.record_intact(9, b"\x09" * 32)
                        outcome.append(None)
                    except BaseException as exc:  # reported below, in the test's thread
                        outcome.append(exc)

                recorder = threading.Thread(target=record)
                recorder.start()
                while not _a_lock_is_awaited(holder):  # the record waits on the key
                    recorder.join(0.05)
                    assert recorder.is_alive(), outcome
                holder.commit()
                recorder.join()
            assert outcome == [None]
            assert journal.intact_through() == (9, b"\x09" * 32)
        finally:
            first.dispose()
            second.dispose()


def _a_lock_is_awaited(connection: Any) -> bool:
    """Whether a session waits on `connection`'s transaction (not merely any lock on the
    PostgreSQL the suite's workers share)."""
    return bool(
        connection.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
            )
        ).scalar()
    )


def test_an_escrow_state_the_contract_does_not_have_is_a_chain_error() -> None:
    """A node that answers `escrows` with state 9 (TaskEscrow has four): a ChainError naming
    the task, not a ValueError from the enum."""
    from eth_abi.abi import encode

    from accord.market.escrow.web3_chain import Web3EscrowChain

    with serving() as node:
        record = encode(["address", "uint256", "uint64", "uint8"], [ADDR[1], 10**18, 0, 9])
        node.answer = {"result": "0x" + record.hex()}
        chain = Web3EscrowChain(node.url, "0x5FbDB2315678afecb367f032d93F642f64180aa3")
        with pytest.raises(ChainError, match=r"task-x.* state 9"):
            chain.escrow("task-x")
        node.answer = {"result": "0x" + record[:-32].hex() + (1).to_bytes(32, "big").hex()}
        found = chain.escrow("task-x")
        assert found is not None and found.state == EscrowState.OPEN
        assert found.requester == ADDR[1] and found.deposit == 10**18
