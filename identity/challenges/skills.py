"""Capabilities as typed skills: check inputs and outputs, and make the item for real work.

A task part names a capability and gives a requester's own input, valid against that capability's
input schema. The agent doing the part receives `work_item(...).for_agent()`, which has exactly
the shape of an exam item (`item_id`, `capability`, `prompt`, `payload`), and answers with an
output valid against the output schema. Exams and real work therefore share one interface: any
agent runtime that answers exam items answers work items unchanged.

Schemas are JSON Schema draft 2020-12, checked with `jsonschema`, with one tightening that keeps
exact values exact: an `integer` is a JSON integer only, so a float such as 2.0 is not one. Each
schema's validator is built once and cached.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import cache
from typing import Any, Literal

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, best_match

from accord.identity.challenges.base import JSON, ExamItem, JSONObject
from accord.identity.challenges.registry import get_capability
from accord.identity.errors import ExamError, SchemaViolation

MAX_PART_ID_CHARS = 200
MAX_REASON_CHARS = 300

Side = Literal["input", "output"]


def _is_json_integer(checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_json_integer)
ExactValidator: Any = validators.extend(Draft202012Validator, type_checker=_TYPE_CHECKER)
"""Draft 2020-12 where `integer` means a JSON integer (never a float such as 2.0)."""


def json_path(parts: Iterable[str | int]) -> str:
    """A JSON path such as `$.figures[2]` or `$.fields['due date']` for a sequence of keys and
    indices (`$` for the empty sequence)."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}"
        else:
            escaped = part.replace("\\", "\\\\").replace("'", "\\'")
            text += f"['{escaped}']"
    return text


@cache
def _validator(capability: str, side: Side) -> Any:
    """The cached validator of one capability's input or output schema.

    Raises ExamError for an unknown capability or a schema that is not valid JSON Schema.
    """
    skill = get_capability(capability)
    schema = skill.input_schema if side == "input" else skill.output_schema
    try:
        ExactValidator.check_schema(schema)
    except SchemaError as exc:
        raise ExamError(f"the {capability} {side} schema is not valid: {exc.message}") from exc
    return ExactValidator(schema)


def _reason(error: Any) -> str:
    """What is wrong, in words; "is not valid under any of the given schemas" for a choice of
    types becomes the types that would do."""
    if error.validator in ("anyOf", "oneOf") and isinstance(error.validator_value, list):
        branches = [b for b in error.validator_value if isinstance(b, dict)]
        types = [b["type"] for b in branches if isinstance(b.get("type"), str)]
        if types and len(types) == len(error.validator_value):
            found = error.instance
            hint = " (a float is never exact)" if isinstance(found, float) else ""
            return f"{found!r} is not a JSON {' or '.join(types)}{hint}"
    return str(error.message)


def _document_order(error: Any) -> tuple[tuple[tuple[int, int | str], ...], bool]:
    """Sort key: errors earlier in the document first (keys by name, items by index), and at one
    place a choice (anyOf, oneOf) after a plain keyword."""
    path = tuple((0, part) if isinstance(part, int) else (1, str(part)) for part in error.path)
    return path, error.validator in ("anyOf", "oneOf")


def _validate(capability: str, side: Side, value: JSON) -> None:
    errors = sorted(_validator(capability, side).iter_errors(value), key=_document_order)
    if not errors:
        return
    error = best_match([errors[0]])  # descends into a choice to the branch that nearly fit
    reason = _reason(error)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    raise SchemaViolation(json_path(error.absolute_path), reason)


def validate_input(capability: str, value: JSON) -> None:
    """Check `value` against the capability's input schema.

    Raises SchemaViolation naming the JSON path of the first error (in document order) and what
    is wrong there, and ExamError for an unknown capability.
    """
    _validate(capability, "input", value)


def validate_output(capability: str, value: JSON) -> None:
    """Check `value` against the capability's output schema.

    Raises SchemaViolation naming the JSON path of the first error (in document order) and what
    is wrong there, and ExamError for an unknown capability.
    """
    _validate(capability, "output", value)


def work_item(capability: str, part_id: str, input: JSONObject) -> ExamItem:
    """The item an agent receives to do one part of real work: `item_id` is the part's id,
    `prompt` the capability's instruction for `input`, `payload` a copy of `input`, and
    `private` empty (real work has no hidden answer).

    Raises SchemaViolation if `input` breaks the capability's input schema, and ExamError for an
    unknown capability or a part id that is empty or longer than 200 characters.
    """
    if not isinstance(part_id, str) or not 0 < len(part_id) <= MAX_PART_ID_CHARS:
        raise ExamError(f"a part id must be 1 to {MAX_PART_ID_CHARS} characters: {part_id!r}")
    validate_input(capability, input)
    skill = get_capability(capability)
    payload = copy.deepcopy(input)
    return ExamItem(part_id, skill.name, skill.instruction(payload), payload, {})
