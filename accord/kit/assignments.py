"""What a kit agent was given to do: the outstanding assignments the log holds for it.

A member's kit answers a `/run` only for a part a logged conversation of a running task has
assigned to it and not yet seen reported, and it answers the part's input as the requester
posted it (never an input the caller made up). `assignments_to` reads one conversation as
`GET /conversations/{id}` shows it, replayed here through the conversation's own state
machine; `part_item` builds the item for a part of the task's spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accord.coordinator.conversation import message_from_json, open_conversation, step
from accord.coordinator.errors import CoordinatorError
from accord.coordinator.work import parts_of
from accord.identity.challenges import JSON, JSONObject, work_item
from accord.ledger.errors import AccordError, MalformedError
from accord.ledger.events import parse_time
from accord.ledger.sealing import Sealed
from accord.market.errors import WorkError
from accord.market.tasks import TaskSpec
from accord.market.work import resolve_files, resolve_parts

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


def part_item(
    spec: TaskSpec,
    part_id: str,
    files: Mapping[str, str],
    outputs: Mapping[str, JSON] | None = None,
) -> JSONObject:
    """The item an agent answers for part `part_id` of `spec`: the capability's instruction for
    the part's input as the requester posted it, its files' text resolved from `files` and the
    parts it is made of from `outputs` (checked ones: `opened_inputs`). Raises KeyError or
    StopIteration for a part the spec does not hold, ExamError/WorkError for an input that
    cannot be given."""
    part = next(p for p in spec.parts if p.part_id == part_id)
    payload = resolve_parts(resolve_files(part.input, files), outputs or {})
    return work_item(part.capability, part.part_id, dict(payload)).for_agent()


def reported_outputs(conversations: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pure: each part's output commitment as the first report of it names it, over a task's
    conversations as `GET /conversations/{id}` shows them (what the service admitted as each
    producer's own signed report)."""
    found: dict[str, str] = {}
    for shown in conversations:
        for logged in shown.get("messages", []):
            message = logged.get("message", {}) if isinstance(logged, Mapping) else {}
            result = message.get("result") if message.get("kind") == "report" else None
            if not isinstance(result, Mapping) or result.get("ok") is not True:
                continue
            for contribution in result.get("contributions") or []:
                if isinstance(contribution, Mapping):
                    part, commitment = contribution.get("part"), contribution.get("output_sha256")
                    if isinstance(part, str) and isinstance(commitment, str):
                        found.setdefault(part, commitment)
    return found


def opened_inputs(
    named: Iterable[str], openings: object, reported: Mapping[str, str]
) -> dict[str, JSON]:
    """Pure: the outputs of the parts `named` (those a part's input is made of), from the
    `openings` the caller sent with the item (`{part: {"salt", "value"}}`), each one the output
    its producer reported (its sealed form's commitment is the reported one): a leader cannot
    give a member an input of its own making. Raises WorkError naming a part not reported,
    not opened, or opened to another value."""
    given = openings if isinstance(openings, Mapping) else {}
    outputs: dict[str, JSON] = {}
    for part in dict.fromkeys(named):
        if part not in reported:
            raise WorkError(f"part {part!r}, which this part is made of, is not reported yet")
        opening = given.get(part)
        try:
            sealed = Sealed(opening["value"], str(opening["salt"]))  # type: ignore[index]
        except (TypeError, KeyError, AccordError) as exc:
            raise WorkError(f"the output of part {part!r} was not sent with the item") from exc
        if sealed.commitment != reported[part]:
            raise WorkError(
                f"the output of part {part!r} sent with the item is not the one its producer "
                "reported"
            )
        outputs[part] = sealed.value
    return outputs
