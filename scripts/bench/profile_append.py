"""Where a hash-only append's time goes: SQLite's inserts, its commit, and the Python around them.

Appends the same 20,000 signed entries, 1,000 per transaction, to a fresh SQLite log (WAL,
synchronous=FULL, as `bench_append.py` does) five times and prints, per entry, the median time
spent in the driver inserting the entry rows, writing the tile rows, in other statements,
in COMMIT, and the rest: the Python of `append_batch` (leaf and node hashes, the tile rows, the
checks, SQLAlchemy). Timed by SQLAlchemy's cursor and commit events, so it runs against any
version of the store (BENCHMARKS.md compares main with the branch that cut the Python).

Run: `.venv/bin/python scripts/bench/profile_append.py [--quick]`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import BATCH, EventMaker, console, new_store, parser, temp_root
from sqlalchemy import event

from accord.ledger.events import Entry


def one_log(folder: Path, presigned: list[Entry]) -> dict[str, float]:
    """Seconds spent in each part of appending `presigned` to a fresh log in `folder`."""
    store = new_store(folder)
    parts = dict.fromkeys(("entry rows", "tile rows", "other statements", "commit"), 0.0)
    marks: dict[str, float] = {}

    def before(*_args: Any) -> None:
        marks["statement"] = time.perf_counter()

    def after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        spent = time.perf_counter() - marks["statement"]
        if "INTO ledger_entries" in statement:
            parts["entry rows"] += spent
        elif "ledger_tiles" in statement:
            parts["tile rows"] += spent
        else:
            parts["other statements"] += spent

    def committing(_conn: Any) -> None:
        marks["commit"] = time.perf_counter()

    event.listen(store.engine, "before_cursor_execute", before)
    event.listen(store.engine, "after_cursor_execute", after)
    event.listen(store.engine, "commit", committing)
    started = time.perf_counter()
    for start in range(0, len(presigned), BATCH):
        store.append_batch(presigned[start : start + BATCH])
        parts["commit"] += time.perf_counter() - marks["commit"]
    total = time.perf_counter() - started
    parts["Python (hashes, rows, checks, SQLAlchemy)"] = total - sum(parts.values())
    parts["total"] = total
    store.engine.dispose()
    return parts


def profile(entries: int, reps: int) -> dict[str, float]:
    """Median microseconds per entry of each part of `append_batch` over `reps` fresh logs."""
    presigned = EventMaker().batch(entries)
    work = Path(tempfile.mkdtemp(prefix="accord-profile-append-", dir=temp_root()))
    runs: list[dict[str, float]] = []
    try:
        for rep in range(reps):
            folder = work / f"run{rep}"
            folder.mkdir()
            runs.append(one_log(folder, presigned))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {name: statistics.median(run[name] for run in runs) / entries * 1e6 for name in runs[0]}


def main() -> None:
    options = parser("Where a hash-only append's time goes.").parse_args()
    entries = 5_000 if options.quick else 20_000
    reps = options.reps or (3 if options.quick else 5)
    for name, micros in profile(entries, reps).items():
        console.print(f"{name:45s} {micros:6.2f} µs/entry")


if __name__ == "__main__":
    main()
