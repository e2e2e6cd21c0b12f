"""Fixtures for the ledger tests: stores on SQLite and PostgreSQL, signers, signed entries.

`db_url` (and so `open_store` and `store`) is parametrized over two backends:

* ``sqlite``: a file database under ``tmp_path``, through ``make_engine("sqlite:///...")``;
* ``postgres``: marked ``postgres``; skipped with a reason when ``ACCORD_TEST_PG_URL`` is unset
  (run ``scripts/with_postgres.sh .venv/bin/pytest tests/ledger``). Each test gets a fresh
  schema on that server (the URL carries ``options=-csearch_path=<schema>``), dropped after the
  test, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
from sqlalchemy import Engine, create_engine, text

from accord.ledger.database import make_engine
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore

if TYPE_CHECKING:  # tamper.py imports this module; the fixtures below import it when run
    from tests.ledger.tamper import Corpus, Lab, Pristine

PG_ENV = "ACCORD_TEST_PG_URL"
PG_SKIP_REASON = (
    f"PostgreSQL tests need {PG_ENV}; run them with "
    "`scripts/with_postgres.sh .venv/bin/pytest tests/ledger`"
)
LOG_ID = "test-log"
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
KINDS = ("task.posted", "bid.committed", "bid.revealed", "conversation.message", "note.added")


def signer_from(label: str) -> Ed25519Signer:
    """A deterministic Ed25519 signer named by `label` (so test data is reproducible)."""
    seed = label.encode().ljust(32, b".")[:32]
    return Ed25519Signer(seed)


@pytest.fixture
def operator() -> Ed25519Signer:
    """The network operator: signs checkpoints."""
    return signer_from("operator")


@pytest.fixture
def actors() -> list[Ed25519Signer]:
    """Five agents that sign events."""
    return [signer_from(f"actor-{i}") for i in range(5)]


@dataclass
class EntryMaker:
    """Signs entries for a few actors with strictly growing seqs and a growing clock."""

    signers: Sequence[Ed25519Signer]
    next_seq: dict[str, int] = field(default_factory=dict)
    made: int = 0

    def one(self, signer: Ed25519Signer, *, seq: int | None = None) -> Entry:
        """The next entry of `signer` (or one with the given `seq`, which then becomes its last)."""
        if seq is None:
            seq = self.next_seq.get(signer.did, 1)
        self.next_seq[signer.did] = max(self.next_seq.get(signer.did, 1), seq + 1)
        self.made += 1
        return make_entry(
            signer,
            kind=KINDS[self.made % len(KINDS)],
            seq=seq,
            at=START + timedelta(seconds=self.made),
            subject=f"task-{self.made % 7}",
            body={"n": self.made, "note": f"entry {self.made} by {signer.did[-6:]}"},
        )

    def many(self, count: int, pick: Callable[[int], int] | None = None) -> list[Entry]:
        """`count` entries, actor `pick(i)` (default: round robin) for the i-th."""
        base = self.made
        choose = pick or (lambda i: (base + i) % len(self.signers))
        return [self.one(self.signers[choose(i)]) for i in range(count)]


@pytest.fixture
def maker(actors: list[Ed25519Signer]) -> EntryMaker:
    return EntryMaker(actors)


def append_signed(
    store: LogStore,
    maker: EntryMaker,
    count: int,
    *,
    batch: int = 1,
    pick: Callable[[int], int] | None = None,
) -> list[Entry]:
    """Append `count` signed entries from the maker's actors, `batch` per transaction.

    Returns the entries in log order; checks that the store hands back contiguous indices.
    """
    entries = maker.many(count, pick)
    for start in range(0, count, batch):
        chunk = entries[start : start + batch]
        first = store.size()
        assert store.append_batch(chunk) == list(range(first, first + len(chunk)))
    return entries


def _pg_url_with_schema(base: str, schema: str) -> str:
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL for an empty log database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'log.db'}"
        return
    with postgres_schema_url() as url:
        yield url


@contextmanager
def postgres_schema_url() -> Iterator[str]:
    """A URL on the throwaway PostgreSQL (ACCORD_TEST_PG_URL) with a fresh schema of its own,
    dropped afterwards; the test is skipped when no PostgreSQL is configured (`make test`
    always configures one, through scripts/with_postgres.sh)."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_SKIP_REASON)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield _pg_url_with_schema(base, schema)
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()


@pytest.fixture
def backend(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else "postgres"


@pytest.fixture
def open_engine(db_url: str) -> Iterator[Callable[[], Engine]]:
    """Makes engines on `db_url` (each its own pool); all are disposed after the test."""
    engines: list[Engine] = []

    def make() -> Engine:
        engine = make_engine(db_url)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()


@pytest.fixture
def open_store(open_engine: Callable[[], Engine]) -> Callable[..., LogStore]:
    """Opens a LogStore on `db_url` through a new engine: several may share one database."""

    def make(log_id: str = LOG_ID) -> LogStore:
        return LogStore(open_engine(), log_id)

    return make


@pytest.fixture
def store(open_store: Callable[..., LogStore]) -> LogStore:
    """An empty log on each backend."""
    return open_store()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """The tampering lab's pristine log (tests/ledger/tamper.py), built once per test file."""
    from tests.ledger.tamper import build_pristine

    return build_pristine(tmp_path_factory.mktemp("tamper"))


@pytest.fixture(scope="module")
def lab(pristine: Pristine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Applies one mutation to a copy of `pristine` and verifies it; the copy is reset in
    place between mutations (tests/ledger/warm_lab.py)."""
    from tests.ledger.warm_lab import WarmLab

    lab = WarmLab(pristine, tmp_path_factory.mktemp("lab"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="module")
def corpus(pristine: Pristine, lab: Lab) -> Corpus:
    """The seeded mutations of `pristine`, run by class when first asked for."""
    from tests.ledger.tamper import Corpus

    return Corpus(pristine, lab)
