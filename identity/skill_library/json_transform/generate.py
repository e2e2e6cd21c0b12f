"""Exam items of the `json-transform` skill: a document, a target schema and the oracle's result."""

import random
from typing import Any

FIRST = ["Thaeris", "Vrolen", "Kaedra", "Mirou", "Stelvin", "Brisa", "Oundel", "Zyra"]
LAST = ["Quolven", "Drathmore", "Keldwick", "Farrow", "Ysmere", "Tolbane", "Wrenholt"]
ITEMS = ["bolt", "gasket", "valve", "washer", "flange", "bearing", "spring"]


def _person(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    year, month, day = rng.randint(1950, 2005), rng.randint(1, 12), rng.randint(1, 28)
    email = f"{first.lower()}.{rng.randint(10, 99)}@example.org"
    document = {
        "first_name": first,
        "last_name": last,
        "birth": {"year": year, "month": month, "day": day},
        "contacts": [{"type": "email", "value": email}],
    }
    schema = {
        "type": "object",
        "properties": {
            "full_name": {"type": "string", "description": "first name, a space, last name"},
            "born": {"type": "string", "description": "date of birth as YYYY-MM-DD"},
            "email": {"type": "string", "description": "the email contact's value"},
        },
        "required": ["full_name", "born", "email"],
        "additionalProperties": False,
    }
    result = {
        "full_name": f"{first} {last}",
        "born": f"{year:04d}-{month:02d}-{day:02d}",
        "email": email,
    }
    return document, schema, result


def _order(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    lines: list[tuple[str, int, int]] = [
        (rng.choice(ITEMS), rng.randint(1, 9), rng.randrange(50, 5000))
        for _ in range(rng.randint(2, 5))
    ]
    reference = f"PO-{rng.randint(10000, 99999)}"
    document = {
        "order": {
            "ref": reference,
            "lines": [{"sku": sku, "qty": qty, "unit_cents": unit} for sku, qty, unit in lines],
        }
    }
    schema = {
        "type": "object",
        "properties": {
            "reference": {"type": "string", "description": "the order's ref"},
            "line_count": {"type": "integer", "description": "how many lines the order has"},
            "total_cents": {"type": "integer", "description": "sum over lines of qty * unit_cents"},
            "skus": {
                "type": "array",
                "items": {"type": "string"},
                "description": "each distinct sku once, sorted alphabetically",
            },
        },
        "required": ["reference", "line_count", "total_cents", "skus"],
        "additionalProperties": False,
    }
    result = {
        "reference": reference,
        "line_count": len(lines),
        "total_cents": sum(qty * unit for _, qty, unit in lines),
        "skus": sorted({sku for sku, _, _ in lines}),
    }
    return document, schema, result


def generate(seed: str, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        document, schema, result = rng.choice([_person, _order])(rng)
        items.append(
            {"input": {"document": document, "target_schema": schema}, "answer": {"result": result}}
        )
    return items
