"""gas: anchoring gas per event, one anchor per 1,000 events against one anchor per event.

A managed `accord.ledger.devnet.Devnet` (anvil from node_modules) on a free port in a tmp dir, a
fresh `AnchorRegistry` (`accord.ledger.chain.deploy_registry`) and a `Web3AnchorChain` with
`DEVNET_OPERATOR_KEY`. A log of real signed events gives the roots. Two logs are anchored on
the same contract, alternating transaction by transaction:

- per event: sizes 1, 2, 3, ... (one anchor per event);
- per 1,000 events: sizes 1,000, 2,000, ... (one anchor per batch).

Each anchor is built, signed, broadcast and mined (anvil automine); `gasUsed` comes from its
receipt. Gas per event = median gasUsed / events per anchor. The devnet is always stopped.

Run alone: `.venv/bin/python scripts/bench/bench_gas.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import (
    TIMES,
    EventMaker,
    Goal,
    Measure,
    Section,
    fill_store,
    new_store,
    progress,
    run_alone,
    temp_root,
)

from accord.ledger.chain import DEVNET_OPERATOR_KEY, Web3AnchorChain, deploy_registry
from accord.ledger.devnet import Devnet, find_free_port

GOAL_CHEAPER = 500
PER_BATCH = 1_000
RECEIPT_TIMEOUT_S = 30.0


def _anchor(chain: Web3AnchorChain, log_id: str, size: int, root: bytes) -> int:
    """Anchor (log_id, size, root), wait for the receipt; its gasUsed. Raises on failure."""
    tx = chain.build_anchor_tx(log_id, size, root)
    chain.broadcast(tx)
    receipt = chain.wait_for_receipt(tx.tx_hash, RECEIPT_TIMEOUT_S)
    if receipt is None or not receipt.status_ok:
        raise RuntimeError(f"anchor {log_id}@{size} was not mined successfully: {receipt}")
    return receipt.gas_used


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    batches = max(reps, 3 if quick else 10)
    singles = 40 if quick else 200
    events = batches * PER_BATCH
    section = Section(
        key="gas",
        title="gas: anchoring cost per event on the same AnchorRegistry (anvil)",
        method=__doc__ or "",
    )
    work = Path(tempfile.mkdtemp(prefix="accord-bench-gas-", dir=temp_root()))
    devnet = Devnet(work / "devnet", find_free_port())
    per_event: list[int] = []
    per_batch: list[int] = []
    try:
        store = new_store(work)
        fill_store(store, events, EventMaker(seed=7))
        info = devnet.up()
        progress(f"gas: anvil pid {info.pid} on {info.rpc_url}")
        deployment = deploy_registry(info.rpc_url, DEVNET_OPERATOR_KEY)
        chain = Web3AnchorChain(info.rpc_url, DEVNET_OPERATOR_KEY, deployment.address)
        progress(f"gas: AnchorRegistry at {deployment.address}")
        for step in range(max(singles, batches)):
            if step < singles:
                size = step + 1
                per_event.append(_anchor(chain, "bench-per-event", size, store.root(size)))
            if step < batches:
                size = (step + 1) * PER_BATCH
                per_batch.append(_anchor(chain, "bench-per-1000", size, store.root(size)))
            if (step + 1) % 50 == 0:
                progress(f"gas: {step + 1} anchoring steps")
        store.engine.dispose()
    finally:
        try:
            devnet.down()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    progress("gas: devnet stopped")
    each = Measure(
        "one anchor per event: gas per event", "gas/event", [float(g) for g in per_event]
    )
    batched = Measure(
        f"one anchor per {PER_BATCH:,} events: gas per event",
        "gas/event",
        [g / PER_BATCH for g in per_batch],
        baseline=each.name,
    )
    anchor_each = Measure(
        "gasUsed per anchor tx (per-event log)", "gas", [float(g) for g in per_event]
    )
    anchor_batch = Measure(
        f"gasUsed per anchor tx (per-{PER_BATCH:,} log)",
        "gas",
        [float(g) for g in per_batch],
        baseline=anchor_each.name,
    )
    section.measures = [each, batched, anchor_each, anchor_batch]
    cheaper = each.median / batched.median
    section.goals.append(
        Goal(
            f"one anchor per {PER_BATCH:,} events cheaper per event",
            GOAL_CHEAPER,
            cheaper,
            f"{TIMES} cheaper",
        )
    )
    section.notes += [
        f"{singles} per-event anchors and {batches} per-{PER_BATCH:,} anchors, alternating on "
        f"one registry; n is the number of anchors (gas is deterministic, so the samples only "
        "differ by the first anchor of each log, which also initialises its storage: "
        f"{per_event[0]:,} and {per_batch[0]:,} gas).",
        f"Median gas per anchor: {statistics.median(per_event):,.0f} (per event) and "
        f"{statistics.median(per_batch):,.0f} (per {PER_BATCH:,}); the anchor costs the same "
        "whatever it covers, so the saving is the batch size.",
    ]
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "anchoring gas per event: per 1,000 events against per event")
