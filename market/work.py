"""The requester's work: the parts a task is made of and the checks its deliverable must pass.

A task spec names its **parts** (each an id, a capability, and an input valid against that
capability's input schema) and its **checks** (each an id, a positive integer weight, the parts it
reads, and a kind). Check kinds are small frozen dataclasses, one per kind:

    expect    a value at a JSON path of one part's output equals a value, lies within a
              tolerance of a number, or matches a pattern
    schema    one part's output validates against a JSON Schema (the `jsonschema` library)
    python    the requester's test code, `def check(outputs) -> bool`, run in the sandbox
    judge     an OpenAI-compatible model scores the parts against a criterion (temperature 0)
    review    the requester accepts or rejects within the review window (accepted when it ends);
              a rejection needs a reason and opens a dispute an evaluator decides (below)

With no checks given, each part gets its capability's output-schema check and a review check.

The contract holder's own work is part of the deliverable too: its **plan** (which member does
which part) and its **assembly** (every part's output with its producer), made by the leader
under the reserved part ids `_plan` and `_assembly`. `rubric(spec)` adds two integration checks
that read them, and `check_shares` gives them a fixed share of v(N): `CONTRACTOR_SHARE` (1/5),
half each; the requester's checks share the other 4/5 by weight.

**Paid by passed checks.** A settlement pays

    amount = floor(price * passed / weight)

where `weight` is the total weight of the requester's checks and `passed` the weight of those
that passed (`accord.market.payouts`: `paid_share`, `amount_paid`, and `check_shares` and the
dispute fee beside them); the rest of the deposit goes back to the requester.
The plan and assembly checks earn nothing on their own: they only divide the amount, by
Shapley value over v(S), so the contract holder's share grows and shrinks with what its team
delivered, and a deliverable that passes none of the requester's checks pays nobody.

**A rejection is judged, not decreed.** A review nobody answers before its window ends, or
that the requester accepts, passes. A rejection needs a reason, and the requester's escrow must
hold the dispute fee beyond the price (`dispute_fee`: 1/20 of the price, at least 1 wei, per
rejected review; a requester whose price leaves no room bonds it, `TaskEscrow.bond`): it opens a
dispute that a panel of independent agents decides with the review's `criterion`
(`accord.market.panel`; a judge model takes one seat, `DISPUTE_PASS_SCORE` or more voting for
the team). Its verdict binds, and the losing side's stake pays the panelists who voted with the
majority: the requester's bond when the work passes, the team's pay when it fails.

Everything here is pure: parsing raises WorkError naming the JSON path of the first problem.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Literal, TypeAlias

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from accord.identity.challenges import REGISTRY, get_capability, validate_input
from accord.identity.errors import ExamError, SchemaViolation
from accord.identity.manifests import builtin_name
from accord.identity.skill_capability import work_graders
from accord.market.errors import WorkError

PART_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
PLAN_PART = "_plan"
ASSEMBLY_PART = "_assembly"
PLAN_CHECK = "_plan-covers-every-part"
ASSEMBLY_CHECK = "_assembly-holds-every-output"

MAX_PARTS = 64
MAX_CHECKS = 128
MAX_WEIGHT = 1_000_000
MAX_PATTERN = 500
MAX_CODE = 20_000
MAX_PYTHON_CPU_SECONDS = 10
MAX_SPEC_PYTHON_CPU_SECONDS = 30
"""The sum of a spec's python checks' `cpu_seconds`. Each check runs twice in one box
(`accord.market.check_io.CHECK_RUNS`), so a settlement spends at most 2 x 30 s of CPU, plus
an interpreter start per check, on the requester's code; so does each audit."""
MAX_PYTHON_MEMORY_MIB = 1024
FILE_KEY = "$file"
PART_KEY = "$part"
"""`{"$part": "net"}` in a part's input stands for part `net`'s output."""
MAX_FILE_BYTES = 1 << 20
"""A task's input file is at most 1 MiB."""
MAX_EXPONENT = 1_000
"""The largest power of ten an exact number may carry (`1e1000`); beyond, it is refused."""

REQUESTER_KINDS = ("expect", "schema", "python", "judge", "review")


@dataclass(frozen=True)
class Part:
    """One piece of the requester's work. `input` may hold `{"$file": "<sha256>"}` references
    to files stored with the task; they are replaced by the file's text before it is checked
    against the capability's schema and before an agent sees it."""

    part_id: str
    capability: str
    input: Mapping[str, Any] = field(hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.part_id, "capability": self.capability, "input": dict(self.input)}


# -- checks: one small dataclass per kind ------------------------------------------------------


@dataclass(frozen=True)
class ExpectCheck:
    """The value at `path` of one part's output: `equals` a JSON value, lies `within`
    `tolerance` of a number, or `matches` a regular expression (whole string)."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    path: str
    op: Literal["equals", "within", "matches"]
    value: Any = field(hash=False)
    tolerance: str = "0"
    kind: Literal["expect"] = "expect"


@dataclass(frozen=True)
class SchemaCheck:
    check_id: str
    weight: int
    reads: tuple[str, ...]
    schema: Mapping[str, Any] = field(hash=False)
    kind: Literal["schema"] = "schema"


@dataclass(frozen=True)
class PythonCheck:
    """`def check(outputs)` returning True to pass; `outputs` maps each read part to its output."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    code: str
    cpu_seconds: int = 2
    memory_mib: int = 256
    kind: Literal["python"] = "python"


@dataclass(frozen=True)
class JudgeCheck:
    """A model scores the read parts 0 to 10 against `criterion`; passes at `pass_score` or more."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    criterion: str
    pass_score: int = 7
    model: str | None = None
    kind: Literal["judge"] = "judge"


DEFAULT_REVIEW_CRITERION = "The parts do what their inputs ask, correctly and completely."
DISPUTE_PASS_SCORE = 6


@dataclass(frozen=True)
class ReviewCheck:
    """The requester accepts or rejects the read parts; a rejection is a dispute, decided
    against `criterion` (what the requester asked for, stated when it posted)."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    criterion: str = DEFAULT_REVIEW_CRITERION
    kind: Literal["review"] = "review"


@dataclass(frozen=True)
class PlanCheck:
    """The contract holder's plan assigns every part to a member of its team."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    kind: Literal["plan"] = "plan"


@dataclass(frozen=True)
class AssemblyCheck:
    """The assembled deliverable holds every part's output, as its producer reported it."""

    check_id: str
    weight: int
    reads: tuple[str, ...]
    kind: Literal["assembly"] = "assembly"


Check: TypeAlias = (
    ExpectCheck | SchemaCheck | PythonCheck | JudgeCheck | ReviewCheck | PlanCheck | AssemblyCheck
)


def check_to_json(check: Check) -> dict[str, Any]:
    """The check as it is posted and logged (the inverse of `parse_check`)."""
    data: dict[str, Any] = {
        "id": check.check_id,
        "weight": check.weight,
        "kind": check.kind,
        "reads": list(check.reads),
    }
    match check:
        case ExpectCheck():
            data |= {"path": check.path, check.op: check.value}
            if check.op == "within":
                data["tolerance"] = check.tolerance
        case SchemaCheck():
            data["schema"] = dict(check.schema)
        case PythonCheck():
            data |= {
                "code": check.code,
                "cpu_seconds": check.cpu_seconds,
                "memory_mib": check.memory_mib,
            }
        case JudgeCheck():
            data |= {"criterion": check.criterion, "pass_score": check.pass_score}
            if check.model is not None:
                data["model"] = check.model
        case ReviewCheck():
            if check.criterion != DEFAULT_REVIEW_CRITERION:
                data["criterion"] = check.criterion
        case PlanCheck() | AssemblyCheck():
            pass
    return data


# -- JSON paths --------------------------------------------------------------------------------

_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[\"((?:[^\"\\]|\\.)*)\"\]")


def parse_path(path: str) -> tuple[str | int, ...]:
    """`$`, `$.total`, `$.lines[2].amount`, `$["due date"]` as a tuple of keys and indexes.

    Raises WorkError for anything else.
    """
    if not isinstance(path, str) or not path.startswith("$") or len(path) > 500:
        raise WorkError(f"{path!r} is not a JSON path: write $, $.field or $.list[0]")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _PATH_STEP.match(path, position)
        if match is None:
            raise WorkError(f"{path!r} is not a JSON path (at character {position})")
        name, index, quoted = match.groups()
        if index is not None:
            steps.append(int(index))
        else:
            steps.append(name if name is not None else quoted.replace('\\"', '"'))
        position = match.end()
    return tuple(steps)


_MISSING = object()


def value_at(document: Any, steps: Sequence[str | int]) -> Any:
    """The value at `steps` in `document`, or `MISSING` when there is none."""
    value = document
    for step in steps:
        value = _step_into(value, step)
        if value is _MISSING:
            break
    return value


def _step_into(value: Any, step: str | int) -> Any:
    if isinstance(step, int):
        return value[step] if isinstance(value, list) and step < len(value) else _MISSING
    return value[step] if isinstance(value, dict) and step in value else _MISSING


MISSING = _MISSING


def exact_number(value: Any) -> Fraction | None:
    """An exact number from a JSON integer or a decimal/fraction string; None for anything else
    (floats are not exact, and are refused)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        if "/" in text:
            num, _, den = text.partition("/")
            try:
                denominator = int(den)
                return Fraction(int(num), denominator) if denominator else None
            except ValueError:
                return None
        try:
            number = Decimal(text) if text and len(text) <= 100 else None
        except (InvalidOperation, ValueError):
            return None
        # Infinity and NaN are no numbers; `1e999999999` is one, but too big to compute with.
        if number is None or not number.is_finite():
            return None
        exponent = number.as_tuple().exponent
        if not isinstance(exponent, int) or abs(exponent) > MAX_EXPONENT:
            return None
        return Fraction(number)
    return None


# -- parsing a spec's parts and checks ---------------------------------------------------------


def _at(path: str, message: str) -> WorkError:
    return WorkError(f"{path}: {message}", path=path)


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _at(path, "must be a JSON object")
    return value


def _identifier(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str) or not PART_ID.fullmatch(value):
        raise _at(path, f"{value!r} is not a {what} id (lowercase letters, digits, - and _)")
    return value


def file_refs(value: Any) -> list[str]:
    """The sha256 of every `{"$file": sha}` reference inside an input, in order."""
    found: list[str] = []
    if isinstance(value, Mapping):
        if set(value) == {FILE_KEY} and isinstance(value[FILE_KEY], str):
            return [value[FILE_KEY]]
        for item in value.values():
            found += file_refs(item)
    elif isinstance(value, list):
        for item in value:
            found += file_refs(item)
    return found


def resolve_files(value: Any, text_of: Mapping[str, str]) -> Any:
    """`value` with every `{"$file": sha}` replaced by that file's text.

    Raises WorkError for a reference to a file that is not in `text_of`.
    """
    if isinstance(value, Mapping):
        if set(value) == {FILE_KEY}:
            sha = value[FILE_KEY]
            if sha not in text_of:
                raise WorkError(f"the input names a file that was not stored with it: {sha}")
            return text_of[sha]
        return {k: resolve_files(v, text_of) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_files(item, text_of) for item in value]
    return value


def part_refs(value: Any) -> list[str]:
    """The part ids of every `{"$part": id}` reference inside an input, in order (a part's
    input may be made of another part's output)."""
    found: list[str] = []
    if isinstance(value, Mapping):
        if set(value) == {PART_KEY}:
            return [value[PART_KEY]] if isinstance(value[PART_KEY], str) else []
        for item in value.values():
            found += part_refs(item)
    elif isinstance(value, list):
        for item in value:
            found += part_refs(item)
    return found


def resolve_parts(value: Any, output_of: Mapping[str, Any]) -> Any:
    """`value` with every `{"$part": id}` replaced by that part's output.

    Raises WorkError for a reference to a part whose output is not in `output_of`.
    """
    if isinstance(value, Mapping):
        if set(value) == {PART_KEY}:
            part_id = value[PART_KEY]
            if not isinstance(part_id, str) or part_id not in output_of:
                raise WorkError(f"the input is made of part {part_id!r}, which is not done yet")
            return output_of[part_id]
        return {k: resolve_parts(v, output_of) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_parts(item, output_of) for item in value]
    return value


def part_dependencies(parts: Sequence[Part]) -> dict[str, tuple[str, ...]]:
    """Pure: for each part, the parts its input is made of (`{"$part": id}`), each once, in the
    order the input names them.

    Raises WorkError (its path the part's input) for a reference that is not a part id, a part
    the spec does not hold or the part itself, and for a cycle (the message names it).
    """
    ids = {p.part_id for p in parts}
    needs: dict[str, tuple[str, ...]] = {}
    for k, part in enumerate(parts):
        path = f"$.parts[{k}].input"
        named = _named_parts(part.input, path)
        for other in named:
            if other == part.part_id:
                raise _at(path, f"part {other!r} cannot be made of its own output")
            if other not in ids:
                known = ", ".join(sorted(ids - {part.part_id})) or "none"
                raise _at(path, f"names no part {other!r} (the other parts: {known})")
        needs[part.part_id] = tuple(dict.fromkeys(named))
    _refuse_cycles(parts, needs)
    return needs


def _named_parts(value: Any, path: str) -> list[str]:
    """`part_refs`, refusing a reference that is not a part id."""
    if isinstance(value, Mapping):
        if PART_KEY in value:
            if set(value) != {PART_KEY}:
                raise _at(path, f'a part reference is {{"{PART_KEY}": "<part id>"}} alone')
            return [_identifier(value[PART_KEY], f"{path}.{PART_KEY}", "part")]
        return [p for key, item in value.items() for p in _named_parts(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for k, item in enumerate(value) for p in _named_parts(item, f"{path}[{k}]")]
    return []


def _refuse_cycles(parts: Sequence[Part], needs: Mapping[str, tuple[str, ...]]) -> None:
    """Raises WorkError naming the first cycle of `needs` (a depth-first walk in spec order)."""
    done: set[str] = set()
    for k, part in enumerate(parts):
        trail: list[str] = []
        stack = [(part.part_id, iter(needs[part.part_id]))]
        if part.part_id in done:
            continue
        trail.append(part.part_id)
        while stack:
            current, rest = stack[-1]
            following = next(rest, None)
            if following is None:
                stack.pop()
                trail.pop()
                done.add(current)
                continue
            if following in trail:
                cycle = [*trail[trail.index(following) :], following]
                raise _at(
                    f"$.parts[{k}].input",
                    f"the parts feed one another in a cycle ({' -> '.join(cycle)}): "
                    "no order can make them",
                )
            if following not in done:
                trail.append(following)
                stack.append((following, iter(needs[following])))


def dependency_order(parts: Sequence[Part]) -> tuple[str, ...]:
    """Pure: every part id, each after the parts its input is made of, otherwise in spec
    order. Raises WorkError as `part_dependencies` does."""
    needs = part_dependencies(parts)
    ordered: list[str] = []
    placed: set[str] = set()
    while len(ordered) < len(parts):
        ready = next(
            p.part_id for p in parts if p.part_id not in placed and set(needs[p.part_id]) <= placed
        )
        ordered.append(ready)
        placed.add(ready)
    return tuple(ordered)


def upstream(parts: Sequence[Part]) -> dict[str, frozenset[str]]:
    """Pure: for each part, every part its output is made from, directly or through others.
    Raises WorkError as `part_dependencies` does."""
    needs = part_dependencies(parts)
    made_from: dict[str, frozenset[str]] = {}
    for part_id in dependency_order(parts):
        made_from[part_id] = frozenset(
            {*needs[part_id], *(p for need in needs[part_id] for p in made_from[need])}
        )
    return made_from


def attach_files(parts: Any, read: Callable[[str], bytes]) -> tuple[Any, dict[str, bytes]]:
    """A spec file's parts with every `{"$file": "name"}` replaced by `{"$file": "<sha256>"}`,
    and the files' bytes by name. `read(name)` reads a file (relative to the spec file).

    Raises WorkError naming the path of a file that cannot be read or is over the size limit.
    """
    files: dict[str, bytes] = {}

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, Mapping):
            if set(value) == {FILE_KEY} and isinstance(value[FILE_KEY], str):
                name = value[FILE_KEY]
                try:
                    data = read(name)
                except OSError as exc:
                    raise _at(where, f"cannot read {name}: {exc.strerror or exc}") from exc
                if len(data) > MAX_FILE_BYTES:
                    raise _at(where, f"{name} is {len(data)} bytes (at most {MAX_FILE_BYTES})")
                files[name] = data
                return {FILE_KEY: hashlib.sha256(data).hexdigest()}
            return {k: walk(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{k}]") for k, v in enumerate(value)]
        return value

    return walk(parts, "$.parts"), files


def parse_parts(
    value: Any, text_of: Mapping[str, str], *, known_capabilities: Iterable[str] | None = None
) -> tuple[Part, ...]:
    """The spec's `parts`, each input checked against its capability's input schema with its
    files resolved from `text_of` (sha256 → text). Raises WorkError naming the path."""
    if not isinstance(value, list) or not value:
        raise _at("$.parts", "a task needs at least one part: [{id, capability, input}]")
    if len(value) > MAX_PARTS:
        raise _at("$.parts", f"at most {MAX_PARTS} parts")
    capabilities = set(REGISTRY if known_capabilities is None else known_capabilities)
    parts: list[Part] = []
    for k, raw in enumerate(value):
        path = f"$.parts[{k}]"
        item = _object(raw, path)
        unknown = set(item) - {"id", "capability", "input"}
        if unknown:
            raise _at(path, f"unknown field {sorted(unknown)[0]!r}")
        part_id = _identifier(item.get("id"), f"{path}.id", "part")
        if any(p.part_id == part_id for p in parts):
            raise _at(f"{path}.id", f"part {part_id!r} is named twice")
        capability = item.get("capability")
        if isinstance(capability, str):
            capability = builtin_name(capability)  # a built-in skill's id names it too
        if not isinstance(capability, str) or not (
            capability in capabilities or (known_capabilities is None and _declared(capability))
        ):
            known = ", ".join(sorted(capabilities))
            raise _at(f"{path}.capability", f"unknown capability {capability!r} (known: {known})")
        raw_input = _object(item.get("input"), f"{path}.input")
        parts.append(Part(part_id, capability, dict(raw_input)))
    part_dependencies(parts)
    # An input made of other parts' outputs is checked with each standing in for what its
    # capability gives (its example output): the shape the input will have when it is given.
    stand_in = {
        p.part_id: REGISTRY[p.capability].example()[1] for p in parts if p.capability in REGISTRY
    }
    for k, part in enumerate(parts):
        path = f"$.parts[{k}]"
        try:
            given = resolve_parts(resolve_files(part.input, text_of), stand_in)
            validate_input(part.capability, given)
        except SchemaViolation as exc:
            inner = exc.path.removeprefix("$")
            raise _at(f"{path}.input{inner}", exc.reason) from exc
        except WorkError as exc:
            raise _at(f"{path}.input", str(exc)) from exc
        except ExamError as exc:
            raise _at(f"{path}.input", str(exc)) from exc
    return tuple(parts)


def _declared(capability: str) -> bool:
    """Whether `capability` is a declared skill's id (`get_capability` finds it)."""
    try:
        get_capability(capability)
    except ExamError:
        return False
    return True


def _weight(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_WEIGHT:
        raise _at(path, f"a weight is a positive integer up to {MAX_WEIGHT}, not {value!r}")
    return value


def _reads(
    item: Mapping[str, Any], path: str, part_ids: set[str], *, single: bool
) -> tuple[str, ...]:
    if "part" in item:
        if "reads" in item:
            raise _at(path, "give either part or reads, not both")
        reads: Any = [item["part"]]
        where = f"{path}.part"
    else:
        reads = item.get("reads")
        where = f"{path}.reads"
    if not isinstance(reads, list) or not reads:
        raise _at(where, "name the part(s) the check reads")
    if single and len(reads) != 1:
        raise _at(where, "this kind of check reads exactly one part")
    for k, part in enumerate(reads):
        if not isinstance(part, str) or part not in part_ids:
            raise _at(f"{where}[{k}]" if "reads" in item else where, f"no part {part!r}")
    if len(set(reads)) != len(reads):
        raise _at(where, "a part is named twice")
    return tuple(reads)


def _check_fields(item: Mapping[str, Any], path: str, allowed: set[str]) -> None:
    unknown = set(item) - allowed - {"id", "weight", "kind", "reads", "part", "description"}
    if unknown:
        raise _at(path, f"unknown field {sorted(unknown)[0]!r} for a {item['kind']} check")


def parse_check(raw: Any, path: str, part_ids: set[str], *, compile_code: bool = True) -> Check:
    """One requester check. Raises WorkError naming the path of the problem.

    `compile_code=False` skips compiling schemas, patterns and test code: for checks read back
    from the log, which were compiled when they were posted.
    """
    item = _object(raw, path)
    check_id = _identifier(item.get("id"), f"{path}.id", "check")
    weight = _weight(item.get("weight", 1), f"{path}.weight")
    kind = item.get("kind")
    if kind not in REQUESTER_KINDS:
        raise _at(f"{path}.kind", f"{kind!r} is not a check kind ({', '.join(REQUESTER_KINDS)})")
    match kind:
        case "expect":
            _check_fields(item, path, {"path", "equals", "within", "tolerance", "matches"})
            reads = _reads(item, path, part_ids, single=True)
            json_path = item.get("path", "$")
            try:
                parse_path(json_path)
            except WorkError as exc:
                raise _at(f"{path}.path", str(exc)) from exc
            ops: list[Literal["equals", "within", "matches"]] = [
                op for op in ("equals", "within", "matches") if op in item
            ]
            if len(ops) != 1:
                raise _at(path, "an expect check has exactly one of equals, within, matches")
            op = ops[0]
            value = item[op]
            tolerance = "0"
            if op != "within" and "tolerance" in item:
                raise _at(f"{path}.tolerance", "a tolerance goes with within")
            if op == "within":
                if exact_number(value) is None:
                    raise _at(f"{path}.within", f"{value!r} is not an exact number")
                tolerance = str(item.get("tolerance", "0"))
                number = exact_number(tolerance)
                if number is None or number < 0:
                    raise _at(f"{path}.tolerance", f"{tolerance!r} is not a number >= 0")
            elif op == "matches" and compile_code:
                if not isinstance(value, str) or len(value) > MAX_PATTERN:
                    raise _at(f"{path}.matches", f"a pattern is text of at most {MAX_PATTERN}")
                try:
                    re.compile(value)
                except re.error as exc:
                    raise _at(f"{path}.matches", f"not a regular expression: {exc}") from exc
            return ExpectCheck(check_id, weight, reads, json_path, op, value, tolerance)
        case "schema":
            _check_fields(item, path, {"schema"})
            reads = _reads(item, path, part_ids, single=True)
            schema = _object(item.get("schema"), f"{path}.schema")
            try:
                if compile_code:
                    Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                raise _at(f"{path}.schema", f"not a JSON Schema: {exc.message}") from exc
            return SchemaCheck(check_id, weight, reads, dict(schema))
        case "python":
            _check_fields(item, path, {"code", "cpu_seconds", "memory_mib"})
            reads = _reads(item, path, part_ids, single=False)
            code = item.get("code")
            if not isinstance(code, str) or not code.strip() or len(code) > MAX_CODE:
                raise _at(f"{path}.code", f"the test code is text of at most {MAX_CODE} chars")
            if compile_code:
                _compile_test_code(code, f"{path}.code")
            cpu = item.get("cpu_seconds", 2)
            memory = item.get("memory_mib", 256)
            if isinstance(cpu, bool) or not isinstance(cpu, int):
                raise _at(f"{path}.cpu_seconds", "a whole number of seconds")
            if not 1 <= cpu <= MAX_PYTHON_CPU_SECONDS:
                raise _at(f"{path}.cpu_seconds", f"between 1 and {MAX_PYTHON_CPU_SECONDS}")
            if isinstance(memory, bool) or not isinstance(memory, int):
                raise _at(f"{path}.memory_mib", "a whole number of MiB")
            if not 64 <= memory <= MAX_PYTHON_MEMORY_MIB:
                raise _at(f"{path}.memory_mib", f"between 64 and {MAX_PYTHON_MEMORY_MIB}")
            return PythonCheck(check_id, weight, reads, code, cpu, memory)
        case "judge":
            _check_fields(item, path, {"criterion", "pass_score", "model"})
            reads = _reads(item, path, part_ids, single=False)
            criterion = item.get("criterion")
            if not isinstance(criterion, str) or not criterion.strip() or len(criterion) > 2000:
                raise _at(f"{path}.criterion", "a criterion is text of at most 2000 characters")
            pass_score = item.get("pass_score", 7)
            if isinstance(pass_score, bool) or not isinstance(pass_score, int):
                raise _at(f"{path}.pass_score", "a whole number from 0 to 10")
            if not 0 <= pass_score <= 10:
                raise _at(f"{path}.pass_score", "a whole number from 0 to 10")
            model = item.get("model")
            if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
                raise _at(f"{path}.model", "a model name")
            return JudgeCheck(check_id, weight, reads, criterion, pass_score, model)
        case _:
            _check_fields(item, path, {"criterion"})
            criterion = item.get("criterion", DEFAULT_REVIEW_CRITERION)
            if not isinstance(criterion, str) or not criterion.strip() or len(criterion) > 2000:
                raise _at(f"{path}.criterion", "a criterion is text of at most 2000 characters")
            reads = _reads(item, path, part_ids, single=False)
            return ReviewCheck(check_id, weight, reads, criterion)


def _compile_test_code(code: str, path: str) -> None:
    try:
        tree = ast.parse(code)
        compile(tree, "<check>", "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise _at(path, f"does not compile: {getattr(exc, 'msg', exc)} (line {line})") from exc
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
        raise _at(path, "define `def check(outputs):` returning True to pass")


def parse_checks(value: Any, parts: Sequence[Part]) -> tuple[Check, ...]:
    """The spec's `checks`; none given means each part's output-schema check plus a review.

    Raises WorkError naming the path of the first problem.
    """
    part_ids = {p.part_id for p in parts}
    if value is None or value == []:
        return default_checks(parts)
    if not isinstance(value, list):
        raise _at("$.checks", "a list of checks")
    if len(value) > MAX_CHECKS:
        raise _at("$.checks", f"at most {MAX_CHECKS} checks")
    checks: list[Check] = []
    for k, raw in enumerate(value):
        check = parse_check(raw, f"$.checks[{k}]", part_ids)
        if any(c.check_id == check.check_id for c in checks):
            raise _at(f"$.checks[{k}].id", f"check {check.check_id!r} is named twice")
        checks.append(check)
    budget = sum(c.cpu_seconds for c in checks if isinstance(c, PythonCheck))
    if budget > MAX_SPEC_PYTHON_CPU_SECONDS:
        raise _at(
            "$.checks",
            f"the python checks' cpu_seconds add up to {budget}, over the spec's budget of "
            f"{MAX_SPEC_PYTHON_CPU_SECONDS}: lower their limits or merge checks",
        )
    return tuple(checks)


def default_checks(parts: Sequence[Part]) -> tuple[Check, ...]:
    """Each part's output validates against its capability's output schema, passes each of its
    skill's graders that need no oracle (`work_graders`: a `json_schema` with a schema of its
    own, a `regex` on the whole output), and the requester reviews it."""
    checks: list[Check] = []
    for part in parts:
        pid = part.part_id
        schema = dict(get_capability(part.capability).output_schema)
        checks.append(SchemaCheck(f"{pid}-schema", 1, (pid,), schema))
        for k, grader in work_graders(part.capability):
            if grader["kind"] == "json_schema":
                checks.append(SchemaCheck(f"{pid}-grader-{k}", 1, (pid,), grader["schema"]))
            else:
                pattern = str(grader["pattern"])
                checks.append(ExpectCheck(f"{pid}-grader-{k}", 1, (pid,), "$", "matches", pattern))
        checks.append(ReviewCheck(f"{pid}-review", 1, (pid,)))
    return tuple(checks)


# -- a machine verdict: what can reject a wrong answer without an evaluator -----------------

VALUE_KEYWORDS = frozenset({"const", "enum"})
"""The JSON Schema keywords that name the values an answer must have: a schema check holding
one of them (anywhere in the schema, at a keyword's place) can reject a wrong answer that its
capability's output schema accepts. Formats and ranges (`pattern`, `minimum`…) do not count:
the capabilities' own output schemas use them, and a wrong total or date fits them."""
_SUBSCHEMA = ("items", "additionalProperties", "contains", "not", "if", "then", "else")
_SUBSCHEMA_MORE = ("unevaluatedItems", "unevaluatedProperties")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def constrains_values(schema: Any) -> bool:
    """Pure: whether `schema` uses a keyword of `VALUE_KEYWORDS` at a keyword's place, for
    values (a property merely named `enum`, or `propertyNames`' enum of keys, does not
    count)."""
    if not isinstance(schema, Mapping):
        return False
    if any(keyword in schema for keyword in VALUE_KEYWORDS):
        return True
    nested: list[Any] = [schema.get(k) for k in (*_SUBSCHEMA, *_SUBSCHEMA_MORE)]
    for keyword in _SUBSCHEMA_LISTS:
        value = schema.get(keyword)
        nested.extend(value if isinstance(value, list) else [])
    for keyword in _SUBSCHEMA_MAPS:
        value = schema.get(keyword)
        nested.extend(value.values() if isinstance(value, Mapping) else [])
    return any(constrains_values(sub) for sub in nested)


def rejects_wrong_answers(check: Check) -> bool:
    """Pure: whether `check` can fail a wrong answer that fits its capability's output schema
    without an evaluator: an `expect`, a `python` check, or a `schema` that names values
    (`constrains_values`). A review (accepted unless a rejection is judged), a judge (a
    model) and a schema of types only cannot."""
    match check:
        case ExpectCheck() | PythonCheck():
            return True
        case SchemaCheck():
            return constrains_values(check.schema)
        case _:
            return False


def require_machine_verdict(checks: Sequence[Check]) -> None:
    """Pure: the rule for a service with no evaluator of rejections (no judge): a spec is
    posted only when one of its `checks` can reject a schema-valid wrong answer
    (`rejects_wrong_answers`); otherwise its reviews would be accepted whatever was delivered
    and the work paid in full. Raises WorkError at `$.checks` saying what to add."""
    if any(rejects_wrong_answers(check) for check in checks):
        return
    kinds = sorted({check.kind for check in checks})
    given = f"its checks ({', '.join(kinds)})" if checks else "it has no checks, and"
    raise WorkError(
        f"this task would be paid in full for any answer that fits the output schema: "
        f"{given} cannot reject a wrong answer, and this service has no evaluator to decide a "
        "rejected review (no judge: ACCORD_JUDGE_URL is not set). Add a check that can: an "
        "`expect` (a value at a path of a part's output), a `schema` that names the values "
        "expected (`const` or `enum`), or a `python` check",
        path="$.checks",
    )


# -- the rubric: the requester's checks plus the contract holder's --------------------------


def rubric(parts: Sequence[Part], checks: Sequence[Check]) -> tuple[Check, ...]:
    """The requester's checks and the two integration checks on the contract holder's work."""
    every_part = tuple(p.part_id for p in parts)
    return (
        *checks,
        PlanCheck(PLAN_CHECK, 1, (PLAN_PART,)),
        AssemblyCheck(ASSEMBLY_CHECK, 1, (PLAN_PART, ASSEMBLY_PART, *every_part)),
    )
