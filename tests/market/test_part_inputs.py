"""Parts that feed one another (issue 44, item 7): a part's input may name another part's
output (`{"$part": "net"}`). The spec is refused when the graph has a cycle or names a missing
part; parts are made in dependency order; a check reads the parts its parts are made of (a
check on `vat` passes for a coalition only if it made `net` too); a member is given only the
outputs their producers reported. All pure."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from accord.kit.assignments import opened_inputs, part_item, reported_outputs
from accord.ledger.sealing import seal
from accord.market.checks import Delivered, evaluate, valuation
from accord.market.errors import WorkError
from accord.market.privacy import paid_parts
from accord.market.tasks import Task, spec_from_request
from accord.market.work import (
    ExpectCheck,
    Part,
    dependency_order,
    part_dependencies,
    upstream,
)

NET = {"kind": "figures", "figures": ["120.50", "33.20", "9.99"], "operation": "sum"}
VAT = {"kind": "figures", "figures": [{"$part": "net"}, "0.2"], "operation": "product"}


def vat_request(parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Sum the lines, then the VAT on the sum: one task."""
    return {
        "title": "Net and VAT",
        "budget": "0.5eth",
        "parts": parts
        or [
            {"id": "vat", "capability": "arithmetic", "input": VAT},
            {"id": "net", "capability": "arithmetic", "input": NET},
        ],
        "checks": [
            {"id": "net-right", "weight": 1, "kind": "expect", "part": "net", "path": "$",
             "within": "163.69", "tolerance": "0.005"},
            {"id": "vat-right", "weight": 3, "kind": "expect", "part": "vat", "path": "$",
             "within": "32.738", "tolerance": "0.0005"},
        ],
    }  # fmt: skip


def refused(parts: list[dict[str, Any]]) -> WorkError:
    with pytest.raises(WorkError) as caught:
        spec_from_request(vat_request(parts), {})
    return caught.value


def arithmetic(part_id: str, figures: list[Any]) -> dict[str, Any]:
    return {
        "id": part_id,
        "capability": "arithmetic",
        "input": {"kind": "figures", "figures": figures, "operation": "sum"},
    }


def test_a_spec_whose_parts_feed_one_another_in_a_cycle_is_refused_naming_it() -> None:
    error = refused(
        [
            arithmetic("a", ["1"]),
            arithmetic("b", [{"$part": "c"}]),
            arithmetic("c", [{"$part": "d"}, "2"]),
            arithmetic("d", [{"$part": "b"}]),
        ]
    )
    assert "cycle (b -> c -> d -> b)" in str(error) and error.path == "$.parts[1].input"


@pytest.mark.parametrize(
    ("figures", "says", "path"),
    [
        ([{"$part": "gross"}], "names no part 'gross' (the other parts: net)", "$.parts[1].input"),
        ([{"$part": "vat"}], "cannot be made of its own output", "$.parts[1].input"),
        ([{"$part": "Net!"}], "is not a part id", "$.parts[1].input.figures[0].$part"),
        ([{"$part": "net", "x": 1}], 'is {"$part": "<part id>"} alone', "$.parts[1].input"),
    ],
)
def test_a_reference_to_no_part_is_refused_with_its_path(
    figures: list[Any], says: str, path: str
) -> None:
    error = refused([arithmetic("net", ["1"]), arithmetic("vat", figures)])
    assert says in str(error) and error.path.startswith(path), (str(error), error.path)


def test_an_input_is_checked_with_the_output_it_will_be_given() -> None:
    """An extraction part's output (an object) cannot stand where a figure (a string) goes."""
    document = {"kind": "invoice", "document": "INVOICE", "fields": {
        "total": {"type": "amount", "description": "the total"}}}  # fmt: skip
    error = refused(
        [
            {"id": "fields", "capability": "extraction", "input": document},
            arithmetic("sum", [{"$part": "fields"}]),
        ]
    )
    assert error.path.startswith("$.parts[1].input.figures[0]"), (str(error), error.path)
    spec = spec_from_request(vat_request(), {})  # a string output where a string goes
    assert [p.part_id for p in spec.parts] == ["vat", "net"]


def test_parts_are_ordered_after_what_they_are_made_of() -> None:
    parts = tuple(
        Part(p["id"], "arithmetic", p["input"])
        for p in (
            arithmetic("total", [{"$part": "vat"}, {"$part": "net"}]),
            arithmetic("vat", [{"$part": "net"}]),
            arithmetic("other", ["1"]),
            arithmetic("net", ["2"]),
        )
    )
    assert part_dependencies(parts) == {
        "total": ("vat", "net"),
        "vat": ("net",),
        "other": (),
        "net": (),
    }
    assert dependency_order(parts) == ("other", "net", "vat", "total")
    assert upstream(parts)["total"] == {"vat", "net"} and upstream(parts)["net"] == set()


def delivered_of(made: dict[str, Any]) -> Delivered:
    spec = spec_from_request(vat_request(), {})
    return Delivered(spec.parts, made, dict.fromkeys(made, "did:key:z6Mkteam"))


def test_a_check_on_vat_counts_for_a_coalition_only_if_it_made_net_too() -> None:
    spec = spec_from_request(vat_request(), {})
    checks = spec.requester_checks
    shares = {"net-right": Fraction(1, 4), "vat-right": Fraction(3, 4)}
    both = delivered_of({"net": "163.69", "vat": "32.738"})
    results = {c.check_id: evaluate(c, both, None) for c in checks}  # type: ignore[arg-type]
    assert all(r.passed for r in results.values())
    value = valuation(checks, shares, results, both)
    assert value.reads["vat-right"] == ("vat", "net")
    assert value.value(frozenset({"vat"})) == 0  # made vat, not the net it is made of
    assert value.value(frozenset({"net"})) == Fraction(1, 4)
    assert value.value(frozenset({"net", "vat"})) == 1
    # A vat delivered with no net under it was not made of what the spec says: it fails.
    alone = delivered_of({"vat": "32.738"})
    vat_check = next(c for c in checks if c.check_id == "vat-right")
    assert isinstance(vat_check, ExpectCheck)
    verdict = evaluate(vat_check, alone, None)  # type: ignore[arg-type]
    assert not verdict.passed and "parts not delivered: net" in verdict.detail


def test_a_passed_check_on_vat_pays_for_net_too() -> None:
    spec = spec_from_request(vat_request(), {})
    task = Task("task-1", "did:key:z6Mkreq", spec, datetime(2026, 1, 1, tzinfo=UTC), "settled")
    settlement = {
        "amount": "300",
        "payouts": {"did:key:z6Mkteam": "300"},
        "checks": [{"id": "net-right", "passed": False}, {"id": "vat-right", "passed": True}],
        "part_values": {"net": "1/2", "vat": "1/2"},
    }
    assert paid_parts(task, settlement, {}) == {"net", "vat"}


def test_a_member_is_given_only_the_output_its_producer_reported() -> None:
    spec = spec_from_request(vat_request(), {})
    made = seal("163.69")
    report = {
        "kind": "report",
        "result": {
            "ok": True,
            "contributions": [{"part": "net", "output_sha256": made.commitment}],
        },
    }
    shown = [{"messages": [{"message": report}]}]
    reported = reported_outputs(shown)
    assert reported == {"net": made.commitment}
    sent = {"net": {"salt": made.salt, "value": made.value}}
    outputs = opened_inputs(["net"], sent, reported)
    item = part_item(spec, "vat", {}, outputs)
    assert item["payload"]["figures"] == ["163.69", "0.2"]  # type: ignore[index]
    forged = copy.deepcopy(sent)
    forged["net"]["value"] = "1000.00"
    with pytest.raises(WorkError, match="not the one its producer reported"):
        opened_inputs(["net"], forged, reported)
    with pytest.raises(WorkError, match="not reported yet"):
        opened_inputs(["net"], sent, {})
    with pytest.raises(WorkError, match="not sent with the item"):
        opened_inputs(["net"], {}, reported)
    with pytest.raises(WorkError, match="not done yet"):
        part_item(spec, "vat", {}, {})
