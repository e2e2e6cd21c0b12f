"""The unit of work agents do for a team: a sub-task in, a result out.

A sub-task carries an exam-style item of one capability (`accord.identity.challenges`): the same
skills agents were credentialed for, so reference agents do real work offline and the work can
be graded by the capability's deterministic grader at settlement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

JSON = Any


@dataclass(frozen=True)
class SubTask:
    """One piece of the task: what to do and the item to do it on (what the agent sees)."""

    sub_id: str
    capability: str
    instruction: str
    item: Mapping[str, JSON] = field(hash=False)

    def to_json(self) -> dict[str, JSON]:
        return {
            "sub_id": self.sub_id,
            "capability": self.capability,
            "instruction": self.instruction,
            "item": dict(self.item),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, JSON]) -> SubTask:
        """Raises KeyError/TypeError for anything else (callers map it to their error)."""
        if not isinstance(value["item"], Mapping):
            raise TypeError("a sub-task's item is a JSON object")
        return cls(
            str(value["sub_id"]), str(value["capability"]), str(value["instruction"]), value["item"]
        )


def split_batch(task: SubTask) -> list[SubTask]:
    """A batch sub-task as its parts' sub-tasks (`batch:arithmetic/tax`, …); any other
    sub-task as itself."""
    batch = task.item.get("batch")
    if not isinstance(batch, list):
        return [task]
    parts = [SubTask.from_json(item) for item in batch]
    return [
        SubTask(
            f"{task.sub_id}/{part.item.get('item_id', part.sub_id)}",
            part.capability,
            part.instruction,
            part.item,
        )
        for part in parts
    ]


def parts_of(task: SubTask) -> list[str]:
    """The part ids a sub-task covers."""
    return [str(t.item.get("item_id", t.sub_id)) for t in split_batch(task)]


class AgentAdapter(Protocol):
    """How an agent plugs in: one method. Raises coordinator.errors.AgentFailure."""

    def run(self, task: SubTask) -> JSON:
        """Do `task`; return the answer (JSON), as the capability's grader expects it."""
        ...
