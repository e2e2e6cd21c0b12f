"""A hostile operator's corpus: SQL edits of the stored log that leave the signed bytes, the
tree nodes and the anchors untouched.

The audit must not trust what the operator can edit: the indexed copies of each entry
(`ledger_entries.actor`, `seq`, `kind`, `subject`, `at`; see ledger/database.py) and the rows
themselves. One case per (entry kind of the log, column) and one deletion per entry kind;
`tests/audit/test_hostile_operator.py` runs every case through both `accord audit` and
`ledger verify` and checks that each fails at the step that names it:

==========================  ======================  ========================
edit                        audit (step, entry)     ledger verify (step, entry)
==========================  ======================  ========================
a column of entry k         (1, k)                  (1, k)
row k deleted               (1, k)                  (3, k)
==========================  ======================  ========================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accord.ledger.events import Entry, format_time, parse_time
from tests.audit.conftest import World, sql

Edit = Callable[[Path], None]
COLUMNS = ("kind", "subject", "actor", "seq", "at")


@dataclass(frozen=True)
class HostileCase:
    name: str
    index: int
    edit: Edit
    audit_step: int
    verify_step: int


def hostile_cases(world: World) -> list[HostileCase]:
    """Every column of the first entry of each kind in the world's log, and its deletion."""
    store = world.ledger.store
    firsts: dict[str, int] = {}
    entries: dict[int, Entry] = {}
    for stored in store.entries(0, store.size()):
        entry = Entry.from_bytes(stored.data)
        entries[stored.index] = entry
        firsts.setdefault(entry.event.kind, stored.index)
    operator = world.ledger.operator.did
    someone = world.agents["ada"].did
    cases = []
    for kind, index in sorted(firsts.items()):
        event = entries[index].event
        values: dict[str, object] = {
            "kind": "note.added",
            "subject": f"{event.subject}-elsewhere",
            "actor": someone if event.actor == operator else operator,
            "seq": event.seq + 1,
            "at": format_time(parse_time(event.at).replace(year=2020)),
        }
        for column in COLUMNS:
            cases.append(
                HostileCase(
                    f"{kind}:{column}",
                    index,
                    _update(index, column, values[column]),
                    audit_step=1,
                    verify_step=1,
                )
            )
        cases.append(HostileCase(f"{kind}:deleted", index, _delete(index), 1, 3))
    return cases


def _update(index: int, column: str, value: object) -> Edit:
    def edit(path: Path) -> None:
        sql(path, f"UPDATE ledger_entries SET {column} = ? WHERE idx = ?", (value, index))

    return edit


def _delete(index: int) -> Edit:
    def edit(path: Path) -> None:
        sql(path, "DELETE FROM ledger_entries WHERE idx = ?", (index,))

    return edit
