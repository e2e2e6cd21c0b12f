"""Why a task that is awarded or running is waiting, in one sentence for its requester
(`GET /tasks/{id}` `waiting`, and the A2A status message).

`why_waiting` is pure: from the task, its conversations as replayed, and when its leader was
last heard from, it names who the team waits for and until when that wait is bounded — a
member's answer (after `NO_SHOW_AFTER` its leader may declare it absent and give the part to
another), the leader's next move, and, for a leader that keeps its own key, the time the task
ends early with a refund if nothing more is heard from it (`LEADER_SILENCE`). `task_waiting`
reads those from the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from accord.coordinator.conversation import Conversation, no_show_due
from accord.coordinator.errors import CoordinatorError
from accord.market.states import TaskState
from accord.market.tasks import Task, clock_state

if TYPE_CHECKING:  # the chain's wiring (web3): the pure rule never imports it
    from accord.market.wiring import MarketContext


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def why_waiting(
    task: Task,
    state: TaskState,
    conversations: Sequence[Conversation],
    last_active: datetime,
    leader_silence: timedelta | None,
) -> str | None:
    """Pure: what the task waits for (None unless it is awarded or running).
    `leader_silence` is how long its leader may be silent before the task ends early (None:
    the service runs its team, and only the delivery deadline bounds it)."""
    if state not in ("awarded", "running"):
        return None
    if state == "awarded":
        found = f"waiting for its winner {task.winner} to start its team"
    else:
        waits = []
        for c in conversations:
            if c.state == "closed":
                continue
            outstanding = dict(c.triggers)
            if c.blocked_on is not None:
                outstanding[c.blocked_on[0]] = c.blocked_on[1]
            for sub_id, member in sorted(outstanding.items()):
                due = no_show_due(c, sub_id)
                if sub_id in c.answered:
                    waits.append(f"{member} answered {sub_id}; its leader is to report it")
                elif due is not None:
                    waits.append(
                        f"waiting for {member}'s answer to {sub_id}: if none comes by "
                        f"{_time(due)}, its leader may declare it absent and give the part to "
                        "another member"
                    )
                else:
                    waits.append(f"waiting for {member}'s answer to {sub_id}")
        found = "; ".join(waits) or f"waiting for its leader {task.winner}'s next move"
    if leader_silence is not None:
        ends = last_active + leader_silence
        if ends < task.delivery_deadline:
            return (
                f"{found}. Its leader was last heard from at {_time(last_active)}: if nothing "
                f"more is heard from it by {_time(ends)}, the task ends early and its budget "
                "is refunded"
            )
    return f"{found}. Delivery is due by {_time(task.delivery_deadline)}"


def task_waiting(context: MarketContext, task: Task) -> str | None:
    """`why_waiting` for `task` now, read from the log. Raises StoreError when the database
    cannot be read."""
    from accord.coordinator.service import conversation_ids, replay_conversation
    from accord.market.lifecycle import LEADER_SILENCE

    market = context.market
    state = clock_state(task, market.clock())
    if state not in ("awarded", "running") or task.winner is None:
        return None
    store = market.ledger.store
    conversations = []
    for conv_id in conversation_ids(store, task.task_id):
        try:
            conversations.append(replay_conversation(store, conv_id).conversation)
        except CoordinatorError as exc:
            return f"its team's conversation {conv_id} does not replay ({exc}): see its audit"
    registry = context.onboarding.registry
    record = registry.records([task.winner]).get(task.winner)
    hosted = record is not None and registry.key_path(record.name).exists()
    silence = None if hosted else LEADER_SILENCE
    return why_waiting(task, state, conversations, market.last_activity(task), silence)
