"""Exam items of the `sql` skill: a question over a small shop schema, and the oracle query."""

import random
from typing import Any

SCHEMA = """CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
  amount_cents INTEGER NOT NULL, status TEXT NOT NULL);"""
CITIES = ["Kelvaholm", "Drumouth", "Vraelby", "Stoughford", "Quenwick"]
STATUSES = ["paid", "refunded", "pending"]


def _item(rng: random.Random) -> tuple[str, str]:
    family = rng.randrange(5)
    status = rng.choice(STATUSES)
    city = rng.choice(CITIES)
    floor = rng.randrange(10, 90) * 100
    if family == 0:
        return (
            f"What is the total amount_cents of orders with status '{status}'? "
            "One row, one column.",
            f"SELECT COALESCE(SUM(amount_cents), 0) FROM orders WHERE status = '{status}'",
        )
    if family == 1:
        return (
            f"How many orders have amount_cents above {floor}? One row, one column.",
            f"SELECT COUNT(*) FROM orders WHERE amount_cents > {floor}",
        )
    if family == 2:
        return (
            f"List the names of customers in {city} who have at least one '{status}' order, "
            "each name once.",
            "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
            f"WHERE c.city = '{city}' AND o.status = '{status}'",
        )
    if family == 3:
        return (
            f"For each city, the number of orders with status '{status}' placed by its "
            "customers: rows of (city, count), cities with none left out.",
            "SELECT c.city, COUNT(*) FROM customers c JOIN orders o ON o.customer_id = c.id "
            f"WHERE o.status = '{status}' GROUP BY c.city",
        )
    return (
        f"The ids of customers in {city} whose orders total more than {floor * 3} amount_cents "
        "(all statuses counted).",
        "SELECT c.id FROM customers c JOIN orders o ON o.customer_id = c.id "
        f"WHERE c.city = '{city}' GROUP BY c.id HAVING SUM(o.amount_cents) > {floor * 3}",
    )


def generate(seed: str, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        question, query = _item(rng)
        items.append({"input": {"schema": SCHEMA, "question": question}, "answer": {"sql": query}})
    return items
