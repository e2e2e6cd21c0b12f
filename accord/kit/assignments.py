"""What a kit agent was given to do: the outstanding assignments the log holds for it.

A member's kit answers a `/run` only for a part a logged conversation of a running task has
assigned to it and not yet seen reported, and it answers the part's input as the requester
posted it (never an input the caller made up). `assignments_to` reads one conversation as
`GET /conversations/{id}` shows it, replayed here through the conversation's own state
machine; `part_item` builds the item for a part of the task's spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accord.coordinator.conversation import message_from_json, open_conversation, step
from accord.coordinator.errors import CoordinatorError
from accord.coordinator.work import parts_of
from accord.identity.challenges import JSONObject, work_item
from accord.ledger.errors import MalformedError
from accord.ledger.events import parse_time
from accord.market.tasks import TaskSpec
from accord.market.work import resolve_files

REPLAY_TURNS = 10**6
"""The turn bound a conversation is replayed under here (the service enforced its own)."""


@dataclass(frozen=True)
class Assignment:
    """One part of a sub-task a conversation assigned to this agent, not yet reported."""

    task_id: str
    conv_id: str
    sub_id: str
    part: str
    capability: str


def assignments_to(did: str, shown: Mapping[str, Any]) -> list[Assignment]:
    """Pure: the parts of every sub-task `shown` (a conversation as `GET /conversations/{id}`
    gives it, messages included) assigned to `did` and still outstanding. A conversation that
    does not replay assigns nothing."""
    try:
        depth = int(shown["depth"])
        conversation = open_conversation(
            str(shown["conv_id"]),
            str(shown["task_id"]),
            str(shown["leader"]),
            tuple(str(m) for m in shown["members"]),
            parent=None if shown.get("parent") is None else str(shown["parent"]),
            depth=depth,
            max_depth=depth,
            max_turns=REPLAY_TURNS,
        )
        for logged in shown["messages"]:
            # The logged time: a no-show is a legal move only by it.
            at = parse_time(str(logged["at"])) if logged.get("at") else None
            conversation = step(conversation, message_from_json(logged["message"]), at=at)
        outstanding = [sub for sub, who in conversation.triggers.items() if who == did]
        if conversation.blocked_on is not None and conversation.blocked_on[1] == did:
            outstanding.append(conversation.blocked_on[0])
        return [
            Assignment(
                conversation.task_id,
                conversation.conv_id,
                sub_id,
                part,
                conversation.assigned[sub_id].capability,
            )
            for sub_id in outstanding
            for part in parts_of(conversation.assigned[sub_id])
        ]
    except (CoordinatorError, MalformedError, KeyError, TypeError, ValueError):
        return []


def part_item(spec: TaskSpec, part_id: str, files: Mapping[str, str]) -> JSONObject:
    """The item an agent answers for part `part_id` of `spec`: the capability's instruction for
    the part's input as the requester posted it, its files' text resolved from `files`.
    Raises KeyError for a part the spec does not hold, ExamError/WorkError for an input that
    cannot be given."""
    part = next(p for p in spec.parts if p.part_id == part_id)
    payload = resolve_files(part.input, files)
    return work_item(part.capability, part.part_id, dict(payload)).for_agent()
