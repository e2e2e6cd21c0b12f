"""The shared vocabulary of capability exams: items, grades, seeds and exact scoring.

Everything here is pure. Randomness comes only from seeds: every item has its own local
`random.Random` seeded from SHA-256 over (seed, capability, version, index), so an auditor who
learns the revealed exam seed regenerates exactly the items the agent saw and re-grades them.
Thresholds are `Fraction`s and scores are integer points, so nothing hashed or logged is a float.

A capability is a typed skill: besides its exam it declares the JSON Schemas of the input it takes
and the output it gives, and renders the instruction for an input from its template file
`templates/<name>.txt` (the only file this module reads, once per template).
"""

from __future__ import annotations

import copy
import hashlib
import random
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import ClassVar, Protocol, TypeAlias

from accord.identity.errors import DeadlineError, ExamError

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
JSONObject: TypeAlias = dict[str, JSON]

MIN_SEED_BYTES = 16
MAX_ITEMS_PER_CALL = 1000
ITEM_SEED_DOMAIN = b"accord/exam/item-seed/v1"
ITEM_RNG_DOMAIN = b"accord/exam/item-rng/v1"
ITEM_ID_DOMAIN = b"accord/exam/item-id/v1"
TEMPLATES_DIR = Path(__file__).with_name("templates")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class ExamItem:
    """One exam question. The agent sees `for_agent()`; `private` is for the grader only.

    `payload` and `private` are JSON objects (no floats); treat them as read-only.
    """

    item_id: str
    capability: str
    prompt: str
    payload: JSONObject = field(hash=False)
    private: JSONObject = field(hash=False, repr=False)

    def for_agent(self) -> JSONObject:
        """What is sent to the agent: everything except `private` (a deep copy)."""
        return {
            "item_id": self.item_id,
            "capability": self.capability,
            "prompt": self.prompt,
            "payload": copy.deepcopy(self.payload),
        }


@dataclass(frozen=True)
class Grade:
    """The grader's verdict on one answer. Raises ExamError on impossible point counts."""

    item_id: str
    earned: int
    possible: int
    reason: str

    def __post_init__(self) -> None:
        for value in (self.earned, self.possible):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ExamError(f"grade points must be integers: {value!r}")
        if self.possible <= 0 or not 0 <= self.earned <= self.possible:
            raise ExamError(f"impossible grade {self.earned}/{self.possible}")

    @property
    def full_marks(self) -> bool:
        return self.earned == self.possible


def correct(item: ExamItem, reason: str = "correct") -> Grade:
    """Full marks (one point) for `item`."""
    return Grade(item.item_id, 1, 1, reason)


def wrong(item: ExamItem, reason: str) -> Grade:
    """No marks (out of one point) for `item`, with the reason."""
    return Grade(item.item_id, 0, 1, reason)


class Capability(Protocol):
    """A typed, testable skill: input and output schemas, an instruction template, a seeded
    exam generator and a deterministic grader.

    Exams exercise exactly the interface real work uses: every generated item's payload is a
    valid input, its prompt is `instruction(payload)`, and a right answer is a valid output.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def version(self) -> str:
        """Bumped whenever generation or grading changes; part of every item's derivation."""
        ...

    @property
    def item_count(self) -> int:
        """How many items an exam of this capability has by default."""
        ...

    @property
    def threshold(self) -> Fraction:
        """The fraction of points (0..1, exact) needed to pass."""
        ...

    @property
    def input_schema(self) -> JSONObject:
        """The JSON Schema (draft 2020-12) of the inputs this skill takes (a fresh copy)."""
        ...

    @property
    def output_schema(self) -> JSONObject:
        """The JSON Schema (draft 2020-12) of the outputs it gives (a fresh copy)."""
        ...

    def instruction(self, input: JSONObject) -> str:
        """The instruction an agent gets for `input`, rendered from `templates/<name>.txt`.

        Expects an input valid against `input_schema`; raises ExamError if the template and the
        values rendered into it do not match.
        """
        ...

    def example(self) -> tuple[JSONObject, JSON]:
        """One valid input and its right output (fresh copies)."""
        ...

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        """`n` fresh items from `seed`. Raises ExamError on a short seed or a bad `n`."""
        ...

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        """Grade `answer`. Raises ExamError if `item` is not an item of this capability."""
        ...


class DeclaredSchemas:
    """The typed-skill declarations every capability shares: its input and output schemas and
    its example, declared once as class constants and handed out as fresh copies (a caller may
    change what it gets)."""

    INPUT_SCHEMA: ClassVar[JSONObject]
    OUTPUT_SCHEMA: ClassVar[JSONObject]
    EXAMPLE: ClassVar[tuple[JSONObject, JSON]]

    @property
    def input_schema(self) -> JSONObject:
        return copy.deepcopy(self.INPUT_SCHEMA)

    @property
    def output_schema(self) -> JSONObject:
        return copy.deepcopy(self.OUTPUT_SCHEMA)

    def example(self) -> tuple[JSONObject, JSON]:
        return copy.deepcopy(self.EXAMPLE)


@cache
def load_template(name: str) -> str:
    """The text of `templates/<name>.txt` without its final newline.

    Raises ExamError if there is no such template.
    """
    if not name.isidentifier():
        raise ExamError(f"not a template name: {name!r}")
    try:
        text = (TEMPLATES_DIR / f"{name}.txt").read_text(encoding="utf-8")
    except OSError as exc:
        raise ExamError(f"no instruction template {name!r}: {exc.strerror}") from exc
    return text.removesuffix("\n")


def render_template(template: str, values: Mapping[str, str], name: str = "template") -> str:
    """`template` with `values` substituted by `string.Template.substitute`, strictly.

    Raises ExamError for an invalid placeholder (write `$$` for a dollar sign), a placeholder
    without a value, or a value without a placeholder.
    """
    parsed = string.Template(template)
    if not parsed.is_valid():
        raise ExamError(f"{name} has an invalid placeholder (write $$ for a dollar sign)")
    placeholders = set(parsed.get_identifiers())
    missing = sorted(placeholders - set(values))
    if missing:
        raise ExamError(f"{name} needs a value for {', '.join(missing)}")
    unused = sorted(set(values) - placeholders)
    if unused:
        raise ExamError(f"{name} has no placeholder for {', '.join(unused)}")
    return parsed.substitute(values)


def render_instruction(name: str, values: Mapping[str, str]) -> str:
    """The instruction template `templates/<name>.txt` rendered with `values`, strictly.

    Raises ExamError if there is no such template or it does not match `values`.
    """
    return render_template(load_template(name), values, f"instruction template {name}")


def _length_prefixed(*parts: bytes) -> bytes:
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)


def _check_seed(seed: bytes, what: str) -> None:
    if not isinstance(seed, bytes) or len(seed) < MIN_SEED_BYTES:
        raise ExamError(f"{what} must be at least {MIN_SEED_BYTES} bytes")


def item_seed(exam_seed: bytes, agent_did: str, server_nonce: bytes) -> bytes:
    """The seed for one agent's attempt: SHA-256 over the exam seed, the DID and a nonce.

    Binding the DID and a fresh server nonce means answers copied from another agent's or another
    attempt's items answer different questions. Raises ExamError if either byte string is shorter
    than 16 bytes or `agent_did` is not a DID.
    """
    _check_seed(exam_seed, "the exam seed")
    _check_seed(server_nonce, "the server nonce")
    if not isinstance(agent_did, str) or not agent_did.startswith("did:"):
        raise ExamError(f"not a DID: {agent_did!r}")
    parts = _length_prefixed(exam_seed, agent_did.encode("utf-8"), server_nonce)
    return hashlib.sha256(ITEM_SEED_DOMAIN + parts).digest()


def seed_commitment(exam_seed: bytes) -> str:
    """The hex SHA-256 of the exam seed, published before the exam and checked at the reveal."""
    return hashlib.sha256(exam_seed).hexdigest()


def _item_digest(domain: bytes, seed: bytes, capability: str, version: str, index: int) -> bytes:
    parts = _length_prefixed(seed, capability.encode(), version.encode(), index.to_bytes(8, "big"))
    return hashlib.sha256(domain + parts).digest()


def item_rng(seed: bytes, capability: str, version: str, index: int) -> random.Random:
    """A local generator for item `index`, independent of every other item and of global state."""
    digest = _item_digest(ITEM_RNG_DOMAIN, seed, capability, version, index)
    return random.Random(int.from_bytes(digest, "big"))


def item_id_for(seed: bytes, capability: str, version: str, index: int) -> str:
    """A stable, unguessable-without-the-seed id such as `arithmetic-3f9c…` (20 hex digits)."""
    digest = _item_digest(ITEM_ID_DOMAIN, seed, capability, version, index)
    return f"{capability}-{digest.hex()[:20]}"


ItemMaker = Callable[[random.Random, str], tuple[str, JSONObject, JSONObject]]
"""Makes one item's (prompt, payload, private) from its rng and its id."""


def generate_items(
    capability: str, version: str, seed: bytes, n: int, make: ItemMaker
) -> list[ExamItem]:
    """Items 0..n-1 of `capability`, each from its own rng, so a prefix of a longer exam is the
    shorter exam. Raises ExamError if the seed is shorter than 16 bytes or `n` is out of range."""
    _check_seed(seed, "an item seed")
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_ITEMS_PER_CALL:
        raise ExamError(f"item count must be an integer in 0..{MAX_ITEMS_PER_CALL}: {n!r}")
    items = []
    for index in range(n):
        item_id = item_id_for(seed, capability, version, index)
        prompt, payload, private = make(item_rng(seed, capability, version, index), item_id)
        items.append(ExamItem(item_id, capability, prompt, payload, private))
    return items


def check_item(item: ExamItem, capability: str) -> None:
    """Raises ExamError unless `item` belongs to `capability`."""
    if not isinstance(item, ExamItem) or item.capability != capability:
        found = item.capability if isinstance(item, ExamItem) else type(item).__name__
        raise ExamError(f"the {capability} grader cannot grade a {found} item")


def private_field(item: ExamItem, key: str) -> JSON:
    """`item.private[key]`. Raises ExamError if the item lacks it (a corrupted item)."""
    if key not in item.private:
        raise ExamError(f"item {item.item_id} has no private {key!r}")
    return item.private[key]


def score(grades: Iterable[Grade]) -> tuple[int, int]:
    """(points earned, points possible) summed over `grades`."""
    earned = possible = 0
    for grade in grades:
        earned += grade.earned
        possible += grade.possible
    return earned, possible


def passes(capability: Capability, earned: int, possible: int) -> bool:
    """Whether earned/possible reaches the capability's threshold, compared exactly.

    An exam with no points possible does not pass. Raises ExamError on negative counts or
    earned > possible.
    """
    for value in (earned, possible):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ExamError(f"points must be non-negative integers: {value!r}")
    if earned > possible:
        raise ExamError(f"earned {earned} exceeds possible {possible}")
    if possible == 0:
        return False
    return Fraction(earned, possible) >= capability.threshold


def grade_before_deadline(
    capability: Capability,
    item: ExamItem,
    answer: JSON,
    *,
    answered_at: datetime,
    deadline: datetime,
) -> Grade:
    """Grade `answer` if it arrived by `deadline` (both times are passed in, never read).

    Raises DeadlineError if `answered_at` is after `deadline`, ExamError if the two times cannot
    be compared (one naive, one aware) or the item is not of this capability.
    """
    try:
        late = answered_at > deadline
    except TypeError as exc:
        raise ExamError("answer time and deadline must both be timezone-aware") from exc
    if late:
        raise DeadlineError(
            f"item {item.item_id}: answered at {answered_at.isoformat()}, "
            f"deadline {deadline.isoformat()}"
        )
    return capability.grade(item, answer)


def json_equal(left: JSON, right: JSON) -> bool:
    """Structural equality that tells bool from int and int from float (no float equality)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, float):
        return False
    return left == right
