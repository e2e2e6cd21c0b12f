"""A task's states, in one place: every list of them (the bid checks, the read views' query
filter, the audit's "is it over") is read from here, so none can drift from the state machine
in `accord.market.tasks`, which is the only thing that moves a task between them.

    posted ─► bidding ─► revealing ─► awarded ─► running ─► delivered ─► settled
       │                                 └► expired ─► refunded
       ├─► cancelled (its requester, before its escrow opened)
       └─► closed (the operator: not funded when bidding ended)
"""

from __future__ import annotations

from typing import Final, Literal, get_args

TaskState = Literal[
    "posted",
    "bidding",
    "revealing",
    "awarded",
    "running",
    "delivered",
    "settled",
    "expired",
    "refunded",
    "cancelled",
    "closed",
]

TASK_STATES: Final[tuple[TaskState, ...]] = get_args(TaskState)
"""Every state, in lifecycle order."""

FINAL_STATES: Final[frozenset[TaskState]] = frozenset(
    {"settled", "expired", "refunded", "cancelled", "closed"}
)
"""The states no event moves a task out of: the task is over."""
