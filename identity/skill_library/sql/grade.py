"""Grades a `sql` answer: both queries run against two hidden data sets; the rows must agree."""

import random
import sqlite3
from typing import Any

CITIES = ["Kelvaholm", "Drumouth", "Vraelby", "Stoughford", "Quenwick"]
STATUSES = ["paid", "refunded", "pending"]
MAX_ROWS = 10_000


def _database(schema: str, seed: int) -> sqlite3.Connection:
    rng = random.Random(seed)
    db = sqlite3.connect(":memory:")
    db.executescript(schema)
    customers = [(i, f"Customer {i}", rng.choice(CITIES)) for i in range(1, 41)]
    db.executemany("INSERT INTO customers VALUES (?, ?, ?)", customers)
    orders = [
        (i, rng.randint(1, 40), rng.randrange(100, 12_000), rng.choice(STATUSES))
        for i in range(1, 301)
    ]
    db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
    return db


def _rows(db: sqlite3.Connection, query: str) -> list[str] | None:
    try:
        rows = db.execute(query).fetchmany(MAX_ROWS + 1)
    except (sqlite3.Error, sqlite3.Warning):
        return None
    if len(rows) > MAX_ROWS:
        return None
    return sorted(repr(tuple(row)) for row in rows)


def grade(input: dict[str, Any], expected: dict[str, Any], answer: Any) -> bool:
    if not isinstance(answer, dict) or not isinstance(answer.get("sql"), str):
        return False
    query = answer["sql"].strip().rstrip(";")
    if not query.lower().startswith(("select", "with")) or ";" in query:
        return False
    for seed in (1, 2):
        db = _database(input["schema"], seed)
        want = _rows(db, expected["sql"])
        got = _rows(db, query)
        if want is None or got != want:
            return False
    return True
