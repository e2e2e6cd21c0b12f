"""Cheaper runs of the tampering tests (test_tamper.py, test_tamper_rows.py and
tests/audit/test_hostile_operator.py), checking exactly the same things.

Two costs repeat in each of their ~1,400 verifications without being what any case tests:

* libsodium checking again the signatures of the entries a mutation left alone: two thirds of
  `verify_log`'s CPU. `remembered_signature_checks` remembers each (key, message, signature)
  that verified, for one test module. A check of any other bytes (a mutated entry, a forged
  one) and every check that fails still runs for real, so each report is the very one an
  unremembered run gives: `verify_signature` is a pure function of those three values.
* re-opening the database per case (a new file, a new connection put in WAL mode, a cold page
  cache). `Scratch` restores the pristine content in place instead (SQLite's backup API, from
  a copy held in memory), so the engine `verify_log` reads through stays connected; each run
  still opens a fresh `LogStore` on it, as `ledger verify` would.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from accord.ledger import signing
from accord.ledger.database import make_engine
from accord.ledger.store import LogStore
from accord.ledger.verify import VerificationReport, verify_log
from tests.ledger.conftest import LOG_ID
from tests.ledger.tamper import Apply, Lab, Pristine


@contextmanager
def remembered_signature_checks() -> Iterator[set[tuple[str, bytes, bytes]]]:
    """While open, entries' and checkpoints' signature checks that passed once pass again
    without libsodium for the same (did, message, signature); yields what was remembered."""
    real = signing.verify_signature
    users = ("accord.ledger.events", "accord.ledger.checkpoint")  # verify entries, checkpoints
    assert all(vars(sys.modules[name])["verify_signature"] is real for name in users)
    passed: set[tuple[str, bytes, bytes]] = set()

    def verify(did: str, message: bytes, signature: bytes) -> None:
        key = (did, bytes(message), bytes(signature))
        if key in passed:
            return
        real(did, message, signature)  # raises when it does not verify: never remembered
        passed.add(key)

    with pytest.MonkeyPatch.context() as patch:
        for name in users:
            patch.setattr(f"{name}.verify_signature", verify)
        yield passed


class Scratch:
    """A scratch SQLite file that `edit` resets to the pristine content before each mutation,
    and one engine on it that stays connected across resets."""

    def __init__(self, pristine: sqlite3.Connection, path: Path) -> None:
        self.pristine = pristine
        self.path = path
        with closing(sqlite3.connect(path)) as target:
            pristine.backup(target)
        self.writer = sqlite3.connect(path, isolation_level=None)
        self.writer.execute("PRAGMA synchronous=OFF")  # a scratch copy: no fsync per case
        self.engine = make_engine(f"sqlite:///{path}")

    @classmethod
    def of_image(cls, image: bytes, path: Path) -> Scratch:
        """Over the bytes of a whole (non-WAL) SQLite file."""
        pristine = sqlite3.connect(":memory:")
        pristine.deserialize(image)
        return cls(pristine, path)

    @classmethod
    def of_file(cls, source: Path, path: Path) -> Scratch:
        """Over a consistent copy of the SQLite database at `source` (WAL included)."""
        pristine = sqlite3.connect(":memory:")
        with closing(sqlite3.connect(source)) as db:
            db.backup(pristine)
        return cls(pristine, path)

    def reset(self) -> None:
        """Every page of the scratch file back to the pristine one."""
        self.pristine.backup(self.writer)

    def edit(self, apply: Apply) -> None:
        """Reset, then `apply` in one transaction."""
        self.reset()
        self.writer.execute("BEGIN")
        apply(self.writer)
        self.writer.execute("COMMIT")

    def dump(self) -> list[str]:
        return list(self.writer.iterdump())

    def pristine_dump(self) -> list[str]:
        return list(self.pristine.iterdump())

    def close(self) -> None:
        self.engine.dispose()
        self.writer.close()
        self.pristine.close()


class WarmLab(Lab):
    """The tampering `Lab` over a `Scratch`: same mutations, same fresh `LogStore` and
    `verify_log` per run, without rewriting and re-opening the file."""

    def __init__(self, pristine: Pristine, directory: Path) -> None:
        self.pristine = pristine
        self.scratch = Scratch.of_image(pristine.image, directory / "work.db")
        self.path = self.scratch.path
        self.engine = self.scratch.engine

    def run(self, apply: Apply) -> VerificationReport:
        self.scratch.edit(apply)
        return verify_log(LogStore(self.engine, LOG_ID), self.pristine.operator.did, None)

    def close(self) -> None:
        self.scratch.close()
