"""Exams of declared skills: items from a committed seed, generated and graded in the box, and
the validity gates a manifest must pass before it is declared.

**The seed neither side picks.** Before an attempt the service draws a nonce and publishes its
commitment H(service nonce); the candidate then sends a nonce of its own; the attempt's seed is

    seed = SHA-256("accord/skill/attempt-seed/v1" ‖ service nonce ‖ candidate nonce
                   ‖ skill id ‖ attempt)

(each part length-prefixed). The service cannot steer the items (its nonce is fixed before it
sees the candidate's) and the candidate cannot (it does not know the service's nonce). After
grading the service reveals its nonce; anyone checks it against the commitment
(`check_reveal`), recomputes the seed and re-runs the generator and graders in the box to the
same grades (`regrade`).

**A generator** is Python run in the box: `generate(seed, n)` with `seed` the attempt seed in
hex, returning `n` items `{"input": ..., "answer": ...}`; `input` must fit the skill's input
schema and `answer` (the oracle's) its output schema. The box freezes the clock and seeds all
entropy, so the same seed gives the same items.

**A bank** (`accord.identity.item_banks`) is written items committed as a Merkle root: each
attempt draws its items from the seed among those not yet retired (`bank_exam`), and the graded
entry reveals them with their inclusion proofs, so `regrade` checks the proofs and the draw.

**The gates** (`check_gates`), each run at declaration, each refusal naming its gate:

    bank             a bank exam's items are sent, match its root and size, and fit the schemas
    pinned-code      every generator's and grader's code hashes to the `sha256` pinned beside it
    judge            a model-graded skill is declared only where a judge is configured
    deterministic    the generator, run twice on the same seed, gives the same items
    oracle           the oracle's own answers pass the exam
    empty-answer     an exam answered with null, "", {} or [] throughout fails
    constant-answer  an exam answered with one oracle answer throughout fails
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from accord.identity.challenges import reference
from accord.identity.challenges.base import JSON, ExamItem, Grade, JSONObject
from accord.identity.challenges.registry import get_capability
from accord.identity.challenges.sandbox import SandboxLimits, SandboxMode, run_function_cases
from accord.identity.challenges.skills import ExactValidator
from accord.identity.errors import ExamError, GateFailed, SkillError
from accord.identity.graders import Case, JudgeSeat, grade_cases
from accord.identity.item_banks import BankItem, check_bank, draw
from accord.identity.item_banks import check_reveal as check_reveal_bank
from accord.identity.manifests import SkillManifest, code_sha256
from accord.ledger.canonical import canonical_json

ATTEMPT_SEED_DOMAIN = b"accord/skill/attempt-seed/v1"
GATE_SEED_DOMAIN = b"accord/skill/gate-seed/v1"
ITEM_ID_DOMAIN = b"accord/skill/item-id/v1"
NONCE_BYTES = 32
MIN_NONCE_BYTES = 16
GENERATOR_FUNCTION = "generate"
GENERATOR_LIMITS = SandboxLimits(cpu_seconds=4, wall_seconds=20.0)
EMPTY_ANSWERS: tuple[JSON, ...] = (None, "", {}, [])
CONSTANT_ANSWERS_TRIED = 3


def _length_prefixed(*parts: bytes) -> bytes:
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)


def new_nonce() -> bytes:
    """A fresh 32-byte nonce (the service's, or a candidate's)."""
    return secrets.token_bytes(NONCE_BYTES)


def nonce_commitment(service_nonce: bytes) -> str:
    """H(service nonce), hex: published before the candidate sends its nonce."""
    return hashlib.sha256(service_nonce).hexdigest()


def check_reveal(commitment: str, service_nonce: bytes) -> None:
    """Raises ExamError unless `service_nonce` is the one `commitment` committed to."""
    if nonce_commitment(service_nonce) != commitment:
        raise ExamError("the revealed service nonce does not match its commitment")


def attempt_seed(service_nonce: bytes, candidate_nonce: bytes, skill: str, attempt: int) -> bytes:
    """The seed of one attempt at `skill` (see the module's docstring).

    Raises ExamError for a nonce shorter than 16 bytes or an attempt number below 1.
    """
    for nonce in (service_nonce, candidate_nonce):
        if not isinstance(nonce, bytes) or len(nonce) < MIN_NONCE_BYTES:
            raise ExamError(f"a nonce must be at least {MIN_NONCE_BYTES} bytes")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ExamError(f"an attempt number is a positive integer: {attempt!r}")
    parts = _length_prefixed(
        service_nonce, candidate_nonce, skill.encode("utf-8"), attempt.to_bytes(8, "big")
    )
    return hashlib.sha256(ATTEMPT_SEED_DOMAIN + parts).digest()


def _item_id(manifest: SkillManifest, seed: bytes, index: int) -> str:
    parts = _length_prefixed(seed, manifest.skill_id.encode(), index.to_bytes(8, "big"))
    return f"{manifest.name}-{hashlib.sha256(ITEM_ID_DOMAIN + parts).hexdigest()[:20]}"


def _fits(schema: JSONObject, value: JSON) -> str | None:
    error = next(iter(ExactValidator(schema).iter_errors(value)), None)
    if error is None:
        return None
    where = "$" + "".join(f"[{p!r}]" for p in error.absolute_path)
    return f"{where}: {str(error.message)[:200]}"


def generate_exam(
    manifest: SkillManifest, seed: bytes, n: int | None = None, *, mode: SandboxMode | None = None
) -> list[ExamItem]:
    """The exam's `n` items (default: the manifest's count) for `seed`: a built-in skill's from
    its capability's generator, a declared one's from its generator run in the box; each item's
    `private["answer"]` is the oracle's answer (built-in items keep their own private fields).

    Raises SkillError when the generator fails or returns items that do not fit the skill's
    schemas, ExamError for a bad count, SandboxUnavailable when the box cannot be made.
    """
    count = manifest.item_count if n is None else n
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
        raise ExamError(f"an exam has 1 to 1000 items: {count!r}")
    if manifest.builtin is not None:
        return get_capability(manifest.builtin).generate(seed, count)
    if manifest.exam["kind"] == "bank":
        raise SkillError("a bank exam's items are drawn from its bank (bank_exam), not generated")
    run = run_function_cases(
        str(manifest.exam["code"]),
        GENERATOR_FUNCTION,
        [[seed.hex(), count]],
        GENERATOR_LIMITS,
        mode=mode,
    )
    if run.failure is not None:
        raise SkillError(f"the generator failed: {run.failure}")
    result = run.results[0]
    if result.error is not None:
        raise SkillError(f"the generator {result.error}")
    raw = result.value
    if not isinstance(raw, list) or len(raw) != count:
        raise SkillError(f"the generator must return a list of {count} items")
    items = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != {"input", "answer"}:
            raise SkillError(f"generated item {index} is not {{input, answer}}")
        problem = _fits(manifest.input_schema, entry["input"])
        if problem is not None:
            raise SkillError(f"generated item {index}'s input breaks the input schema: {problem}")
        problem = _fits(manifest.output_schema, entry["answer"])
        if problem is not None:
            raise SkillError(f"generated item {index}'s answer breaks the output schema: {problem}")
        items.append(_exam_item(manifest, seed, index, entry, "generated item"))
    return items


def bank_exam(
    manifest: SkillManifest, seed: bytes, drawn: Sequence[tuple[int, BankItem]]
) -> list[ExamItem]:
    """The items of an attempt at a bank exam: the `drawn` (index, item) pairs of its bank,
    each with its answer kept private, ids derived from the seed and the bank index."""
    return [_exam_item(manifest, seed, index, entry, "bank item") for index, entry in drawn]


def _exam_item(
    manifest: SkillManifest, seed: bytes, index: int, entry: Mapping[str, JSON], what: str
) -> ExamItem:
    """Item `index` of an attempt from `seed`: `entry`'s input as its payload (a JSON object,
    else SkillError naming `what` it is) and its answer kept private."""
    payload = entry["input"]
    if not isinstance(payload, dict):
        raise SkillError(f"{what} {index}'s input is not a JSON object")
    return ExamItem(
        _item_id(manifest, seed, index),
        manifest.skill_id,
        manifest.instructions,
        payload,
        {"answer": entry["answer"]},
    )


def draw_bank_exam(
    manifest: SkillManifest, seed: bytes, bank: Sequence[BankItem], open_indices: Sequence[int]
) -> tuple[list[int], list[ExamItem]]:
    """(the drawn indices, their items) of an attempt at a bank exam whose items still open
    are `open_indices`. Raises ExamError when the bank is spent."""
    drawn = draw(seed, open_indices, manifest.item_count)
    return drawn, bank_exam(manifest, seed, [(i, bank[i]) for i in drawn])


def check_bank_items(manifest: SkillManifest, bank: object) -> list[BankItem]:
    """`bank` as the items `manifest`'s bank exam commits to, each fitting the schemas.

    Raises GateFailed (gate `bank`) when it is missing, does not match the root or size, or
    an item breaks a schema."""
    if bank is None:
        raise GateFailed("bank", "a bank exam is declared with its items: send them as `bank`")
    try:
        items = check_bank(manifest.exam, bank)
    except SkillError as exc:
        raise GateFailed("bank", str(exc)) from exc
    for index, entry in enumerate(items):
        for side, schema, value in (
            ("input", manifest.input_schema, entry["input"]),
            ("answer", manifest.output_schema, entry["answer"]),
        ):
            problem = _fits(schema, value)
            if problem is not None:
                raise GateFailed("bank", f"bank item {index}'s {side} breaks its schema: {problem}")
    return items


def grade_exam(
    manifest: SkillManifest,
    items: Sequence[ExamItem],
    answers: Sequence[JSON],
    *,
    judge: JudgeSeat | None = None,
    mode: SandboxMode | None = None,
) -> list[Grade]:
    """One grade (a point) per item: a built-in skill's by its capability's grader, a declared
    one's by its graders (`accord.identity.graders.grade_cases`).

    Raises SkillError when the lists differ in length or a grader cannot run here (a model
    grader with no judge), ExamError for items of another skill.
    """
    if len(items) != len(answers):
        raise SkillError(f"{len(answers)} answers for {len(items)} items")
    if manifest.builtin is not None:
        capability = get_capability(manifest.builtin)
        return [capability.grade(item, answer) for item, answer in zip(items, answers, strict=True)]
    for item in items:
        if item.capability != manifest.skill_id:
            raise ExamError(f"item {item.item_id} is not an item of skill {manifest.skill_id}")
    cases = [
        Case(item.payload, item.private.get("answer"), answer)
        for item, answer in zip(items, answers, strict=True)
    ]
    verdicts = grade_cases(manifest.graders, cases, manifest.output_schema, judge=judge, mode=mode)
    return [
        Grade(item.item_id, 1 if verdict.passed else 0, 1, verdict.reason)
        for item, verdict in zip(items, verdicts, strict=True)
    ]


def exam_passes(manifest: SkillManifest, grades: Sequence[Grade]) -> bool:
    """Whether `grades` reach the manifest's threshold (exactly; no points never passes)."""
    earned = sum(g.earned for g in grades)
    possible = sum(g.possible for g in grades)
    return possible > 0 and Fraction(earned, possible) >= manifest.threshold


def oracle_answers(manifest: SkillManifest, items: Sequence[ExamItem]) -> list[JSON]:
    """The right answers: a declared skill's from its generator, a built-in's from the
    reference solver (which sees only what an agent sees).

    Raises ExamError when the reference solver cannot answer an item.
    """
    if manifest.builtin is not None:
        return [reference.solve(item) for item in items]
    return [item.private.get("answer") for item in items]


def regrade(
    manifest: SkillManifest,
    commitment: str,
    service_nonce: bytes,
    candidate_nonce: bytes,
    attempt: int,
    answers: Sequence[JSON],
    *,
    judge: JudgeSeat | None = None,
    mode: SandboxMode | None = None,
    bank: tuple[Sequence[int], object] | None = None,
) -> list[Grade]:
    """What an auditor does after the reveal: check the service's nonce against its commitment,
    recompute the seed, regenerate the items in the box and grade the logged answers. A bank
    exam's items are the revealed ones, `bank` = (the indices open when the attempt was
    committed, the graded entry's reveal): each proven in the bank, and the seed's draw.

    Raises ExamError when the reveal does not match, SkillError when a bank reveal is not
    proven or not the seed's draw, and what `generate_exam` and `grade_exam` raise.
    """
    check_reveal(commitment, service_nonce)
    seed = attempt_seed(service_nonce, candidate_nonce, manifest.skill_id, attempt)
    if manifest.exam["kind"] != "bank":
        items = generate_exam(manifest, seed, len(answers), mode=mode)
        return grade_exam(manifest, items, answers, judge=judge, mode=mode)
    if bank is None:
        raise SkillError("a bank attempt is re-graded from the items its grades reveal")
    open_indices, revealed = bank
    shown = check_reveal_bank(manifest.exam, revealed)
    if [index for index, _ in shown] != draw(seed, open_indices, len(answers)):
        raise SkillError("the revealed items are not the ones the seed draws from the bank")
    items = bank_exam(manifest, seed, shown)
    return grade_exam(manifest, items, answers, judge=judge, mode=mode)


def gate_seed(manifest: SkillManifest) -> bytes:
    """The fixed seed the gates examine a manifest with (anyone re-runs them)."""
    return hashlib.sha256(GATE_SEED_DOMAIN + manifest.skill_id.encode()).digest()


@dataclass(frozen=True)
class GateReport:
    """What the gates measured on a manifest that passed them all."""

    skill_id: str
    items: int
    oracle_earned: int
    gates: tuple[str, ...]

    def to_json(self) -> JSONObject:
        return {
            "skill_id": self.skill_id,
            "items": self.items,
            "oracle_earned": self.oracle_earned,
            "gates": list(self.gates),
        }


def _score_text(grades: Sequence[Grade]) -> str:
    return f"{sum(g.earned for g in grades)}/{sum(g.possible for g in grades)}"


def check_gates(
    manifest: SkillManifest,
    *,
    judge: JudgeSeat | None = None,
    mode: SandboxMode | None = None,
    bank: object = None,
) -> GateReport:
    """Run every validity gate (see the module's docstring) on `manifest`, in that order; a
    bank exam's on the items of `bank`, drawn from the gate seed.

    Raises GateFailed naming the first gate that fails and why; SandboxUnavailable when the box
    cannot be made (no gate has then run: the manifest is neither refused nor accepted).
    """
    gates: list[str] = []
    items_of_bank = check_bank_items(manifest, bank) if manifest.exam["kind"] == "bank" else None
    if items_of_bank is not None:
        gates.append("bank")
    pinned = [("$.exam", manifest.exam)] if manifest.exam["kind"] == "generator" else []
    pinned += [(f"$.graders[{i}]", g) for i, g in enumerate(manifest.graders) if "code" in g]
    for path, part in pinned:
        if code_sha256(str(part["code"])) != part["sha256"]:
            raise GateFailed("pinned-code", f"{path}.code does not hash to {path}.sha256")
    gates.append("pinned-code")
    if any(g["kind"] == "model" for g in manifest.graders) and judge is None:
        raise GateFailed("judge", "a model-graded skill needs a judge, and none is configured here")
    gates.append("judge")
    seed = gate_seed(manifest)
    try:
        if items_of_bank is not None:
            everything = range(len(items_of_bank))
            items = draw_bank_exam(manifest, seed, items_of_bank, everything)[1]
            again = draw_bank_exam(manifest, seed, items_of_bank, everything)[1]
        else:
            items = generate_exam(manifest, seed, mode=mode)
            again = generate_exam(manifest, seed, mode=mode)
    except SkillError as exc:
        raise GateFailed("deterministic", f"the exam cannot be generated: {exc}") from exc
    if [canonical_json(_item_json(i)) for i in items] != [
        canonical_json(_item_json(i)) for i in again
    ]:
        raise GateFailed("deterministic", "the generator gave other items for the same seed")
    gates.append("deterministic")
    try:
        oracle = oracle_answers(manifest, items)
        graded = grade_exam(manifest, items, oracle, judge=judge, mode=mode)
    except (ExamError, SkillError) as exc:
        raise GateFailed("oracle", f"the oracle's answers cannot be graded: {exc}") from exc
    if not exam_passes(manifest, graded):
        wrong = next((g for g in graded if not g.full_marks), None)
        why = "" if wrong is None else f" (first wrong: {wrong.reason})"
        raise GateFailed(
            "oracle", f"the oracle's own answers score {_score_text(graded)} and fail{why}"
        )
    gates.append("oracle")
    for empty in EMPTY_ANSWERS:
        grades = grade_exam(manifest, items, [empty] * len(items), judge=judge, mode=mode)
        if exam_passes(manifest, grades):
            raise GateFailed(
                "empty-answer",
                f"answering {empty!r} to every item scores {_score_text(grades)} and passes",
            )
    gates.append("empty-answer")
    constants: list[JSON] = []
    for answer in oracle:
        if not any(canonical_json(answer) == canonical_json(c) for c in constants):
            constants.append(answer)
        if len(constants) == CONSTANT_ANSWERS_TRIED:
            break
    for constant in constants:
        grades = grade_exam(manifest, items, [constant] * len(items), judge=judge, mode=mode)
        if exam_passes(manifest, grades):
            raise GateFailed(
                "constant-answer",
                f"answering one oracle answer to every item scores {_score_text(grades)} "
                "and passes",
            )
    gates.append("constant-answer")
    return GateReport(manifest.skill_id, len(items), sum(g.earned for g in graded), tuple(gates))


def _item_json(item: ExamItem) -> JSONObject:
    return {**item.for_agent(), "private": item.private}
