"""A declared skill as a `Capability`, so task parts, work items, output checks and
credentials treat it as they treat the built-in ones: its `name` is its skill id.

`remember_skill(manifest)` puts it where `get_capability` finds it
(`accord.identity.challenges.registry`); `accord.identity.skill_registry` remembers each skill
it reads from the log, and the audit remembers the ones its log declares.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from accord.identity.challenges.base import JSON, ExamItem, Grade, JSONObject
from accord.identity.challenges.registry import get_capability, remember_capability
from accord.identity.manifests import SkillManifest
from accord.identity.skill_exams import gate_seed, generate_exam, grade_exam


class ManifestCapability:
    """A declared (non-built-in) skill behind the `Capability` protocol. Generating and grading
    run in the box (`accord.identity.skill_exams`)."""

    def __init__(self, manifest: SkillManifest) -> None:
        self.manifest = manifest
        self._example: tuple[JSONObject, JSON] | None = None

    @property
    def name(self) -> str:
        return self.manifest.skill_id

    @property
    def description(self) -> str:
        return self.manifest.description

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def item_count(self) -> int:
        return self.manifest.item_count

    @property
    def threshold(self) -> Fraction:
        return self.manifest.threshold

    @property
    def input_schema(self) -> JSONObject:
        return self.manifest.input_schema

    @property
    def output_schema(self) -> JSONObject:
        return self.manifest.output_schema

    def instruction(self, input: JSONObject) -> str:
        return self.manifest.instructions

    def example(self) -> tuple[JSONObject, JSON]:
        """The first item of the gates' exam and its oracle answer (generated in the box once)."""
        if self._example is None:
            (item,) = generate_exam(self.manifest, gate_seed(self.manifest), 1)
            self._example = (item.payload, item.private.get("answer"))
        return copy.deepcopy(self._example)

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        return generate_exam(self.manifest, seed, n)

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        (grade,) = grade_exam(self.manifest, [item], [answer])
        return grade


def work_graders(capability: str) -> list[tuple[int, Mapping[str, Any]]]:
    """The graders of a skill that judge real work, which has no oracle answer, with their
    index in the manifest: each `json_schema` with a schema of its own (the output schema is
    checked anyway) and each `regex`. None for a built-in capability (its grader needs its
    exam's hidden answers).

    Raises ExamError for an unknown capability.
    """
    found = get_capability(capability)
    if not isinstance(found, ManifestCapability):
        return []
    return [
        (index, grader)
        for index, grader in enumerate(found.manifest.graders)
        if (grader["kind"] == "json_schema" and "schema" in grader) or grader["kind"] == "regex"
    ]


def remember_skill(manifest: SkillManifest) -> None:
    """Make a declared skill findable by `get_capability(skill id)` (built-ins already are)."""
    if manifest.builtin is None:
        remember_capability(ManifestCapability(manifest))
