"""A declared skill for tests and the handler a kit agent answers it with
(`accord agent run -c ID --handler python:tests.integration.skill_handlers:shout`).

`shout` is text in, text out: its exam's oracle is compared `exact`ly, and its `regex` grader
also judges real work, so a part of it posted with no checks of the requester's gets a check
that can reject a wrong answer (what a service with no judge asks of every task)."""

from __future__ import annotations

from typing import Any

from accord.identity.manifests import code_sha256

SCHEMA = "https://json-schema.org/draft/2020-12/schema"
INSTRUCTIONS = "Reply with the payload's text in capital letters, nothing else."
GENERATOR = """
import random

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

def generate(seed, n):
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
        items.append({"input": {"text": text}, "answer": text.upper()})
    return items
"""


def shout_manifest(**changes: Any) -> dict[str, Any]:
    """The `shout` skill's manifest, with `changes` applied."""
    document: dict[str, Any] = {
        "name": "shout",
        "version": "1.0.0",
        "description": "Write a text in capital letters.",
        "input_schema": {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 200}},
            "required": ["text"],
        },
        "output_schema": {"$schema": SCHEMA, "type": "string"},
        "instructions": INSTRUCTIONS,
        "exam": {
            "kind": "generator",
            "code": GENERATOR,
            "sha256": code_sha256(GENERATOR),
            "items": 5,
            "threshold": "4/5",
        },
        "graders": [{"kind": "exact"}, {"kind": "regex", "pattern": "[A-Z ]+"}],
    }
    document.update(changes)
    return document


def shout(item: dict[str, Any]) -> str:
    """The payload's text in capitals. Raises ValueError for an item whose prompt is not the
    skill's instructions (the kit must hand them to its handler)."""
    if item.get("prompt") != INSTRUCTIONS:
        raise ValueError(
            f"the item's prompt is not the skill's instructions: {item.get('prompt')!r}"
        )
    return str(item["payload"]["text"]).upper()
