"""Skill manifests: a skill as a JSON document, named by the hash of its canonical bytes. Pure.

A manifest says what a skill is and how it is examined:

    {"name": "sql", "version": "1.0.0", "description": "...",
     "input_schema": {...}, "output_schema": {...},      JSON Schema 2020-12
     "instructions": "...",                              what the agent is told
     "exam": {"kind": "generator", "code": "...", "sha256": "...", "items": 8, "threshold": "3/4"},
     "graders": [{"kind": "json_match", "paths": ["$.total"], "tolerance": "0.01"}],
     "supersedes": "<the id of the version this one replaces>"}   (optional)

Its id is the hex SHA-256 of its RFC 8785 canonical form (`skill_id`): name and version are
inside the hashed bytes, so a new version is a new id, and two people who write the same
manifest name the same skill. Unknown keys are refused, so nothing that changes what the skill
means can sit outside the hash.

The `name` follows the Agent Skills rules (1 to 64 characters of lowercase letters, digits and
hyphens, no hyphen first, last or twice in a row); `description` is 1 to 1024 characters.

The four built-in capabilities (`accord.identity.challenges`) are manifests too
(`builtin_manifests`): their exam and grader are `{"kind": "builtin", ...}`, pinned by the
capability's name and version (the version is bumped whenever its generator or grader changes),
and their ids resolve from their old names (`resolve_builtin`).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any, cast

from jsonschema.exceptions import SchemaError

from accord.identity.challenges.base import JSON, JSON_SCHEMA_DIALECT, JSONObject
from accord.identity.challenges.registry import REGISTRY
from accord.identity.challenges.skills import ExactValidator
from accord.identity.errors import ManifestError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import CanonicalizationError

NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_VERSION_CHARS = 32
VERSION_PATTERN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")
MAX_INSTRUCTIONS_CHARS = 20_000
MAX_CODE_CHARS = 64 * 1024
MAX_MANIFEST_BYTES = 256 * 1024
MAX_EXAM_ITEMS = 100
MAX_GRADERS = 8
MAX_PATTERN_CHARS = 500
MAX_PATHS = 32
SKILL_ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")
FRACTION_PATTERN = re.compile(r"^(0|[1-9][0-9]{0,5})(/[1-9][0-9]{0,5})?$")
DECIMAL_PATTERN = re.compile(r"^(0|[1-9][0-9]{0,8})(\.[0-9]{1,9})?$")
JSON_PATH_PATTERN = re.compile(
    r"^\$((\.[A-Za-z_][A-Za-z0-9_]*)|(\[(0|[1-9][0-9]{0,5})\])|(\['[^'\\]{1,100}'\]))*$"
)
JSON_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(0|[1-9][0-9]*)\]|\['([^'\\]+)'\]")

MANIFEST_KEYS = frozenset(
    {
        "name",
        "version",
        "description",
        "input_schema",
        "output_schema",
        "instructions",
        "exam",
        "graders",
        "supersedes",
    }
)
REQUIRED_KEYS = MANIFEST_KEYS - {"supersedes"}
EXAM_KINDS = ("builtin", "generator", "bank")
MAX_BANK_SIZE = 10_000
GRADER_KINDS = (
    "builtin",
    "exact",
    "includes",
    "regex",
    "json_schema",
    "json_match",
    "python",
    "python_tests",
    "model",
)
NEEDS_EXPECTED = frozenset({"exact", "includes", "json_match"})
"""Graders that compare an answer with the oracle's: they have nothing to compare in real work."""


@dataclass(frozen=True)
class SkillManifest:
    """A manifest that keeps every manifest rule, and its id. `document` is a private copy;
    read it through the properties (or `to_json` for a fresh copy)."""

    skill_id: str
    document: JSONObject

    @property
    def name(self) -> str:
        return str(self.document["name"])

    @property
    def version(self) -> str:
        return str(self.document["version"])

    @property
    def description(self) -> str:
        return str(self.document["description"])

    @property
    def instructions(self) -> str:
        return str(self.document["instructions"])

    @property
    def exam(self) -> Mapping[str, Any]:
        exam = self.document["exam"]
        assert isinstance(exam, dict)
        return exam

    @property
    def graders(self) -> list[Mapping[str, Any]]:
        graders = self.document["graders"]
        assert isinstance(graders, list)
        return [g for g in graders if isinstance(g, dict)]

    @property
    def supersedes(self) -> str | None:
        value = self.document.get("supersedes")
        return None if value is None else str(value)

    @property
    def builtin(self) -> str | None:
        """The built-in capability this manifest re-expresses, or None."""
        return str(self.exam["capability"]) if self.exam["kind"] == "builtin" else None

    @property
    def item_count(self) -> int:
        return int(self.exam["items"])

    @property
    def threshold(self) -> Fraction:
        return Fraction(str(self.exam["threshold"]))

    @property
    def input_schema(self) -> JSONObject:
        return cast(JSONObject, copy.deepcopy(self.document["input_schema"]))

    @property
    def output_schema(self) -> JSONObject:
        return cast(JSONObject, copy.deepcopy(self.document["output_schema"]))

    def to_json(self) -> JSONObject:
        return copy.deepcopy(self.document)


def skill_id(document: Mapping[str, Any]) -> str:
    """The hex SHA-256 of the RFC 8785 form of `document` (no check of the manifest rules).

    Raises ManifestError when `document` has no canonical form (a float that is not finite, an
    integer beyond 2**53, a key that is not text).
    """
    try:
        return hashlib.sha256(canonical_json(document)).hexdigest()
    except (CanonicalizationError, TypeError, ValueError) as exc:
        raise ManifestError("$", f"has no RFC 8785 canonical form: {exc}") from exc


def code_sha256(code: str) -> str:
    """The hex SHA-256 of `code`'s UTF-8 bytes: how a manifest pins a grader's or generator's
    code (`sha256` beside `code`)."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _text(document: Mapping[str, Any], key: str, path: str, most: int) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(f"{path}.{key}", "must be non-empty text")
    if len(value) > most:
        raise ManifestError(f"{path}.{key}", f"is {len(value)} characters; at most {most}")
    return value


def _schema(document: Mapping[str, Any], key: str) -> None:
    value = document.get(key)
    if not isinstance(value, dict):
        raise ManifestError(f"$.{key}", "must be a JSON Schema (an object)")
    dialect = value.get("$schema", JSON_SCHEMA_DIALECT)
    if dialect != JSON_SCHEMA_DIALECT:
        raise ManifestError(f"$.{key}.$schema", f"must be {JSON_SCHEMA_DIALECT} (2020-12)")
    try:
        ExactValidator.check_schema(value)
    except SchemaError as exc:
        raise ManifestError(f"$.{key}", f"is not valid JSON Schema 2020-12: {exc.message}") from exc


def _count(exam: Mapping[str, Any], path: str) -> None:
    items = exam.get("items")
    if isinstance(items, bool) or not isinstance(items, int) or not 1 <= items <= MAX_EXAM_ITEMS:
        raise ManifestError(f"{path}.items", f"must be an integer in 1..{MAX_EXAM_ITEMS}")
    threshold = exam.get("threshold")
    if not isinstance(threshold, str) or not FRACTION_PATTERN.match(threshold):
        raise ManifestError(f"{path}.threshold", 'must be a fraction such as "4/5"')
    if not 0 < Fraction(threshold) <= 1:
        raise ManifestError(f"{path}.threshold", "must be more than 0 and at most 1")


def _keys(value: Mapping[str, Any], path: str, allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ManifestError(
            f"{path}.{unknown[0]}", f"is not a key here (allowed: {sorted(allowed)})"
        )
    missing = sorted(required - set(value))
    if missing:
        raise ManifestError(f"{path}.{missing[0]}", "is missing")


def _pinned_code(value: Mapping[str, Any], path: str) -> None:
    """`code` (text) and `sha256` (64 hex digits) are present; whether they agree is the
    `pinned-code` gate's to say, at declaration."""
    _text(value, "code", path, MAX_CODE_CHARS)
    pin = value.get("sha256")
    if not isinstance(pin, str) or not SKILL_ID_PATTERN.match(pin):
        raise ManifestError(f"{path}.sha256", "must be the code's hex SHA-256 (64 digits)")


def _exam(document: Mapping[str, Any]) -> str:
    exam = document.get("exam")
    path = "$.exam"
    if not isinstance(exam, dict):
        raise ManifestError(path, "must be an object")
    kind = exam.get("kind")
    if kind == "builtin":
        required = {"capability", "version", "items", "threshold"}
        _keys(exam, path, required | {"kind"}, required)
        capability = exam.get("capability")
        if capability not in REGISTRY:
            raise ManifestError(f"{path}.capability", f"must be one of {sorted(REGISTRY)}")
        if exam.get("version") != REGISTRY[str(capability)].version:
            raise ManifestError(f"{path}.version", "is not the built-in capability's version")
    elif kind == "generator":
        required = {"code", "sha256", "items", "threshold"}
        _keys(exam, path, required | {"kind"}, required)
        _pinned_code(exam, path)
    elif kind == "bank":  # accord.identity.item_banks
        required = {"root", "size", "items", "threshold", "retire_after"}
        _keys(exam, path, required | {"kind"}, required)
        root = exam.get("root")
        if not isinstance(root, str) or not SKILL_ID_PATTERN.match(root):
            raise ManifestError(f"{path}.root", "must be the bank's hex Merkle root (64 digits)")
        for key, top in (("size", MAX_BANK_SIZE), ("retire_after", 1000)):
            value = exam.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ManifestError(f"{path}.{key}", f"must be an integer in 1..{top}")
        items = exam.get("items")
        if isinstance(items, int) and not isinstance(items, bool) and items > exam["size"]:
            raise ManifestError(f"{path}.items", "an exam draws at most the bank's size")
    else:
        raise ManifestError(f"{path}.kind", f"must be one of {list(EXAM_KINDS)}")
    _count(exam, path)
    return str(kind)


def json_path_steps(path: str) -> list[str | int]:
    """The keys and indices of a JSON path such as `$.lines[0].qty` or `$['due date']`.

    Raises ManifestError for a path outside that subset (`$`, `.name`, `[index]`, `['key']`).
    """
    if not isinstance(path, str) or not JSON_PATH_PATTERN.match(path):
        raise ManifestError("$", f"{path!r} is not a JSON path such as $.lines[0].qty")
    steps: list[str | int] = []
    for match in JSON_PATH_STEP.finditer(path, 1):
        name, index, quoted = match.groups()
        steps.append(int(index) if index is not None else (name or quoted))
    return steps


def _grader(grader: object, path: str, exam_kind: str) -> str:
    if not isinstance(grader, dict):
        raise ManifestError(path, "must be an object")
    kind = grader.get("kind")
    if kind not in GRADER_KINDS:
        raise ManifestError(f"{path}.kind", f"must be one of {list(GRADER_KINDS)}")
    if (kind == "builtin") != (exam_kind == "builtin"):
        raise ManifestError(
            f"{path}.kind", "a builtin grader goes with a builtin exam, and only with one"
        )
    if kind == "builtin":
        _keys(grader, path, {"kind", "capability"}, {"capability"})
    elif kind == "exact":
        _keys(grader, path, {"kind"}, set())
    elif kind == "includes":
        _keys(grader, path, {"kind", "ignore_case"}, set())
        if not isinstance(grader.get("ignore_case", False), bool):
            raise ManifestError(f"{path}.ignore_case", "must be true or false")
    elif kind == "regex":
        _keys(grader, path, {"kind", "pattern"}, {"pattern"})
        _text(grader, "pattern", path, MAX_PATTERN_CHARS)
        import regex

        try:  # both engines: the grader's, and the market's `matches` checks of real work
            regex.compile(grader["pattern"])
            re.compile(grader["pattern"])
        except (regex.error, re.error) as exc:
            raise ManifestError(f"{path}.pattern", f"is not a regular expression: {exc}") from exc
    elif kind == "json_schema":
        _keys(grader, path, {"kind", "schema"}, set())
        if "schema" in grader:
            _schema(grader, "schema")
    elif kind == "json_match":
        _keys(grader, path, {"kind", "paths", "tolerance"}, {"paths"})
        paths = grader.get("paths")
        if not isinstance(paths, list) or not 1 <= len(paths) <= MAX_PATHS:
            raise ManifestError(f"{path}.paths", f"must list 1 to {MAX_PATHS} JSON paths")
        for at, json_path in enumerate(paths):
            try:
                json_path_steps(json_path)
            except ManifestError as exc:
                raise ManifestError(f"{path}.paths[{at}]", exc.reason) from exc
        tolerance = grader.get("tolerance", "0")
        if not isinstance(tolerance, str) or not DECIMAL_PATTERN.match(tolerance):
            raise ManifestError(f"{path}.tolerance", 'must be a decimal string such as "0.01"')
    elif kind in ("python", "python_tests"):
        _keys(grader, path, {"kind", "code", "sha256"}, {"code", "sha256"})
        _pinned_code(grader, path)
    else:  # model
        _keys(grader, path, {"kind", "prompt", "choice_scores"}, {"prompt", "choice_scores"})
        _text(grader, "prompt", path, MAX_INSTRUCTIONS_CHARS)
        scores = grader.get("choice_scores")
        if (
            not isinstance(scores, dict)
            or not 2 <= len(scores) <= 10
            or not all(isinstance(k, str) and 0 < len(k) <= 20 for k in scores)
            or not all(v in (0, 1) and not isinstance(v, bool) for v in scores.values())
        ):
            raise ManifestError(
                f"{path}.choice_scores",
                'must map 2 to 10 choices to 0 or 1, e.g. {"A": 1, "B": 0}',
            )
    return str(kind)


def parse_manifest(document: object) -> SkillManifest:
    """`document` as a manifest, with its id.

    Checks every rule that needs no box: keys, name, version, texts, schemas, exam spec and
    graders (the validity gates that run code are `accord.identity.skill_exams.check_gates`).
    Raises ManifestError naming the JSON path of the first rule broken and what is wrong there.
    """
    if not isinstance(document, dict):
        raise ManifestError("$", "a manifest is a JSON object")
    size = len(canonical_json_or_error(document))
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError("$", f"is {size} bytes; at most {MAX_MANIFEST_BYTES}")
    _keys(document, "$", set(MANIFEST_KEYS), set(REQUIRED_KEYS))
    name = _text(document, "name", "$", MAX_NAME_CHARS)
    if not NAME_PATTERN.match(name):
        raise ManifestError(
            "$.name",
            "lowercase letters, digits and single hyphens only, no hyphen first or last",
        )
    version = _text(document, "version", "$", MAX_VERSION_CHARS)
    if not VERSION_PATTERN.match(version):
        raise ManifestError("$.version", "letters, digits, dots, plus and hyphens, e.g. 1.0.0")
    _text(document, "description", "$", MAX_DESCRIPTION_CHARS)
    _text(document, "instructions", "$", MAX_INSTRUCTIONS_CHARS)
    _schema(document, "input_schema")
    _schema(document, "output_schema")
    exam_kind = _exam(document)
    graders = document.get("graders")
    if not isinstance(graders, list) or not 1 <= len(graders) <= MAX_GRADERS:
        raise ManifestError("$.graders", f"must list 1 to {MAX_GRADERS} graders")
    kinds = [_grader(g, f"$.graders[{i}]", exam_kind) for i, g in enumerate(graders)]
    if exam_kind in ("generator", "bank") and not set(kinds) & (
        NEEDS_EXPECTED | {"python", "python_tests", "model"}
    ):
        raise ManifestError(
            "$.graders",
            "a generated exam needs a grader that compares answers with the oracle's "
            "(exact, includes, json_match, python, python_tests or model): shape alone "
            "measures nothing",
        )
    supersedes = document.get("supersedes")
    if supersedes is not None and (
        not isinstance(supersedes, str) or not SKILL_ID_PATTERN.match(supersedes)
    ):
        raise ManifestError("$.supersedes", "must be a skill id (64 hex digits)")
    return SkillManifest(skill_id(document), copy.deepcopy(document))


def canonical_json_or_error(document: Mapping[str, Any]) -> bytes:
    """The RFC 8785 bytes of `document`. Raises ManifestError when it has none."""
    try:
        return canonical_json(document)
    except (CanonicalizationError, TypeError, ValueError) as exc:
        raise ManifestError("$", f"has no RFC 8785 canonical form: {exc}") from exc


# -- the built-in capabilities as manifests -------------------------------------------------


def _builtin_document(name: str) -> JSONObject:
    capability = REGISTRY[name]
    example_input, _ = capability.example()
    return {
        "name": capability.name,
        "version": capability.version,
        "description": capability.description,
        "input_schema": capability.input_schema,
        "output_schema": capability.output_schema,
        "instructions": capability.instruction(example_input),
        "exam": {
            "kind": "builtin",
            "capability": capability.name,
            "version": capability.version,
            "items": capability.item_count,
            "threshold": str(capability.threshold),
        },
        "graders": [{"kind": "builtin", "capability": capability.name}],
    }


@cache
def builtin_manifests() -> tuple[SkillManifest, ...]:
    """The four built-in capabilities as manifests, in name order. `instructions` is the
    instruction rendered for the capability's example input (real items render their own)."""
    return tuple(parse_manifest(_builtin_document(name)) for name in sorted(REGISTRY))


def resolve_builtin(name_or_id: str) -> SkillManifest | None:
    """The built-in manifest whose old name or id is `name_or_id`, or None."""
    for manifest in builtin_manifests():
        if name_or_id in (manifest.name, manifest.skill_id):
            return manifest
    return None


def builtin_name(name_or_id: str) -> str:
    """The capability name an old name or a built-in skill id stands for; anything else is
    returned unchanged (so callers that key by capability name accept built-in ids too)."""
    if name_or_id in REGISTRY or not SKILL_ID_PATTERN.match(name_or_id):
        return name_or_id  # an old name, or no skill id: nothing to compute
    manifest = resolve_builtin(name_or_id)
    return name_or_id if manifest is None else manifest.name


def skill_id_of(capability: str) -> str:
    """The skill id `capability` names as parts and credentials hold it: a built-in's id for
    its old name, else `capability` itself (a declared skill is named by its id already)."""
    manifest = resolve_builtin(capability)
    return capability if manifest is None else manifest.skill_id


def value_at(document: JSON, steps: list[str | int]) -> tuple[bool, JSON]:
    """(found, value) at `steps` of `document` (see `json_path_steps`)."""
    value = document
    for step in steps:
        if isinstance(value, list) and isinstance(step, int):
            if not 0 <= step < len(value):
                return False, None
            value = value[step]
        elif isinstance(value, dict) and isinstance(step, str):
            if step not in value:
                return False, None
            value = value[step]
        else:
            return False, None
    return True, value
