"""tiles: serving the log as C2SP tlog-tiles at 100,000 entries (quick: 20,000).

Setup, untimed: a log in a tmp `ACCORD_HOME` (SQLite, WAL, as in production) filled with real
signed entries (`make_entry` + `append_batch` of 1,000) and a signed checkpoint of it. The
tiles are read from their stored rows as the service reads them (`LogStore.tile`: one read a
tile; `LogStore.leaf_datas` for a bundle), and are checked first: the level-0 tiles hash up
to the level-1 tiles, and the tiles of the tree recompute the store's root.

In process, side by side (no HTTP), per call at a random full tile:

- a level-0 hash tile (256 leaf hashes, 8 KiB): `LogStore.tile`;
- an entry bundle (256 entries): `leaf_datas` + `entry_bundle`, and the same gzipped (at the
  service's level, what a client that accepts gzip gets);
- as a baseline, one RFC 9162 inclusion proof from the store (`LogStore.inclusion_proof`), the
  read a tiled client replaces by fetching a few tiles (at this size: one tile per level, 3).

Over HTTP: `uvicorn` (one worker, a subprocess on 127.0.0.1) serves the service (`create_app`)
over that home, its market wired with in-memory chains (no devnet: tiles read the log only).
From this process, 4 threads each with a keep-alive `httpx.Client` fetch, per repetition:
random full level-0 tiles `GET /tile/0/<N>`, random bundles `GET /tile/entries/<N>` (gzip
accepted, as httpx does by default), `GET /checkpoint`, and as the baseline random JSON
inclusion proofs `GET /ledger/entries/{i}/proof`. Requests/s is requests / wall seconds of the
batch; p50 latency is client-side. Medians over the repetitions.

Run alone: `.venv/bin/python scripts/bench/bench_tiles.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from _common import (
    BATCH,
    TIMES,
    EventMaker,
    Goal,
    Measure,
    Section,
    fill_store,
    percentile,
    progress,
    run_alone,
    side_by_side,
    temp_root,
    timed,
    wait_healthy,
)

from accord.api.routes.tiles import BUNDLE_GZIP_LEVEL
from accord.ledger import merkle
from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.devnet import find_free_port
from accord.ledger.settings import Settings
from accord.ledger.store import LogStore
from accord.ledger.tiles import (
    TILE_WIDTH,
    encode_index,
    entry_bundle,
)
from accord.ledger.wiring import open_store, operator_signer

HERE = Path(__file__).resolve().parent
THREADS = 4
IN_PROCESS_CALLS = 500
HTTP_CALLS = 400
GOAL_TILE_RPS = 100.0
"""Ours (the issue sets none): as many tiles a second as bench_api's goal for signed reads."""


def service() -> Any:
    """The uvicorn factory (`bench_tiles:service`): the service over `$ACCORD_HOME`, its market
    wired with in-memory chains, rate limits far above the load."""
    from accord.api.app import create_app
    from accord.api.routes.deps import ApiConfig
    from accord.identity.onboarding import open_onboarding
    from accord.ledger.chain import DEVNET_OPERATOR_KEY, MemoryAnchorChain
    from accord.ledger.service import Ledger
    from accord.market.escrow import (
        EscrowActions,
        MemoryEscrowChain,
        MemoryEscrowJournal,
        address_of,
    )
    from accord.market.service import Market
    from accord.market.wiring import ChainEscrow, MarketContext

    settings = Settings.from_env()
    ledger = Ledger(open_store(settings), operator_signer(settings), lambda: datetime.now(UTC))
    onboarding = open_onboarding(settings, ledger)
    chain = MemoryEscrowChain(address_of(DEVNET_OPERATOR_KEY))
    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=0)
    escrow = ChainEscrow(chain, actions, DEVNET_OPERATOR_KEY)
    context = MarketContext(settings, onboarding, Market(ledger, onboarding, escrow), escrow)
    return create_app(
        settings,
        config=ApiConfig(rate=1e9, burst=1e9),
        context=context,
        anchors=MemoryAnchorChain(),
        escrow_chain=chain,
    )


def full_tile(store: LogStore, index: int) -> bytes:
    return store.tile(0, index, TILE_WIDTH)


def bundle(store: LogStore, index: int) -> bytes:
    first = index * TILE_WIDTH
    return entry_bundle(first, store.leaf_datas(first, first + TILE_WIDTH))


def _cross_check(store: LogStore, size: int) -> None:
    """Each level-1 hash is the tree hash of its full level-0 tile, and the tree's root
    recomputes from the tiles. Raises AssertionError otherwise."""
    full = size // TILE_WIDTH
    level_one = store.level_hashes(8, 0, full)  # every tile of level 1, full and partial
    for index in range(0, full, max(1, full // 20)):
        hashes = store.level_hashes(0, index * TILE_WIDTH, TILE_WIDTH)
        assert merkle.root(hashes) == level_one[index], f"level-1 hash {index} differs"
    pieces = merkle.perfect_subtrees(0, size)
    assert merkle.fold_right([_subtree(store, piece) for piece in pieces]) == store.root(size)


def _subtree(store: LogStore, node: merkle.NodeId) -> bytes:
    """A perfect subtree's hash from the tile level at or below it."""
    tile_level = node.level // 8
    below = node.level - 8 * tile_level
    hashes = store.level_hashes(8 * tile_level, node.position << below, 1 << below)
    return merkle.root(hashes)


class Load:
    """GETs from a thread pool, each thread with its own keep-alive client."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.pool = ThreadPoolExecutor(THREADS)
        self.local = threading.local()
        self.clients: list[httpx.Client] = []
        self.lock = threading.Lock()

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self.local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.base, timeout=30)
            self.local.client = client
            with self.lock:
                self.clients.append(client)
        return client

    def run(self, paths: Sequence[str]) -> tuple[float, list[float]]:
        """(requests/s, latencies in ms) of GETs of `paths`, all at once; each must be 200."""

        def one(path: str) -> float:
            start = time.perf_counter()
            response = self._client().get(path)
            if response.status_code != 200:
                raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
            return (time.perf_counter() - start) * 1_000

        start = time.perf_counter()
        latencies = list(self.pool.map(one, paths))
        return len(paths) / (time.perf_counter() - start), latencies

    def close(self) -> None:
        self.pool.shutdown()
        for client in self.clients:
            client.close()


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    size = 20_000 if quick else 100_000
    section = Section(
        key="tiles",
        title=f"tiles: C2SP tlog-tiles served from a log of {size:,} entries",
        method=__doc__ or "",
    )
    work = Path(tempfile.mkdtemp(prefix="accord-bench-tiles-", dir=temp_root()))
    home = work / "home"
    env = {"ACCORD_HOME": str(home), "ACCORD_LOG_ID": "bench-tiles"}
    settings = Settings.from_env(env)
    rng = random.Random(6962)
    server: subprocess.Popen[bytes] | None = None
    load: Load | None = None
    try:
        home.mkdir(parents=True)
        store = open_store(settings)
        build = fill_store(store, size, EventMaker(seed=6962), label="tiles: building ")
        take_checkpoint(store, operator_signer(settings), datetime.now(UTC))
        _cross_check(store, size)
        progress(f"tiles: log of {size:,} built at {build:,.0f} events/s; tiles agree")
        full = size // TILE_WIDTH
        sample = bundle(store, 0)
        ratio = len(gzip.compress(sample, BUNDLE_GZIP_LEVEL)) / len(sample)

        def tiles_in_process() -> float:
            picks = [rng.randrange(full) for _ in range(IN_PROCESS_CALLS)]
            return timed(IN_PROCESS_CALLS, lambda: [full_tile(store, n) for n in picks])

        def bundles_in_process() -> float:
            picks = [rng.randrange(full) for _ in range(IN_PROCESS_CALLS)]
            return timed(IN_PROCESS_CALLS, lambda: [bundle(store, n) for n in picks])

        def gzipped_in_process() -> float:
            picks = [rng.randrange(full) for _ in range(IN_PROCESS_CALLS)]
            level = BUNDLE_GZIP_LEVEL
            return timed(
                IN_PROCESS_CALLS, lambda: [gzip.compress(bundle(store, n), level) for n in picks]
            )

        def proofs_in_process() -> float:
            picks = [rng.randrange(size) for _ in range(IN_PROCESS_CALLS)]
            return timed(IN_PROCESS_CALLS, lambda: [store.inclusion_proof(i, size) for i in picks])

        proof = Measure(f"inclusion proof from the store @ {size:,}", "calls/s")
        tile = Measure("level-0 tile from the store", "calls/s", baseline=proof.name)
        entries = Measure("entry bundle from the store", "calls/s", baseline=proof.name)
        zipped = Measure("entry bundle from the store, gzipped", "calls/s", baseline=proof.name)
        section.measures += [proof, tile, entries, zipped]
        side_by_side(
            reps,
            [
                (proof, proofs_in_process),
                (tile, tiles_in_process),
                (entries, bundles_in_process),
                (zipped, gzipped_in_process),
            ],
            label="tiles in process: ",
        )
        store.engine.dispose()

        port = find_free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "bench_tiles:service", "--factory",
                "--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--log-level", "warning", "--no-access-log",
            ],
            env={**os.environ, **env, "PYTHONPATH": str(HERE.parents[1])},
        )  # fmt: skip
        wait_healthy(base, server)
        load = Load(base)
        load.run(["/checkpoint", "/tile/0/000", "/tile/entries/000"] * THREADS)  # warm-up
        http: dict[str, tuple[Measure, Measure]] = {}

        def over_http(name: str, paths: Callable[[], list[str]]) -> Callable[[], float]:
            rps = Measure(f"GET {name}, requests/s", "req/s")
            p50 = Measure(f"GET {name} latency p50", "ms")
            http[name] = (rps, p50)

            def go() -> float:
                assert load is not None
                per_s, latencies = load.run(paths())
                p50.samples.append(statistics.median(latencies))
                return per_s

            return go

        variants = [
            over_http(
                "/ledger/entries/{i}/proof",
                lambda: [f"/ledger/entries/{rng.randrange(size)}/proof" for _ in range(HTTP_CALLS)],
            ),
            over_http(
                "/tile/0/<N>",
                lambda: [f"/tile/0/{encode_index(rng.randrange(full))}" for _ in range(HTTP_CALLS)],
            ),
            over_http(
                "/tile/entries/<N> (gzip)",
                lambda: [
                    f"/tile/entries/{encode_index(rng.randrange(full))}" for _ in range(HTTP_CALLS)
                ],
            ),
            over_http("/checkpoint", lambda: ["/checkpoint"] * HTTP_CALLS),
        ]
        baseline = "GET /ledger/entries/{i}/proof, requests/s"
        pairs = []
        for (rps, p50), go in zip(http.values(), variants, strict=True):
            if rps.name != baseline:
                rps.baseline = baseline
            section.measures += [rps, p50]
            pairs.append((rps, go))
        side_by_side(reps, pairs, label="tiles over HTTP: ")
        tail = Load(base)
        _rps, latencies = tail.run(
            [f"/tile/0/{encode_index(rng.randrange(full))}" for _ in range(HTTP_CALLS)]
        )
        tail.close()
        tile_rps = http["/tile/0/<N>"][0]
        section.goals.append(
            Goal(f"GET /tile/0/<N> at {size:,} entries", GOAL_TILE_RPS, tile_rps.median, "req/s")
        )
        section.notes += [
            f"{size:,} entries built at {build:,.0f} signed events/s ({BATCH:,}/txn). A full "
            f"level-0 tile is {TILE_WIDTH * 32:,} bytes; a full bundle of these entries is "
            f"{len(sample):,} bytes, gzipped {ratio:.0%} of that.",
            f"In process, per call: a tile {1e6 / tile.median:,.0f} µs, a bundle "
            f"{1e6 / entries.median:,.0f} µs ({1e6 / zipped.median:,.0f} µs gzipped), one "
            f"inclusion proof {1e6 / proof.median:,.0f} µs. A tiled client needs one tile per "
            f"level for a proof (3 at this size) and caches them for good.",
            f"Over HTTP: {THREADS} client threads, one uvicorn worker; {HTTP_CALLS} requests per "
            f"variant per repetition. One more batch of level-0 tiles: p99 "
            f"{percentile(latencies, 0.99):.1f} ms. The load generator shares the machine's "
            f"cores with the server, so these are lower bounds; the ratios ({TIMES}) are against "
            "the JSON inclusion-proof route in the same run.",
        ]
    finally:
        if load is not None:
            load.close()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "C2SP tlog-tiles served from the log, in process and over HTTP")
