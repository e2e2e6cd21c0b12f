"""The requester's deliverable as a typed value: what `accord.market.settlement.deliverable_view`
returns as JSON (the CLI's `accord task result --json`), read into frozen dataclasses for
Python callers (`accord.Home.deliverable`).

Pure: it reads the view's mapping and nothing else. `Deliverable.from_view` raises
SettlementError when the mapping does not have the view's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accord.market.checks import CheckResult
from accord.market.errors import SettlementError
from accord.market.money import Wei


@dataclass(frozen=True)
class DeliveredPart:
    """One part the team delivered: who made it, the commitment to its output in the log,
    and the output itself when the reader may see it (`shown`; see `accord.market.privacy`)."""

    part_id: str
    capability: str
    producer: str
    """The producer's DID."""
    output_sha256: str
    shown: bool
    output: Any = None
    """The part's output (JSON) when `shown`; None otherwise."""


@dataclass(frozen=True)
class Deliverable:
    """What the requester gets back for a delivered task.

    `state` is the task's state when read (the clock decides bidding and revealing); `sha256`
    the hash of the signed delivery in the log; `leader` the contract holder's DID and `plan`
    its assignment of parts. `withheld` names the delivered parts whose outputs are not
    shown, `missing` the spec's parts nobody delivered. Once the settlement is computed,
    `checks` holds each check's verdict and `payouts` each contributor's wei (None before).
    `openings` maps each shown commitment to its sealed text, for `accord audit --outputs`.
    """

    task_id: str
    title: str
    state: str
    sha256: str
    leader: str
    plan: Mapping[str, Any]
    parts: tuple[DeliveredPart, ...]
    withheld: tuple[str, ...]
    missing: tuple[str, ...]
    checks: tuple[CheckResult, ...] | None
    payouts: Mapping[str, Wei] | None
    openings: Mapping[str, str]

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> Deliverable:
        """The deliverable of `deliverable_view`'s mapping. Raises SettlementError (a logged
        check result or payout that does not parse, a field missing)."""
        try:
            withheld = tuple(str(part) for part in view["withheld"])
            parts = tuple(
                DeliveredPart(
                    part_id=str(entry["part"]),
                    capability=str(entry["capability"]),
                    producer=str(entry["producer"]),
                    output_sha256=str(entry["output_sha256"]),
                    shown="output" in entry,
                    output=entry.get("output"),
                )
                for entry in view["parts"]
            )
            checks = view["checks"]
            payouts = view["payouts"]
            return cls(
                task_id=str(view["task_id"]),
                title=str(view["title"]),
                state=str(view["state"]),
                sha256=str(view["sha256"]),
                leader=str(view["leader"]),
                plan=dict(view["plan"] or {}),
                parts=parts,
                withheld=withheld,
                missing=tuple(str(part) for part in view["missing"]),
                checks=None if checks is None else tuple(CheckResult.from_json(c) for c in checks),
                payouts=None
                if payouts is None
                else {str(p): Wei(int(w)) for p, w in dict(payouts).items()},
                openings={str(k): str(v) for k, v in dict(view["openings"]).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SettlementError(f"a deliverable does not parse: {exc!r}") from exc
