"""`ledger verify`: a numbered checklist over the stored log, its checkpoints and the chain.

    (1) every entry parses as one canonical signed entry, and its signature and key id hold
    (2) every actor's seq strictly grows
    (3) the entries are contiguous, every stored tree node recomputes, and the tree recomputes
        to each stored checkpoint's root
    (4) each checkpoint is signed by the operator, for this log, as stored
    (5) each anchor the chain holds for this log equals the log's root at that size, and each
        anchor the anchor journal (`accord.ledger.anchor_journal`) records as confirmed is on
        the chain
    (6) successive on-chain anchors are consistent (RFC 9162 consistency proofs)

Steps run in order and stop at the first failure, which names the entry (log index) it failed
on where there is one. Steps 5 and 6 are skipped, and say so, when no chain is given.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from accord.ledger import merkle
from accord.ledger.anchor_journal import AnchorJournal
from accord.ledger.chain import AnchorChain, OnChainAnchor
from accord.ledger.checkpoint import SignedCheckpoint
from accord.ledger.errors import (
    ChainError,
    LedgerError,
    MalformedError,
    ProofError,
    SignatureError,
    VerificationError,
)
from accord.ledger.events import Entry
from accord.ledger.merkle import NodeId
from accord.ledger.store import NODE_INDEX_BITS, UNSTORED_LEVEL, LogStore

STEP_TITLES = {
    1: "every entry's signature",
    2: "every actor's seq grows",
    3: "the tree recomputes to each stored checkpoint",
    4: "each checkpoint's signature",
    5: "each anchor equals what the chain holds",
    6: "consistency between successive anchors",
}

StepStatus = Literal["pass", "fail", "skipped", "not-run", "unchecked", "pending"]
Progress = Callable[[int, int], None]
"""Called with (entries done, entries in all) while the log is read."""


@dataclass(frozen=True)
class StepResult:
    number: int
    title: str
    status: StepStatus
    detail: str
    entry: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.number,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "entry": self.entry,
        }


@dataclass(frozen=True)
class VerificationReport:
    log_id: str
    size: int
    steps: tuple[StepResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(step.status in ("pass", "skipped") for step in self.steps)

    @property
    def first_failure(self) -> StepResult | None:
        return next((step for step in self.steps if step.status == "fail"), None)

    def to_json(self) -> dict[str, Any]:
        failure = self.first_failure
        return {
            "log_id": self.log_id,
            "size": self.size,
            "verdict": "PASS" if self.ok else "FAIL",
            "steps": [step.to_json() for step in self.steps],
            "failed_step": None if failure is None else failure.number,
            "failed_entry": None if failure is None else failure.entry,
        }


@dataclass
class _LogScan:
    """What one pass over the entries learned; failures are kept per step."""

    leaves: list[bytes] = field(default_factory=list)
    levels: dict[int, list[bytes]] = field(default_factory=dict)
    signatures: VerificationError | None = None
    sequences: VerificationError | None = None
    contiguity: VerificationError | None = None

    def root_at(self, size: int) -> bytes:
        """The tree hash at `size`, from the recomputed levels (after step 3)."""
        pieces = merkle.perfect_subtrees(0, size)
        return merkle.fold_right([self.levels[p.level][p.position] for p in pieces])


def verify_log(
    store: LogStore,
    operator_did: str,
    chain: AnchorChain | None,
    progress: Progress | None = None,
) -> VerificationReport:
    """Run the checklist. Never raises for what it finds; it reports it.

    Raises StoreError only when the database cannot be read at all.
    """
    size = store.size()
    scan = _scan_entries(store, size, progress)
    on_chain: list[OnChainAnchor] = []
    checks: list[tuple[int, Callable[[], str]]] = [
        (
            1,
            lambda: _raise_or(
                scan.signatures, f"{len(scan.leaves)} entries signed by their actors"
            ),
        ),
        (2, lambda: _raise_or(scan.sequences, "every actor's seq grows")),
        (3, lambda: _check_tree(store, size, scan)),
        (4, lambda: _check_checkpoints(store, operator_did)),
    ]
    if chain is not None:
        checks.append((5, lambda: _check_chain(store, chain, scan, on_chain)))
        checks.append((6, lambda: _check_consistency(store, on_chain)))

    results: list[StepResult] = []
    failed = False
    for number, check in checks:
        title = STEP_TITLES[number]
        if failed:
            results.append(StepResult(number, title, "not-run", "an earlier step failed"))
            continue
        try:
            results.append(StepResult(number, title, "pass", check()))
        except VerificationError as exc:
            failed = True
            results.append(StepResult(number, title, "fail", exc.reason, exc.entry))
    if chain is None:
        for number in (5, 6):
            results.append(
                StepResult(number, STEP_TITLES[number], "skipped", "no chain given (offline)")
            )
    return VerificationReport(store.log_id, size, tuple(results))


def _raise_or(failure: VerificationError | None, detail: str) -> str:
    if failure is not None:
        raise failure
    return detail


PARALLEL_MIN_ENTRIES = 20_000
"""Logs at least this long check their signatures in worker processes (one per core)."""
_CHUNK = 4_000


def check_entries(
    rows: Sequence[tuple[int, bytes, tuple[Any, ...] | None]],
) -> tuple[list[tuple[str, int]], tuple[int, str] | None]:
    """Step 1 over a chunk of stored entries (pure, picklable for worker processes).

    Returns each entry's (actor, seq) up to the first failure, and that failure as
    (index, reason), or None.
    """
    checked: list[tuple[str, int]] = []
    for index, data, columns in rows:
        try:
            entry = Entry.from_bytes(data)
            entry.verify()
        except (MalformedError, SignatureError) as exc:
            return checked, (index, str(exc))
        event = entry.event
        if columns is not None and tuple(columns) != (
            event.actor,
            event.seq,
            event.kind,
            event.subject,
            event.at,
        ):
            return checked, (
                index,
                "the stored actor, seq, kind, subject or time columns disagree with the "
                "signed entry",
            )
        checked.append((event.actor, event.seq))
    return checked, None


def _scan_entries(store: LogStore, size: int, progress: Progress | None) -> _LogScan:
    scan = _LogScan()
    last_seq: dict[str, int] = {}
    expected = 0
    workers = os.cpu_count() or 1
    pool = (
        ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        if size >= PARALLEL_MIN_ENTRIES and workers > 1
        else None
    )
    pending: deque[tuple[list[int], Future[Any] | None, list[Any]]] = deque()

    def record_chunk(indices: list[int], result: tuple[list[tuple[str, int]], Any]) -> None:
        """Fold one checked chunk into the scan: each actor's seq must grow (step 2), and the
        chunk's first bad signature is the scan's (step 1) unless one came before."""
        checked, failure = result
        for index, (actor, seq) in zip(indices, checked, strict=False):
            previous = last_seq.get(actor, -1)
            if seq <= previous and scan.sequences is None:
                scan.sequences = VerificationError(
                    2, f"seq {seq} of {actor} does not grow past {previous}", index
                )
            last_seq[actor] = max(seq, previous)
        if failure is not None and scan.signatures is None:
            scan.signatures = VerificationError(1, failure[1], failure[0])

    def drain(keep: int) -> None:
        while len(pending) > keep:
            indices, future, rows = pending.popleft()
            if scan.signatures is None:
                record_chunk(indices, future.result() if future else check_entries(rows))
            if progress is not None and indices:
                progress(indices[-1] + 1, size)

    try:
        chunk: list[tuple[int, bytes, tuple[Any, ...] | None]] = []
        for stored in store.entries():
            if stored.index != expected and scan.contiguity is None:
                scan.contiguity = VerificationError(
                    3, f"entry {expected} is missing (next stored is {stored.index})", expected
                )
            expected = stored.index + 1
            scan.leaves.append(merkle.leaf_hash(stored.data))
            chunk.append((stored.index, stored.data, stored.columns))
            if len(chunk) >= _CHUNK:
                indices = [row[0] for row in chunk]
                future = pool.submit(check_entries, chunk) if pool else None
                pending.append((indices, future, [] if pool else chunk))
                chunk = []
                drain(keep=2 * workers if pool else 0)
        if chunk:
            future = pool.submit(check_entries, chunk) if pool else None
            pending.append(([row[0] for row in chunk], future, [] if pool else chunk))
        drain(keep=0)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if progress is not None:
        progress(size, size)
    return scan


def _expected_nodes(leaves: list[bytes]) -> Iterator[tuple[int, NodeId, bytes]]:
    """Every perfect subtree of the tree over `leaves`, in stored key order (level-major)."""
    level_hashes = leaves
    level = 0
    while level_hashes:
        for index, value in enumerate(level_hashes):
            yield (level << NODE_INDEX_BITS) | index, NodeId(level, index), value
        level_hashes = [
            merkle.node_hash(level_hashes[i], level_hashes[i + 1])
            for i in range(0, len(level_hashes) - 1, 2)
        ]
        level += 1


def _node_id(key: int) -> NodeId:
    return NodeId(key >> NODE_INDEX_BITS, key & ((1 << NODE_INDEX_BITS) - 1))


def _no_entry_behind(key: int, leaves: int) -> NoReturn:
    """Raise step 3's failure for a stored node beyond the tree over `leaves` entries."""
    extra = _node_id(key)
    what = f"leaf hash {extra.start}" if extra.level == 0 else f"tree node {tuple(extra)}"
    at = min(extra.start, leaves)
    raise VerificationError(3, f"the stored {what} has no entry behind it", at)


def _check_tree(store: LogStore, size: int, scan: _LogScan) -> str:
    if scan.contiguity is not None:
        raise scan.contiguity
    # Stored nodes first, in key order (all leaves, then each level up): the first mismatch
    # names the first entry that differs, which a count comparison could not.
    # Pairs of leaves (UNSTORED_LEVEL) are absent, or there from a log written before.
    levels = scan.levels
    stored = store.stored_nodes()
    have = next(stored, None)
    for want_key, node, value in _expected_nodes(scan.leaves):
        if have is not None and have[0] < want_key:
            _no_entry_behind(have[0], len(scan.leaves))
        if have is not None and have[0] == want_key:
            if have[1] != value:
                what = "leaf hash" if node.level == 0 else f"tree node {tuple(node)}"
                raise VerificationError(
                    3, f"the stored {what} does not match the entries", node.start
                )
            have = next(stored, None)
        elif node.level != UNSTORED_LEVEL:
            raise VerificationError(3, f"tree node {tuple(node)} is missing", node.start)
        levels.setdefault(node.level, []).append(value)
    if have is not None:
        _no_entry_behind(have[0], len(scan.leaves))
    if len(scan.leaves) != size:
        raise VerificationError(
            3,
            f"the log says it has {size} entries but {len(scan.leaves)} are stored",
            min(size, len(scan.leaves)),
        )

    checkpoints = store.checkpoints()
    for checkpoint in checkpoints:
        if checkpoint.size > size:
            raise VerificationError(
                3, f"checkpoint {checkpoint.size} is beyond the log's {size} entries", size
            )
        if scan.root_at(checkpoint.size) != checkpoint.root:
            raise VerificationError(
                3,
                f"the entries do not hash to checkpoint {checkpoint.size}'s root",
                max(checkpoint.size - 1, 0),
            )
    return f"{size} leaves and their tree nodes recompute; {len(checkpoints)} checkpoints match"


def _check_checkpoints(store: LogStore, operator_did: str) -> str:
    checkpoints = store.checkpoints()
    for stored in checkpoints:
        try:
            signed = SignedCheckpoint.from_bytes(stored.data)
            signed.verify(operator_did)
        except (MalformedError, SignatureError) as exc:
            raise VerificationError(4, f"checkpoint {stored.size}: {exc}") from exc
        checkpoint = signed.checkpoint
        if checkpoint.log_id != store.log_id:
            raise VerificationError(
                4, f"checkpoint {stored.size} is for log {checkpoint.log_id!r}, not this one"
            )
        if (checkpoint.size, checkpoint.root, checkpoint.at) != (
            stored.size,
            stored.root,
            stored.at,
        ):
            raise VerificationError(4, f"checkpoint {stored.size} differs from what it signs")
    return f"{len(checkpoints)} checkpoints signed by {operator_did}"


def _check_chain(
    store: LogStore, chain: AnchorChain, scan: _LogScan, on_chain: list[OnChainAnchor]
) -> str:
    leaves = scan.leaves
    log_id = store.log_id
    try:
        on_chain.extend(sorted(chain.anchors(log_id), key=lambda anchor: anchor.size))
        matched: OnChainAnchor | None = None
        for anchor in on_chain:
            if anchor.size > len(leaves):
                raise VerificationError(
                    5,
                    f"the chain anchors size {anchor.size} but the log has {len(leaves)} entries",
                    len(leaves),
                )
            if scan.root_at(anchor.size) != anchor.root:
                raise _changed_after_anchoring(anchor, matched)
            matched = anchor
        anchored_sizes = {anchor.size for anchor in on_chain}
        for recorded in AnchorJournal(store.engine).records("confirmed"):
            if recorded.size not in anchored_sizes:
                raise VerificationError(
                    5, f"the log recorded an anchor of size {recorded.size} the chain lacks"
                )
    except ChainError as exc:
        raise VerificationError(5, f"cannot read the chain: {exc}") from exc
    return f"{len(on_chain)} anchors on chain {chain.chain_id()} match the log"


def _changed_after_anchoring(
    anchor: OnChainAnchor, matched: OnChainAnchor | None
) -> VerificationError:
    """The failure of an anchor whose root the log no longer has. The chain holds roots only,
    so the changed entry is known to lie after the last anchor that still matches and before
    this one's size; the failure names the first entry of that span."""
    first = 0 if matched is None else matched.size
    since = (
        "no earlier anchor still matches"
        if matched is None
        else f"the root at size {matched.size} (block {matched.block_number}) still matches"
    )
    return VerificationError(
        5,
        f"the log's root at size {anchor.size} differs from the one anchored in block "
        f"{anchor.block_number}; {since}, so an entry from {first} to {anchor.size - 1} was "
        "changed after it was anchored",
        first,
    )


def _check_consistency(store: LogStore, on_chain: list[OnChainAnchor]) -> str:
    for older, newer in itertools.pairwise(on_chain):
        try:
            proof = store.consistency_proof(older.size, newer.size)
            merkle.verify_consistency(older.size, newer.size, older.root, newer.root, proof)
        except (ProofError, ValueError, LedgerError) as exc:
            raise VerificationError(
                6, f"anchors {older.size} and {newer.size} are not consistent: {exc}"
            ) from exc
    pairs = max(len(on_chain) - 1, 0)
    return f"{pairs} successive anchor pairs are consistent"
