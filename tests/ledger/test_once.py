"""Once-per-subject kinds: the store refuses a second one from any writer, and a log written
before the guard existed is indexed when opened. Anchors the chain forgot are sent again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.errors import AlreadyLoggedError
from accord.ledger.events import make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.verify import verify_log
from tests.ledger.conftest import LOG_ID, START


def settled(signer: Ed25519Signer, seq: int, subject: str = "task-1") -> object:
    return make_entry(
        signer,
        kind="task.settled",
        seq=seq,
        at=START + timedelta(seconds=seq),
        subject=subject,
        body={"n": seq},
    )


def test_a_second_once_only_event_is_refused_and_nothing_is_written(
    open_store: Callable[..., LogStore], operator: Ed25519Signer
) -> None:
    first, second = open_store(), open_store()  # two writers, as two processes
    assert first.append(settled(operator, 1)) == 0  # type: ignore[arg-type]
    with pytest.raises(AlreadyLoggedError) as caught:
        second.append(settled(operator, 2))  # type: ignore[arg-type]
    assert (caught.value.kind, caught.value.subject, caught.value.index) == (
        "task.settled",
        "task-1",
        0,
    )
    assert first.size() == second.size() == 1
    assert second.append(settled(operator, 3, subject="task-2")) == 1  # type: ignore[arg-type]
    assert first.once_logged("task.settled", "task-2") == 1


def test_a_batch_repeating_a_once_only_event_is_refused_whole(
    store: LogStore, operator: Ed25519Signer
) -> None:
    with pytest.raises(AlreadyLoggedError):
        store.append_batch([settled(operator, 1), settled(operator, 2)])  # type: ignore[list-item]
    assert store.size() == 0


def test_a_log_written_before_the_guard_is_indexed_and_keeps_its_first(
    open_engine: Callable[[], Engine], operator: Ed25519Signer
) -> None:
    legacy = LogStore(open_engine(), LOG_ID, once_per_subject=())
    legacy.append_batch([settled(operator, 1), settled(operator, 2)])  # type: ignore[list-item]
    guarded = LogStore(open_engine(), LOG_ID)  # today's code opening yesterday's log
    assert guarded.once_logged("task.settled", "task-1") == 0
    with pytest.raises(AlreadyLoggedError):
        guarded.append(settled(operator, 3))  # type: ignore[arg-type]
    assert guarded.size() == 2


def test_an_anchor_the_chain_forgot_is_sent_again_once(
    store: LogStore, operator: Ed25519Signer, maker: object
) -> None:
    from tests.ledger.conftest import append_signed

    chain = MemoryAnchorChain()
    anchorer = Anchorer(store, chain, operator, lambda: START, receipt_timeout=0)
    append_signed(store, maker, 5)  # type: ignore[arg-type]
    assert anchorer.anchor_latest().status == "confirmed"
    chain.rewind(0)  # the node restarts from a state saved before that block
    report = verify_log(store, operator.did, chain)
    assert not report.ok and report.first_failure is not None
    assert report.first_failure.number == 5

    outcome = anchorer.anchor_latest()
    assert outcome.status == "confirmed" and outcome.size == 5
    assert [a.size for a in chain.anchors(LOG_ID)] == [5]
    assert verify_log(store, operator.did, chain).ok
    assert anchorer.anchor_latest().status == "already-anchored"  # not sent a second time
    assert len(chain.anchors(LOG_ID)) == 1


def test_a_forgotten_anchor_is_sent_again_before_the_newer_checkpoint(
    store: LogStore, operator: Ed25519Signer, maker: object
) -> None:
    from tests.ledger.conftest import append_signed

    chain = MemoryAnchorChain()
    anchorer = Anchorer(store, chain, operator, lambda: START, receipt_timeout=0)
    append_signed(store, maker, 3)  # type: ignore[arg-type]
    anchorer.anchor_latest()
    append_signed(store, maker, 3)  # type: ignore[arg-type]
    chain.rewind(0)
    assert anchorer.anchor_latest().size == 6
    assert [a.size for a in chain.anchors(LOG_ID)] == [3, 6]
    assert [(a.size, a.status) for a in anchorer.journal.records()] == [
        (3, "confirmed"),
        (6, "confirmed"),
    ]
    assert verify_log(store, operator.did, chain).ok


def test_confirmation_waits_for_the_configured_depth(
    store: LogStore, operator: Ed25519Signer, maker: object
) -> None:
    from tests.ledger.conftest import append_signed

    chain = MemoryAnchorChain()
    anchorer = Anchorer(store, chain, operator, lambda: START, receipt_timeout=0, confirmations=2)
    append_signed(store, maker, 2)  # type: ignore[arg-type]
    assert anchorer.anchor_latest().status == "pending"
    assert [a.status for a in anchorer.journal.records()] == ["pending"]
    chain.mine_empty(2)
    assert anchorer.anchor_latest().status == "confirmed"
    assert [a.status for a in anchorer.journal.records()] == ["confirmed"]


def committed(signer: Ed25519Signer, seq: int, subject: str = "task-1") -> object:
    return make_entry(
        signer,
        kind="bid.committed",
        seq=seq,
        at=START + timedelta(seconds=seq),
        subject=subject,
        body={"n": seq},
    )


def test_a_once_key_refuses_a_second_entry_of_its_kind_from_any_writer(
    open_store: Callable[..., LogStore], operator: Ed25519Signer
) -> None:
    first, second = open_store(), open_store()  # two writers, as two processes
    assert first.append_batch([committed(operator, 1)], once_keys=["task-1 ada"]) == [0]  # type: ignore[list-item]
    with pytest.raises(AlreadyLoggedError) as caught:
        second.append_batch([committed(operator, 2)], once_keys=["task-1 ada"])  # type: ignore[list-item]
    assert (caught.value.kind, caught.value.subject, caught.value.index) == (
        "bid.committed",
        "task-1 ada",
        0,
    )
    # other keys, and entries without a key, are not held back; nothing failed was written
    assert second.append_batch(
        [committed(operator, 3), committed(operator, 4)],  # type: ignore[list-item]
        once_keys=["task-1 bob", None],
    ) == [1, 2]
    assert second.append(committed(operator, 5)) == 3  # type: ignore[arg-type]
    assert first.size() == 4
    assert first.once_logged("bid.committed", "task-1 bob") == 1


def test_a_batch_repeating_a_once_key_is_refused_whole_and_keys_must_match_entries(
    store: LogStore, operator: Ed25519Signer
) -> None:
    batch = [committed(operator, 1), committed(operator, 2)]
    with pytest.raises(AlreadyLoggedError):
        store.append_batch(batch, once_keys=["k", "k"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 entries"):
        store.append_batch(batch, once_keys=["k"])  # type: ignore[arg-type]
    assert store.size() == 0
