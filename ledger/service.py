"""The ledger as the rest of accord uses it: append signed events, checkpoint, anchor (and the
anchor journal, beside the log)."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from accord.ledger.anchor_journal import AnchorJournal
from accord.ledger.canonical import JSONValue
from accord.ledger.checkpoint import SignedCheckpoint, take_checkpoint
from accord.ledger.errors import AccordError, ChainError, SequenceError
from accord.ledger.events import Entry
from accord.ledger.fast_entries import make_entry
from accord.ledger.signing import Ed25519Signer, Signer
from accord.ledger.store import LogStore

if TYPE_CHECKING:
    from accord.ledger.anchoring import Anchorer, AnchorOutcome

_SEQ_RETRIES = 5
MAX_ANCHOR_TICK_S = 5.0
"""The anchor timer looks at least this often whether the tail is due (`anchor_tick`)."""

log = logging.getLogger("accord.anchoring")


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

    def auto_anchor(self, size: int | None = None, *, ahead: float = 0.0) -> AnchorOutcome | None:
        """Anchor when N entries or T seconds have passed; a chain error is kept, not raised.
        `size`: the log's size when the caller knows it (an append just reached it); `ahead`:
        seconds early the T seconds may be counted as passed (the anchor timer's tick, so that
        it anchors within T rather than up to a tick after). One thread of a process anchors
        at a time; another that finds it due meanwhile leaves it to that one (and to the next
        append or tick)."""
        now = self.clock() + timedelta(seconds=ahead)
        if self.anchorer is None or not self.anchorer.due(now, size):
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


def anchor_tick(every_seconds: float) -> float:
    """How often the anchor timer looks whether the tail is due: a quarter of the anchoring
    interval, at most `MAX_ANCHOR_TICK_S` and at least 50 ms."""
    return min(MAX_ANCHOR_TICK_S, max(0.05, every_seconds / 4))


class Periodic(ABC):
    """Calls `run_once` every `every` seconds in a daemon thread named `name`, from `start`
    until `stop`. An expected failure (AccordError: the database or the chain away) is
    logged and the next period tries again; an unexpected one is logged with its traceback
    and retried too, so a bug never ends the worker silently. The service's background
    workers (the anchor timer, the market's lifecycle) are subclasses that say what one period
    does."""

    def __init__(self, name: str, every: float) -> None:
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.rounds = 0

    @abstractmethod
    def run_once(self) -> object:
        """One period's work, now (each subclass says what). Raises AccordError."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self.run_once()
            except AccordError as exc:  # the next period retries
                log.warning("%s: %s", self._thread.name, exc)
            except Exception:  # a bug must not end the worker silently: said, and retried
                log.exception("%s: unexpected failure", self._thread.name)


class AnchorTimer(Periodic):
    """Anchors the log's tail on a timer, so that a quiet log (no append to look whether an
    anchor is due) is anchored within ACCORD_ANCHOR_INTERVAL too: every `tick` seconds, in a
    daemon thread until `stop`, `Ledger.auto_anchor` with the tick counted ahead.

    Several processes may run one over the same log: an anchor is sent once whoever sends
    it, as for anchors made on append. `Anchorer.due` reads the latest anchor record, which
    another process's anchor moves on, and the anchor journal holds one record per
    checkpoint size, so a second process that finds the same tail due resolves the first
    one's record instead of sending another (`Anchorer.anchor_latest`).
    """

    def __init__(self, ledger: Callable[[], Ledger], tick: float) -> None:
        """`ledger` is called on each tick (the service opens its market lazily). Raises
        ValueError when `tick` is not positive."""
        if not tick > 0:
            raise ValueError("the anchor timer's tick must be positive")
        super().__init__("accord-anchor-timer", tick)
        self._ledger = ledger
        self.tick = tick

    def run_once(self) -> AnchorOutcome | None:
        """One look now (what the thread does every `tick`): the anchor sent, if one was due.
        Raises what opening the ledger or reading the log raises (AccordError)."""
        ledger = self._ledger()
        try:
            outcome = ledger.auto_anchor(ahead=self.tick)
        finally:
            self.rounds += 1
        if ledger.last_anchor_error is not None:
            log.warning("anchoring the tail failed: %s", ledger.last_anchor_error)
        return outcome
