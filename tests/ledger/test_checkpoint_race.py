"""Two processes checkpointing the same size at the same moment (two settlers anchoring after
the same entry, on SQLite and PostgreSQL): each read that no checkpoint of that size is
stored, each signed its own (their times differ), and the second insert finds the first's
row. It must not fail (it did: a StoreError out of the settler's anchoring, which ended one of
four settlers early), and both hand out the checkpoint stored first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.errors import StoreError
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from tests.ledger.conftest import START, EntryMaker, append_signed


def read_before_the_other_stored(store: LogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """`store`'s first read of a checkpoint finds none, as when it read just before the other
    process stored one (the interleaving the race needs, made certain)."""
    real = store.checkpoint
    reads: list[int] = []

    def checkpoint(size: int) -> Any:
        reads.append(size)
        return None if len(reads) == 1 else real(size)

    monkeypatch.setattr(store, "checkpoint", checkpoint)


def test_a_checkpoint_stored_by_another_process_meanwhile_is_the_one_handed_out(
    open_store: Callable[..., LogStore],
    maker: EntryMaker,
    operator: Ed25519Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = open_store(), open_store()
    append_signed(first, maker, 5)
    stored_first = take_checkpoint(first, operator, START)
    read_before_the_other_stored(second, monkeypatch)
    taken = take_checkpoint(second, operator, START + timedelta(seconds=1))
    assert taken.data == stored_first.data
    assert [c.data for c in first.checkpoints()] == [stored_first.data]


def test_another_root_stored_meanwhile_is_still_refused(
    open_store: Callable[..., LogStore],
    maker: EntryMaker,
    operator: Ed25519Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = open_store(), open_store()
    append_signed(first, maker, 5)
    stored = take_checkpoint(first, operator, START)
    read_before_the_other_stored(second, monkeypatch)
    with pytest.raises(StoreError, match="different checkpoint"):
        second.save_checkpoint(5, b"\x01" * 32, stored.checkpoint.at, stored.data)
