"""Every row of some read views, to compare a view rebuilt from the log with the one kept."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import select

from accord.ledger.views import Projection


def view_rows(connection: Any, projections: Iterable[Projection]) -> Iterator[tuple[Any, ...]]:
    """Every row of the projections' tables, each table in primary-key order, prefixed by the
    table's name: two views are the same when these are (a rebuild is compared so)."""
    for projection in projections:
        for table in projection.tables:
            order = list(table.primary_key.columns)
            for row in connection.execute(select(table).order_by(*order)):
                yield (table.name, *tuple(row))
