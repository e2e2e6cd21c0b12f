"""Capability exams: seeded item generators and deterministic graders.

An exam for one agent and one capability:

    seed = item_seed(exam_seed, agent_did, server_nonce)
    items = REGISTRY["arithmetic"].generate(seed, capability.item_count)
    grades = [capability.grade(item, answer) for item, answer in ...]
    passed = passes(capability, *score(grades))

The operator publishes `seed_commitment(exam_seed)` before the exam and reveals the seed after,
so anyone can regenerate the items and re-grade the logged answers. Only the `python` grader does
I/O (it runs answers in `sandbox`); everything else is pure.

Each capability is also a typed skill (`skills`): JSON Schemas for its input and output, an
instruction rendered from `templates/<name>.txt`, and an example. Real work for a task part is
`work_item(capability, part_id, input)`, an item of the same shape as an exam item:

    validate_input("arithmetic", {"kind": "figures", "figures": ["120.50"], "operation": "sum"})
    item = work_item("arithmetic", "part-1", input)      # item.for_agent() goes to the agent
    validate_output("arithmetic", answer)
"""

from accord.identity.challenges.base import (
    JSON,
    Capability,
    ExamItem,
    Grade,
    JSONObject,
    grade_before_deadline,
    item_seed,
    passes,
    score,
    seed_commitment,
)
from accord.identity.challenges.registry import REGISTRY, get_capability
from accord.identity.challenges.skills import validate_input, validate_output, work_item

__all__ = [
    "JSON",
    "REGISTRY",
    "Capability",
    "ExamItem",
    "Grade",
    "JSONObject",
    "get_capability",
    "grade_before_deadline",
    "item_seed",
    "passes",
    "score",
    "seed_commitment",
    "validate_input",
    "validate_output",
    "work_item",
]
