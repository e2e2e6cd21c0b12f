"""A handler for a kit leader that delivers garbage (`accord agent run --handler
python:tests.integration.dispute_handlers:sum_answered_wrong`): the reference agent, except
that the part `sum` of a task is answered wrong in the right shape. Exam items have other
ids, so it still passes its arithmetic exam."""

from __future__ import annotations

from accord.identity.challenges import JSON, JSONObject
from accord.identity.runtimes import ReferenceRuntime


def sum_answered_wrong(item: JSONObject) -> JSON:
    answer = ReferenceRuntime().answer(item)
    if item.get("item_id") != "sum":
        return answer
    return {key: "0" for key in answer} if isinstance(answer, dict) else "1"
