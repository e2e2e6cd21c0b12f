"""Task specs the tests post: the requester's own work, the demo's invoice.

`invoice_request()` is a spec as a requester writes it (the body of `POST /tasks`, the file of
`accord task post --spec`), with the invoice inline; `invoice_spec()` is it parsed. Its parts
need arithmetic and extraction, two of each, so a member given a capability's batch can team up.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from accord.market.money import Wei, parse_amount
from accord.market.tasks import TaskSpec, spec_from_request

INVOICE_PATH = Path(__file__).resolve().parents[1] / "scripts" / "demo_work" / "invoice.txt"
INVOICE = INVOICE_PATH.read_text()

TOTALS_AGREE = """
from fractions import Fraction


def check(outputs):
    lines = Fraction(str(outputs["lines-sum"]))
    tax = Fraction(str(outputs["tax"]))
    total = Fraction(outputs["invoice-fields"]["total"])
    return abs(lines + tax - total) <= Fraction(1, 100)
"""


def field(kind: str, description: str) -> dict[str, str]:
    return {"type": kind, "description": description}


def invoice_parts(document: Any = INVOICE) -> list[dict[str, Any]]:
    return [
        {
            "id": "lines-sum",
            "capability": "arithmetic",
            "input": {
                "kind": "figures",
                "figures": ["1200.00", "845.50", "540.00"],
                "operation": "sum",
            },
        },
        {
            "id": "tax",
            "capability": "arithmetic",
            "input": {"kind": "expression", "expression": "258550 * 21 / 10000"},
        },
        {
            "id": "invoice-fields",
            "capability": "extraction",
            "input": {
                "document": document,
                "fields": {
                    "invoice_number": field("text", "the invoice's number"),
                    "total": field("amount", "the total payable, tax included"),
                    "currency": field("currency", "the currency of the amounts"),
                },
            },
        },
        {
            "id": "invoice-dates",
            "capability": "extraction",
            "input": {
                "document": document,
                "fields": {
                    "issue_date": field("date", "the date the invoice was issued"),
                    "due_date": field("date", "the date payment is due"),
                },
            },
        },
    ]


INVOICE_CHECKS: list[dict[str, Any]] = [
    {
        "id": "sum-right",
        "weight": 3,
        "kind": "expect",
        "part": "lines-sum",
        "path": "$",
        "within": "2585.50",
        "tolerance": "0.005",
    },
    {
        "id": "tax-right",
        "weight": 2,
        "kind": "expect",
        "part": "tax",
        "path": "$",
        "within": "542.955",
        "tolerance": "0.01",
    },
    {
        "id": "total-right",
        "weight": 2,
        "kind": "expect",
        "part": "invoice-fields",
        "path": "$.total",
        "equals": "3128.46",
    },
    {
        "id": "due-date",
        "weight": 1,
        "kind": "expect",
        "part": "invoice-dates",
        "path": "$.due_date",
        "matches": "2026-11-13",
    },
    {
        "id": "dates-shape",
        "weight": 1,
        "kind": "schema",
        "part": "invoice-dates",
        "schema": {"type": "object", "required": ["issue_date", "due_date"]},
    },
    {
        "id": "totals-agree",
        "weight": 2,
        "kind": "python",
        "reads": ["lines-sum", "tax", "invoice-fields"],
        "code": TOTALS_AGREE,
    },
]


def invoice_request(**terms: Any) -> dict[str, Any]:
    """The invoice task as a requester writes it; `terms` override title, budget, windows…"""
    request: dict[str, Any] = {
        "title": "Check the invoice",
        "description": "Sum the line items, compute the tax, extract the total and the dates.",
        "budget": "0.5eth",
        "bidding": "60s",
        "reveal": "60s",
        "delivery": "30m",
        "parts": invoice_parts(),
        "checks": INVOICE_CHECKS,
    }
    request.update(terms)
    return request


def invoice_spec(**terms: Any) -> TaskSpec:
    return spec_from_request(invoice_request(**terms), {})


def single_part_spec(
    capability: str = "arithmetic", *, budget: Wei | None = None, window_s: int = 60
) -> TaskSpec:
    """One part of `capability` with its example input, checked by its output schema and an
    expect check on the example's output."""
    from accord.identity.challenges import REGISTRY

    example_input, example_output = REGISTRY[capability].example()
    return spec_from_request(
        {
            "title": f"One {capability} part",
            "budget": "0.5eth",
            "bidding": f"{window_s}s",
            "reveal": f"{window_s}s",
            "delivery": "30m",
            "parts": [{"id": "part", "capability": capability, "input": example_input}],
            "checks": [
                {
                    "id": "right",
                    "weight": 1,
                    "kind": "expect",
                    "part": "part",
                    "path": "$",
                    "equals": example_output,
                },
            ],
        },
        {},
        budget=budget or parse_amount("0.5eth"),
    )


WINDOW = timedelta(seconds=60)


JUDGE_CHECKS: list[dict[str, Any]] = [
    {
        "id": "fields-plausible",
        "weight": 2,
        "kind": "judge",
        "reads": ["invoice-fields"],
        "criterion": "The invoice number, total and currency are plausible for an invoice.",
    },
    {
        "id": "dates-consistent",
        "weight": 1,
        "kind": "judge",
        "reads": ["invoice-dates", "invoice-fields"],
        "criterion": "The due date falls after the issue date.",
        "pass_score": 8,
        "model": "local-judge-large",
    },
]


def invoice_spec_with(*extra: dict[str, Any], **terms: Any) -> TaskSpec:
    """The invoice task with the checks `extra` added to its own (judge, review checks…)."""
    return spec_from_request(invoice_request(checks=[*INVOICE_CHECKS, *extra], **terms), {})
