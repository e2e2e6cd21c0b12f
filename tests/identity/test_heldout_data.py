"""The held-out sets of `make bench`'s skills section (tests/data/heldout/<skill>.json) stay
usable: each file parses, each item is a valid part input of its skill, and its checks parse
as a requester's checks on that part and can reject a wrong answer (so the data cannot rot
into something the bench silently skips or passes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accord.identity.challenges.registry import REGISTRY
from accord.identity.challenges.skills import validate_input
from accord.market.work import ExpectCheck, Part, PythonCheck, parse_checks

HELD_OUT = Path(__file__).resolve().parents[1] / "data" / "heldout"


def _items(skill: str) -> list[dict[str, Any]]:
    data = json.loads((HELD_OUT / f"{skill}.json").read_text())
    assert data["skill"] == skill
    assert data["part"] == "work"
    return list(data["items"])


def test_every_built_in_skill_has_a_held_out_set_and_nothing_else_is_there() -> None:
    assert {path.stem for path in HELD_OUT.glob("*.json")} == set(REGISTRY)


@pytest.mark.parametrize("skill", sorted(REGISTRY))
def test_held_out_items_are_valid_parts_with_decisive_checks(skill: str) -> None:
    items = _items(skill)
    assert 15 <= len(items) <= 30
    ids = [item["id"] for item in items]
    assert len(set(ids)) == len(ids), "item ids are unique"
    for item in items:
        assert set(item) == {"id", "about", "input", "checks"}, item["id"]
        validate_input(skill, item["input"])
        part = Part("work", skill, item["input"])
        checks = parse_checks(item["checks"], [part])
        assert checks, item["id"]
        for check in checks:
            assert check.reads == ("work",)
            assert isinstance(check, ExpectCheck | PythonCheck), (
                f"{item['id']}: only expect and python checks decide without a person"
            )
        # a requester posts the spec, not the exam's internals the reference solver keys on
        assert "family" not in item["input"] and "params" not in item["input"], item["id"]
