"""The ledger as the rest of accord uses it: append signed events, checkpoint, anchor (and the
anchor journal, beside the log)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from accord.ledger.anchor_journal import AnchorJournal
from accord.ledger.canonical import JSONValue
from accord.ledger.checkpoint import SignedCheckpoint, take_checkpoint
from accord.ledger.errors import ChainError, SequenceError
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer, Signer
from accord.ledger.store import LogStore

if TYPE_CHECKING:
    from accord.ledger.anchoring import Anchorer, AnchorOutcome

_SEQ_RETRIES = 5


class Ledger:
    """Appends go to the store at once; anchoring follows when due and never blocks an append.

    `last_anchor_error` holds the chain error of the latest automatic attempt, if it failed;
    the entries are kept and the next attempt anchors them.
    """

    def __init__(
        self,
        store: LogStore,
        operator: Signer,
        clock: Callable[[], datetime],
        anchorer: Anchorer | None = None,
    ) -> None:
        self.store = store
        self.operator = operator
        self.clock = clock
        self.anchorer = anchorer
        self.last_anchor_error: ChainError | None = None
        self._anchoring = threading.Lock()
        self._anchor_journal: AnchorJournal | None = None

    @property
    def log_id(self) -> str:
        return self.store.log_id

    @property
    def anchor_journal(self) -> AnchorJournal:
        """The journal of the transactions that anchor the log's checkpoints (in the log's
        database): the anchorer's, or one opened on first use when there is none. Raises
        StoreError when its table cannot be prepared."""
        if self.anchorer is not None:
            return self.anchorer.journal
        if self._anchor_journal is None:
            self._anchor_journal = AnchorJournal(self.store.engine)
        return self._anchor_journal

    def next_seq(self, actor: str) -> int:
        last = self.store.last_seq(actor)
        return 1 if last is None else last + 1

    def append(
        self,
        signer: Signer,
        kind: str,
        *,
        subject: str = "",
        body: Mapping[str, JSONValue] | None = None,
        once_key: str | None = None,
    ) -> tuple[int, Entry]:
        """Sign an event as `signer` with its next seq and append it; returns (index, entry).
        The seq is taken and the event signed under the log's head lock (`LogStore.append_next`),
        so writers in other processes never take it first. With `once_key`, no second event of
        `kind` under that key is ever appended (see `LogStore.append_batch`).

        A signer that is not a local Ed25519 key (a remote agent's endpoint) signs outside
        the lock instead, with the seq read before, and again when another writer took it.

        Raises MalformedError or CanonicalizationError for a bad event, StoreError when the
        database fails, SequenceError when other writers keep taking a remote signer's seq,
        AlreadyLoggedError when the event is once per subject or key and already logged.
        """
        at = self.clock()

        def make(seq: int) -> Entry:
            return make_entry(signer, kind=kind, seq=seq, at=at, subject=subject, body=body)

        if isinstance(signer, Ed25519Signer):
            # A key held here signs in microseconds: under the head lock, with the seq it knows.
            index, entry = self.store.append_next(signer.did, make, once_key=once_key)
            self.auto_anchor(index + 1)
            return index, entry
        # A signer elsewhere (a remote agent's endpoint) may take seconds, which no writer
        # should wait for: it signs outside the lock, and signs again if the seq was taken.
        for attempt in range(_SEQ_RETRIES):
            entry = make(self.next_seq(signer.did))
            try:
                (index,) = self.append_entries([entry], once_keys=[once_key])
                return index, entry
            except SequenceError:
                if attempt == _SEQ_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def append_entries(
        self, entries: Sequence[Entry], *, once_keys: Sequence[str | None] = ()
    ) -> list[int]:
        """Append already signed entries in one transaction, then anchor if due (the store's
        `append_batch`, which says what is raised)."""
        indices = self.store.append_batch(entries, once_keys=once_keys)
        self.auto_anchor(indices[-1] + 1 if indices else None)
        return indices

    def checkpoint(self) -> SignedCheckpoint:
        """A signed, stored checkpoint of the current log."""
        return take_checkpoint(self.store, self.operator, self.clock())

    def auto_anchor(self, size: int | None = None) -> AnchorOutcome | None:
        """Anchor when N entries or T seconds have passed; a chain error is kept, not raised.
        `size`: the log's size when the caller knows it (an append just reached it). One
        thread of a process anchors at a time; another that finds it due meanwhile leaves it
        to that one (and to the next append)."""
        if self.anchorer is None or not self.anchorer.due(self.clock(), size):
            return None
        if not self._anchoring.acquire(blocking=False):
            return None  # another thread of this process is anchoring: the next append looks
        try:
            outcome = self.anchorer.anchor_latest()
        except ChainError as exc:
            self.last_anchor_error = exc
            return None
        finally:
            self._anchoring.release()
        self.last_anchor_error = None
        return outcome
