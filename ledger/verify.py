"""`ledger verify`: a numbered checklist over the stored log, its checkpoints and the chain.

    (1) every entry parses as one canonical signed entry, and its signature and key id hold
    (2) every actor's seq strictly grows
    (3) the entries are contiguous, every stored tile (`accord.ledger.tiles`) recomputes from
        them, and the tree recomputes to each stored checkpoint's root
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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from accord.ledger import merkle, tiles
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
from accord.ledger.store import LogStore

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


def _tree_levels(leaves: list[bytes]) -> list[list[bytes]]:
    """Every complete perfect subtree of the tree over `leaves`, by tree level."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(
            [merkle.node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        )
    return levels


def _first_entry(key: int, offset: int = 0) -> int:
    """The first entry under hash `offset` of the stored tile row `key`."""
    tile = tiles.key_tile(key)
    level, position = tiles.row_node(tile.level or 0, tile.index, tile.width, offset)
    return position << level


def _first_difference(stored: bytes, wanted: bytes) -> int:
    """The first hash of a stored tile row that differs from the row wanted (the last one
    wanted when only the stored row's length differs)."""
    step = merkle.HASH_SIZE
    count = len(wanted) // step
    return next(
        (
            i
            for i in range(count)
            if stored[i * step : (i + 1) * step] != wanted[i * step : (i + 1) * step]
        ),
        count - 1,
    )


def _same_tile(key: int, other: int) -> bool:
    first, second = tiles.key_tile(key), tiles.key_tile(other)
    return (first.level, first.index) == (second.level, second.index)


def _width_mismatch(
    have: tuple[int, bytes], want_key: int, want: bytes, leaves: int
) -> VerificationError:
    """Step 3's failure for a tile stored at another width than the entries make: the first
    hash both hold that differs, or else the first entry under the hashes one lacks."""
    stored, wanted = tiles.key_tile(have[0]), tiles.key_tile(want_key)
    level = wanted.level or 0
    try:
        stored_levels = tiles.row_levels(have[1], stored.width)
    except MalformedError:
        stored_levels = [[] for _ in range(tiles.TILE_HEIGHT)]
    for height, (got, expected) in enumerate(
        zip(stored_levels, tiles.row_levels(want, wanted.width), strict=True)
    ):
        for offset, (one, other) in enumerate(zip(got, expected, strict=False)):
            if one != other:
                tree_level = tiles.TILE_HEIGHT * level + height
                position = (wanted.index << (tiles.TILE_HEIGHT - height)) + offset
                return VerificationError(
                    3,
                    f"the stored hash {(tree_level, position)} in {_tile_name(have[0])} does "
                    "not match the entries",
                    position << tree_level,
                )
    first = (wanted.first + min(stored.width, wanted.width)) << (tiles.TILE_HEIGHT * level)
    return VerificationError(
        3,
        f"the stored {_tile_name(have[0])} is {stored.width} hashes wide; the entries make it "
        f"{wanted.width}",
        min(first, leaves),
    )


def _tile_name(key: int) -> str:
    tile = tiles.key_tile(key)
    return f"tile {tiles.tile_path(tile).removeprefix('tile/')}"


def _check_tree(store: LogStore, size: int, scan: _LogScan) -> str:
    if scan.contiguity is not None:
        raise scan.contiguity
    # Stored tiles first, in key order (every tile of level 0, then each level up), each
    # compared hash by hash: the first mismatch names the first entry that differs, which a
    # count comparison could not.
    levels = _tree_levels(scan.leaves)
    scan.levels = dict(enumerate(levels))
    leaves = len(scan.leaves)
    stored = store.stored_tiles()
    have = next(stored, None)
    for want_key, want in tiles.expected_rows(levels):
        if have is not None and have[0] != want_key and _same_tile(have[0], want_key):
            raise _width_mismatch(have, want_key, want, leaves)
        if have is not None and have[0] < want_key:
            raise VerificationError(
                3,
                f"the stored {_tile_name(have[0])} is not one the entries make",
                min(_first_entry(have[0]), leaves),
            )
        if have is None or have[0] != want_key:
            raise VerificationError(3, f"{_tile_name(want_key)} is missing", _first_entry(want_key))
        if have[1] != want:
            differs = _first_difference(have[1], want)
            tile = tiles.key_tile(want_key)
            level, position = tiles.row_node(tile.level or 0, tile.index, tile.width, differs)
            what = "leaf hash" if level == 0 else f"tree node {(level, position)}"
            raise VerificationError(
                3,
                f"the stored {what} in {_tile_name(want_key)} does not match the entries",
                _first_entry(want_key, differs),
            )
        have = next(stored, None)
    if have is not None:
        raise VerificationError(
            3,
            f"the stored {_tile_name(have[0])} has no entry behind it",
            min(_first_entry(have[0]), leaves),
        )
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
    return f"{size} leaves and their tiles recompute; {len(checkpoints)} checkpoints match"


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
