"""proofs: inclusion proofs served per second from the store, against pymerkle's SqliteTree.

For each log size (100,000 and 1,000,000 entries; quick: 20,000 and 100,000):

- accord: a LogStore on SQLite in a tmp dir, built with real signed entries (`make_entry` +
  `append_batch` of 1,000), so its tiles are stored exactly as in production;
- accord before tiles: the same tree stored as the store kept it until tiles, one row per
  perfect subtree (`ledger_nodes`, keyed `level << 48 | position`, no pairs of leaves), in a
  second SQLite file from the same leaf data, and proofs served by that store's read path
  (nodes of level >= 8 cached, the rest in one `IN` query on the raw cursor of a pooled,
  memory-mapped connection, pairs of leaves hashed from their two leaves), so "no slower
  than before" is measured in the same run;
- pymerkle 7.0.0: a `SqliteTree` holding the very same leaf data (bulk `append_entries`),
  with its default subroot cache.

Both trees hash by RFC 9162 and must agree: the roots are compared and a sample of proofs
is checked element by element and verified against the root before anything is timed.

Each proof is a separate call for a random index at the given size, as a server answers
them: `LogStore.inclusion_proof(index, size)` and `SqliteTree.prove_inclusion(index + 1,
size)`. Both first serve the same number of warm-up proofs (the first pass is reported as
"cold"); then each repetition times fresh random indices, side by side.

The store's read path (ledger/proofs.py) skips the head-size query when the asked size is one
the log is known to have reached, keeps full tiles of tile level >= 1 (immutable) in memory,
and reads the rest, one row per tile (the level-0 tile: about three rows at a million
entries, less the cached ones), with one statement on the raw SQLite cursor of a pooled,
memory-mapped connection in autocommit.

Run alone: `.venv/bin/python scripts/bench/bench_proofs.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path

from _common import (
    BATCH,
    TIMES,
    EventMaker,
    Goal,
    Measure,
    Section,
    fill_store,
    new_store,
    progress,
    run_alone,
    side_by_side,
    temp_root,
    timed,
)
from pymerkle import SqliteTree

from accord.ledger import merkle
from accord.ledger.database import make_engine
from accord.ledger.merkle import NodeId
from accord.ledger.store import LogStore

GOAL_PROOFS_PER_S = 10_000
GOAL_SIZE = 1_000_000
PYMERKLE_CHUNK = 10_000


def _build_pymerkle(store: LogStore, size: int, path: Path) -> tuple[SqliteTree, float]:
    """A SqliteTree of the store's leaf data; returns it and its bulk append rate (leaves/s)."""
    tree = SqliteTree(str(path))
    start = time.perf_counter()
    buffer: list[bytes] = []
    for stored in store.entries(0, size, chunk=PYMERKLE_CHUNK):
        buffer.append(stored.data)
        if len(buffer) == PYMERKLE_CHUNK:
            tree.append_entries(buffer)
            buffer = []
    if buffer:
        tree.append_entries(buffer)
    return tree, size / (time.perf_counter() - start)


class NodeRowProofs:
    """Inclusion proofs from the tree stored one row per perfect subtree, served the way the
    store served them before tiles (see the module docstring); the baseline of this bench."""

    LEVEL_BITS = 48
    CACHE_MIN_LEVEL = 8
    CACHE_SPAN_LEVELS = 16

    def __init__(self, store: LogStore, size: int, path: Path) -> None:
        self.engine = make_engine(f"sqlite:///{path}")
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("CREATE TABLE ledger_nodes (id INTEGER PRIMARY KEY, hash BLOB NOT NULL)")
            frontier: list[bytes] = []
            position = 0
            while position < size:
                datas = [e.data for e in store.entries(position, min(size, position + 10_000))]
                frontier, made = merkle.extend_frontier(frontier, position, datas)
                cursor.execute("BEGIN")
                cursor.executemany(
                    "INSERT INTO ledger_nodes (id, hash) VALUES (?, ?)",
                    [((lv << self.LEVEL_BITS) | ps, h) for lv, ps, h in made if lv != 1],
                )
                cursor.execute("COMMIT")
                position += len(datas)
            cursor.execute("PRAGMA mmap_size=2147483648")
            cursor.close()
        finally:
            raw.close()
        self.cache: dict[int, bytes] = {}

    def key(self, node: NodeId) -> int:
        return (node.level << self.LEVEL_BITS) | node.position

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        needed = merkle.nodes_for_inclusion(index, size)
        keys: dict[int, None] = {}
        for node in needed:
            if node.level == 1:  # a pair of leaves: its two leaf rows
                keys[self.key(NodeId(0, 2 * node.position))] = None
                keys[self.key(NodeId(0, 2 * node.position + 1))] = None
            else:
                keys[self.key(node)] = None
        found = {key: self.cache[key] for key in keys if key in self.cache}
        wanted = [key for key in keys if key not in found]
        if wanted:
            raw = self.engine.raw_connection()
            try:
                cursor = raw.cursor()
                marks = ",".join("?" * len(wanted))
                cursor.execute(f"SELECT id, hash FROM ledger_nodes WHERE id IN ({marks})", wanted)
                rows = cursor.fetchall()
                cursor.close()
            finally:
                raw.close()
            cached_from = max(self.CACHE_MIN_LEVEL, size.bit_length() - self.CACHE_SPAN_LEVELS)
            for key, value in rows:
                found[key] = bytes(value)
                if key >> self.LEVEL_BITS >= cached_from:
                    self.cache[key] = found[key]
        nodes: dict[NodeId, bytes] = {}
        for node in needed:
            if node.level == 1:
                left = found[self.key(NodeId(0, 2 * node.position))]
                right = found[self.key(NodeId(0, 2 * node.position + 1))]
                nodes[node] = merkle.node_hash(left, right)
            else:
                nodes[node] = found[self.key(node)]
        return merkle.inclusion_proof_by(index, size, merkle.subtree_from_nodes(nodes))


def _cross_check(
    store: LogStore, tree: SqliteTree, before: NodeRowProofs, size: int, rng: random.Random
) -> None:
    """Same root, same proofs, and they verify. Raises AssertionError otherwise."""
    root = store.root(size)
    assert tree.get_root(size) == root, "pymerkle and accord disagree on the root"
    for index in [0, size - 1, *(rng.randrange(size) for _ in range(200))]:
        ours = store.inclusion_proof(index, size)
        theirs = tree.prove_inclusion(index + 1, size).path
        # pymerkle's path starts with the leaf hash itself, then the same siblings.
        assert [bytes(h) for h in theirs[1:]] == ours, f"proofs of {index} differ"
        assert before.inclusion_proof(index, size) == ours, f"node rows differ at {index}"
        leaf = merkle.leaf_hash(store.entry(index).data)
        merkle.verify_inclusion(leaf, index, size, ours, root)


OURS_PER_REP = 5_000
THEIRS_PER_REP = 1_000
WARMUP = 2_000


def _one_size(
    section: Section, size: int, folder: Path, rng: random.Random, reps: int, goal: bool
) -> None:
    label = f"proofs@{size:,}: "
    store = new_store(folder)
    build = fill_store(store, size, EventMaker(seed=size), label=f"{label}building ")
    progress(f"{label}accord log built at {build:,.0f} signed events/s")
    tree, pm_build = _build_pymerkle(store, size, folder / "pymerkle.db")
    progress(f"{label}pymerkle tree built at {pm_build:,.0f} leaves/s")
    node_rows = NodeRowProofs(store, size, folder / "node-rows.db")
    progress(f"{label}the same tree stored as node rows")
    try:
        _cross_check(store, tree, node_rows, size, rng)
        progress(f"{label}roots and sample proofs agree and verify")

        warm = [rng.randrange(size) for _ in range(WARMUP)]
        cold_ours = timed(WARMUP, lambda: [store.inclusion_proof(i, size) for i in warm])
        cold_theirs = timed(WARMUP, lambda: [tree.prove_inclusion(i + 1, size) for i in warm])

        def ours() -> float:
            picks = [rng.randrange(size) for _ in range(OURS_PER_REP)]
            proof = store.inclusion_proof
            return timed(OURS_PER_REP, lambda: [proof(i, size) for i in picks])

        def theirs() -> float:
            picks = [rng.randrange(size) for _ in range(THEIRS_PER_REP)]
            prove = tree.prove_inclusion
            return timed(THEIRS_PER_REP, lambda: [prove(i + 1, size) for i in picks])

        for i in warm:
            node_rows.inclusion_proof(i, size)

        def before() -> float:
            picks = [rng.randrange(size) for _ in range(OURS_PER_REP)]
            proof = node_rows.inclusion_proof
            return timed(OURS_PER_REP, lambda: [proof(i, size) for i in picks])

        pm = Measure(f"pymerkle SqliteTree.prove_inclusion @ {size:,}", "proofs/s")
        old = Measure(f"accord before tiles (node rows) @ {size:,}", "proofs/s", baseline=pm.name)
        mine = Measure(
            f"accord LogStore.inclusion_proof (tiles) @ {size:,}", "proofs/s", baseline=old.name
        )
        section.measures += [pm, old, mine]
        side_by_side(reps, [(mine, ours), (pm, theirs), (old, before)], label=label)
    finally:
        tree.close()
        store.engine.dispose()
        node_rows.engine.dispose()
    section.notes.append(
        f"{size:,} entries: accord log built from signed entries at {build:,.0f} events/s "
        f"({BATCH:,}/txn), pymerkle from the same leaf data at {pm_build:,.0f} leaves/s "
        f"({PYMERKLE_CHUNK:,}/txn); cold first {WARMUP:,} proofs: accord {cold_ours:,.0f}/s, "
        f"pymerkle {cold_theirs:,.0f}/s; the tiles serve "
        f"{mine.median / old.median:.2f}{TIMES} the proofs/s of the node rows."
    )
    if goal:
        section.goals.append(
            Goal(
                f"inclusion proofs served at {size:,} entries",
                GOAL_PROOFS_PER_S,
                mine.median,
                "proofs/s",
            )
        )
        section.goals.append(
            Goal(
                f"faster than pymerkle SqliteTree at {size:,}",
                1.0,
                mine.median / pm.median,
                f"{TIMES} pymerkle",
            )
        )
        section.goals.append(
            Goal(
                f"no slower from tiles than from node rows at {size:,}",
                1.0,
                mine.median / old.median,
                f"{TIMES} node rows",
            )
        )


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    sizes = [20_000, 100_000] if quick else [100_000, GOAL_SIZE]
    section = Section(
        key="proofs",
        title="proofs: inclusion proofs served per second (one call per proof, random index)",
        method=__doc__ or "",
    )
    work = Path(tempfile.mkdtemp(prefix="accord-bench-proofs-", dir=temp_root()))
    rng = random.Random(9162)
    try:
        for size in sizes:
            folder = work / str(size)
            folder.mkdir()
            _one_size(section, size, folder, rng, reps, goal=size == sizes[-1])
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    section.notes.append(
        f"Per repetition: {OURS_PER_REP:,} accord proofs and {THEIRS_PER_REP:,} pymerkle "
        "proofs (fresh random indices each time; pymerkle's cache keeps what earlier calls "
        "computed, as accord's keeps upper-level nodes)."
    )
    if quick:
        section.notes.append(
            f"Quick run: the proof goal is checked at {sizes[-1]:,} entries, not {GOAL_SIZE:,}."
        )
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "inclusion proofs per second against pymerkle's SqliteTree")
