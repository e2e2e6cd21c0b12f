"""Shared pieces of the accord benchmarks: the machine, timing, signed entries, tables.

Every bench measures its variants side by side: each repetition runs every variant once, in a
rotating order, so the noise of this shared machine hits all of them alike. Results are the
median over the repetitions; ratios are against a baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from accord.ledger.database import make_engine
from accord.ledger.events import Entry
from accord.ledger.fast_entries import make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPS = 5
BATCH = 1_000
TIMES = "\u00d7"  # the multiplication sign

console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


# -- measurements ----------------------------------------------------------------------------


@dataclass
class Measure:
    """One variant of a bench: its samples (one per repetition), higher or lower is better."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    baseline: str | None = None
    """The name of the measure (same section) this one is compared with."""
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


@dataclass
class Goal:
    """A goal of the issue: `measured` (a median) against `target`, both in `unit`."""

    name: str
    target: float
    measured: float
    unit: str
    higher_is_better: bool = True

    @property
    def passed(self) -> bool:
        if self.measured != self.measured:  # NaN: not measured
            return False
        if self.higher_is_better:
            return self.measured >= self.target
        return self.measured <= self.target


@dataclass
class Section:
    """What one bench reports."""

    key: str
    title: str
    method: str
    measures: list[Measure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def measure(self, name: str) -> Measure:
        return next(m for m in self.measures if m.name == name)

    def ratio(self, measure: Measure) -> float | None:
        if measure.baseline is None:
            return None
        base = self.measure(measure.baseline).median
        return measure.median / base if base else None


def timed(count: int, work: Callable[[], object]) -> float:
    """`count / seconds` for one call of `work`."""
    start = time.perf_counter()
    work()
    return count / (time.perf_counter() - start)


def side_by_side(
    reps: int, variants: Sequence[tuple[Measure, Callable[[], float]]], label: str = ""
) -> None:
    """Run each variant once per repetition (rotating the order); append each sample."""
    for rep in range(reps):
        shift = rep % len(variants)
        for measure, run in [*variants[shift:], *variants[:shift]]:
            measure.samples.append(run())
        progress(f"{label}rep {rep + 1}/{reps} done")


def progress(message: str) -> None:
    console.print(f"[dim]  … {message}[/dim]")


def percentile(values: Sequence[float], share: float) -> float:
    """The value below which `share` of `values` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def wait_healthy(base: str, server: subprocess.Popen[bytes], seconds: float = 30) -> None:
    """Wait until the service at `base` answers /health. Raises RuntimeError when `server`
    exits or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {server.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("uvicorn did not answer /health in time")


# -- signed entries --------------------------------------------------------------------------


class EventMaker:
    """Signed events from a few actors (round robin, each with its own growing seq)."""

    def __init__(self, actors: int = 8, seed: int = 1) -> None:
        rng = random.Random(seed)
        self.signers = [Ed25519Signer(rng.randbytes(32)) for _ in range(actors)]
        self.seqs = [0] * actors
        self.count = 0

    def batch(self, size: int) -> list[Entry]:
        """`size` new signed entries (`make_entry`: build, JCS, Ed25519)."""
        now = datetime.now(UTC)
        out: list[Entry] = []
        signers, seqs = self.signers, self.seqs
        actors = len(signers)
        for _ in range(size):
            i = self.count
            a = i % actors
            out.append(
                make_entry(
                    signers[a],
                    kind="bench.event",
                    seq=seqs[a],
                    at=now,
                    subject=f"bench/{i // BATCH}",
                    body={"n": i, "note": "benchmark event"},
                )
            )
            seqs[a] += 1
            self.count += 1
        return out


def new_store(directory: Path, name: str = "log.db", log_id: str = "bench") -> LogStore:
    """A LogStore on a fresh SQLite file (the production engine: WAL, synchronous=FULL)."""
    return LogStore(make_engine(f"sqlite:///{directory / name}"), log_id)


def fill_store(store: LogStore, count: int, maker: EventMaker, label: str = "") -> float:
    """Append `count` freshly signed entries in batches of BATCH; returns events/s."""
    start = time.perf_counter()
    done = 0
    next_report = max(count // 5, BATCH)
    while done < count:
        size = min(BATCH, count - done)
        store.append_batch(maker.batch(size))
        done += size
        if label and done >= next_report and done < count:
            progress(f"{label}{done:,}/{count:,} entries")
            next_report += max(count // 5, BATCH)
    return count / (time.perf_counter() - start)


# -- the machine -----------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _anvil_version() -> str:
    try:
        from accord.ledger.devnet import find_anvil

        out = subprocess.run(
            [str(find_anvil()), "--version"], capture_output=True, text=True, timeout=20
        )
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except Exception as exc:  # a description, never fatal
        return f"unavailable ({exc})"


def machine() -> dict[str, str]:
    """CPU, cores, memory, OS, Python and the versions of what the benches exercise."""
    cpu = "unknown"
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        cpu = platform.processor() or "unknown"
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    extensions = [f for f in ("sha_ni", "avx2", "aes") if f" {f}" in flags]
    libs = ", ".join(
        f"{name} {_version(name)}"
        for name in ("PyNaCl", "SQLAlchemy", "sqlmodel", "pymerkle", "web3", "rfc8785", "rich")
    )
    return {
        "CPU": cpu + (f" ({', '.join(extensions)})" if extensions else ""),
        "Cores": f"{os.cpu_count()} logical (shared, noisy)",
        "Memory": memory,
        "OS": f"{platform.system()} {platform.release()} {platform.machine()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "SQLite": sqlite3.sqlite_version,
        "OpenSSL": _openssl(),
        "Libraries": libs,
        "anvil": _anvil_version(),
    }


def _openssl() -> str:
    import ssl

    return ssl.OPENSSL_VERSION


# -- command line and output -----------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    args = argparse.ArgumentParser(description=description)
    args.add_argument("--quick", action="store_true", help="a smaller, faster run")
    args.add_argument(
        "--reps", type=int, default=None, help=f"repetitions (default {DEFAULT_REPS}, quick 3)"
    )
    return args


def reps_of(options: argparse.Namespace) -> int:
    if options.reps is not None:
        return max(1, int(options.reps))
    return 3 if options.quick else DEFAULT_REPS


def number(value: float) -> str:
    if value != value:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    return f"{value:,.3g}"


def ratio_text(value: float | None) -> str:
    if value is None:
        return "baseline"
    if value >= 10:
        return f"{value:,.0f}{TIMES}"
    if value >= 0.1:
        return f"{value:.2f}{TIMES}"
    return f"1/{1 / value:,.0f}" if value > 0 else "n/a"


def measures_table(section: Section) -> Table:
    table = Table(title=section.title, title_justify="left")
    for column, justify in (
        ("measurement", "left"),
        ("median", "right"),
        ("unit", "left"),
        ("min … max", "right"),
        ("n", "right"),
        ("vs", "right"),
        ("baseline", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for m in section.measures:
        spread = f"{number(min(m.samples))} … {number(max(m.samples))}" if m.samples else "—"
        table.add_row(
            m.name,
            number(m.median),
            m.unit,
            spread,
            str(len(m.samples)),
            ratio_text(section.ratio(m)) if m.baseline else "",
            m.baseline or "",
        )
    return table


def goals_table(sections: Sequence[Section], title: str = "Goals") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("bench", "goal", "target", "measured (median)", "result"):
        table.add_column(column, justify="right" if column != "goal" else "left")
    for section in sections:
        if section.error is not None:
            table.add_row(section.key, "bench failed: " + section.error, "", "", "[red]FAIL[/red]")
        for goal in section.goals:
            sign = "≥" if goal.higher_is_better else "≤"
            table.add_row(
                section.key,
                goal.name,
                f"{sign} {number(goal.target)} {goal.unit}",
                f"{number(goal.measured)} {goal.unit}",
                "[green]PASS[/green]" if goal.passed else "[red]FAIL[/red]",
            )
    return table


def show(section: Section) -> None:
    console.print()
    console.print(measures_table(section))
    for note in section.notes:
        console.print(f"  • {note}")
    console.print()
    console.print(goals_table([section], title=f"Goals ({section.key})"))
    console.print(f"[dim]{section.key}: {section.seconds:.0f} s[/dim]")


def run_alone(run: Callable[[bool, int], Section], description: str) -> None:
    """`main()` of a bench run on its own: print its tables; exit 1 when a goal fails."""
    options = parser(description).parse_args()
    section = run(options.quick, reps_of(options))
    show(section)
    sys.exit(0 if section.error is None and all(g.passed for g in section.goals) else 1)


def temp_root() -> Path:
    """Where benches put their databases (a tmp dir; removed by the caller)."""
    return Path(os.environ.get("ACCORD_BENCH_TMP", "/tmp"))


def chunks(items: Sequence[bytes], size: int) -> Iterator[Sequence[bytes]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
