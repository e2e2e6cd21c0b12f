"""verify: entries per second through `accord.ledger.verify.verify_log(store, operator_did, None)`.

One log of signed events (8 actors, `make_entry` + `append_batch` of 1,000) with a signed
checkpoint at its head, on SQLite in a tmp dir. Side by side in each repetition:

- `verify_log` offline (steps 1-4: parse and check every signature and key id, seq growth,
  every stored tile and the checkpoint's root recomputed, the checkpoint's signature);
- the machine's verification limit: raw Ed25519 verifications per second (PyNaCl) of the
  same (JCS(event), signature) pairs, nothing else.

Run alone: `.venv/bin/python scripts/bench/bench_verify.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
from _common import (
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

from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.events import Entry
from accord.ledger.signing import Ed25519Signer, public_key_from_did
from accord.ledger.verify import verify_log

GOAL_ENTRIES_PER_S = 10_000


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    size = 20_000 if quick else 100_000
    section = Section(
        key="verify",
        title=f"verify: verify_log over {size:,} signed entries (offline, no chain)",
        method=__doc__ or "",
    )
    work = Path(tempfile.mkdtemp(prefix="accord-bench-verify-", dir=temp_root()))
    try:
        store = new_store(work)
        maker = EventMaker(seed=11)
        build_rate = fill_store(store, size, maker, label="verify: building ")
        operator = Ed25519Signer(bytes(range(1, 33)))
        take_checkpoint(store, operator, datetime.now(UTC))
        sample = [Entry.from_bytes(s.data) for s in store.entries(0, min(size, 20_000))]
        keys = {
            did: nacl.signing.VerifyKey(public_key_from_did(did))
            for did in {e.event.actor for e in sample}
        }
        pairs = [(keys[e.event.actor], e.event_bytes, e.sig) for e in sample]
        progress(f"verify: built {size:,} entries at {build_rate:,.0f} events/s")

        failures: list[str] = []

        def verify_all() -> float:
            start = time.perf_counter()
            report = verify_log(store, operator.did, None)
            rate = size / (time.perf_counter() - start)
            if not report.ok or report.size != size:
                failure = report.first_failure
                failures.append(str(failure.detail if failure else report.to_json()))
            return rate

        def verify_limit() -> float:
            return timed(len(pairs), lambda: [k.verify(m, s) for k, m, s in pairs])

        limit = Measure("Ed25519 verify, raw PyNaCl (verification limit)", "verifies/s")
        full = Measure("verify_log (steps 1-4)", "entries/s", baseline=limit.name)
        section.measures = [limit, full]
        side_by_side(reps, [(full, verify_all), (limit, verify_limit)], label="verify: ")
        store.engine.dispose()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        section.error = f"verify_log did not pass: {failures[0]}"
    section.goals.append(
        Goal(f"verify_log on {size:,} entries", GOAL_ENTRIES_PER_S, full.median, "entries/s")
    )
    section.notes += [
        f"The log was built with real signed entries at {build_rate:,.0f} events/s "
        "(make_entry + append_batch of 1,000).",
        "Every verify_log run returned PASS."
        if not failures
        else f"verify_log FAILED: {failures[0]}",
        f"The raw verification limit is measured on {len(pairs):,} of the same entries.",
    ]
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "verify_log throughput against the raw Ed25519 verification limit")
