"""Capability `python`: write a small Python function, graded by hidden tests in a sandbox.

Each item draws a task family (sum of multiples, rotation, Caesar shift, bracket balance, …) and
its parameters, a function name bound to the item (so source copied from another item names the
wrong function), two visible examples and hidden test cases with expected results computed by a
trusted oracle here. The task spec (function name, signature, description, examples, and the
family and parameters it was drawn from) is in the payload; the hidden cases are private.
Grading runs the answer in `sandbox.run_function_cases` and compares each return value
structurally (bool is not int; tuples arrive as lists). All values stay within I-JSON integers so
items can be hashed with canonical JSON.

Real work takes the same function spec from a requester, without `family` and `params` (they only
say which generator family an exam task came from).
"""

from __future__ import annotations

import random
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from accord.identity.challenges.base import (
    JSON,
    JSON_SCHEMA_DIALECT,
    DeclaredSchemas,
    ExamItem,
    Grade,
    JSONObject,
    check_item,
    correct,
    generate_items,
    json_equal,
    private_field,
    render_instruction,
    wrong,
)
from accord.identity.challenges.sandbox import (
    DEFAULT_LIMITS,
    MiB,
    SandboxLimits,
    run_function_cases,
)
from accord.identity.errors import ExamError

NAME = "python"
VERSION = "2"
"""2: the payload carries the task's `description` (the instruction is rendered from it)."""
HIDDEN_RANDOM_CASES = 10
VISIBLE_EXAMPLES = 2
MAX_SOURCE_CHARS = 20_000
MAX_EXAMPLES = 100
MAX_DESCRIPTION_CHARS = 10_000
MAX_SIGNATURE_CHARS = 1000
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"
SIGNATURE_PATTERN = r"^def [A-Za-z_][A-Za-z0-9_]*\("
ORDINALS = {2: "second", 3: "third", 4: "fourth"}
BRACKET_PAIRS = ["()", "[]", "{}", "<>"]


def _int(params: JSONObject, key: str) -> int:
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExamError(f"task parameter {key!r} must be an integer")
    return value


def _bool(params: JSONObject, key: str) -> bool:
    value = params[key]
    if not isinstance(value, bool):
        raise ExamError(f"task parameter {key!r} must be a boolean")
    return value


def _str(value: JSON) -> str:
    if not isinstance(value, str):
        raise ExamError("expected a string argument")
    return value


def _ints(value: JSON) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        raise ExamError("expected a list of integers")
    return [x for x in value if isinstance(x, int)]


def _strs(value: JSON) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ExamError("expected a list of strings")
    return [x for x in value if isinstance(x, str)]


def _random_ints(rng: random.Random, low: int = -50, high: int = 50, longest: int = 12) -> JSON:
    return [rng.randint(low, high) for _ in range(rng.randint(0, longest))]


def _random_text(rng: random.Random, alphabet: str, longest: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


@dataclass(frozen=True)
class TaskFamily:
    """A parameterised kind of function: how to draw parameters and inputs, and the oracle."""

    name: str
    signature: str
    """Parameters and return annotation, e.g. `(xs: list[int]) -> int`."""
    make_params: Callable[[random.Random], JSONObject]
    describe: Callable[[JSONObject], str]
    make_args: Callable[[random.Random, JSONObject], list[JSON]]
    oracle: Callable[[JSONObject, list[JSON]], JSON]
    edge_args: Callable[[JSONObject], list[list[JSON]]] = field(default=lambda params: [])


# --- the families -------------------------------------------------------------------------------


def _sum_multiples(params: JSONObject, args: list[JSON]) -> JSON:
    k = _int(params, "k")
    return sum(x for x in _ints(args[0]) if x % k == 0)


def _count_in_range(params: JSONObject, args: list[JSON]) -> JSON:
    low, high = _int(params, "low"), _int(params, "high")
    return sum(1 for x in _ints(args[0]) if low <= x <= high)


def _rotate_left(params: JSONObject, args: list[JSON]) -> JSON:
    xs = _ints(args[0])
    if not xs:
        return []
    shift = _int(params, "k") % len(xs)
    rotated: list[JSON] = [*xs[shift:], *xs[:shift]]
    return rotated


def _caesar(params: JSONObject, args: list[JSON]) -> JSON:
    k = _int(params, "k")
    letters = string.ascii_lowercase
    return "".join(
        letters[(letters.index(c) + k) % 26] if c in letters else c for c in _str(args[0])
    )


def _run_length(params: JSONObject, args: list[JSON]) -> JSON:
    fold = _bool(params, "fold_case")
    runs: list[JSON] = []
    current: list[JSON] | None = None
    previous = ""
    for char in _str(args[0]):
        key = char.lower() if fold else char
        if current is not None and key == previous:
            count = current[1]
            assert isinstance(count, int)
            current[1] = count + 1
        else:
            current = [char, 1]
            runs.append(current)
            previous = key
    return runs


def _recurrence(params: JSONObject, args: list[JSON]) -> JSON:
    a0, a1 = _int(params, "a0"), _int(params, "a1")
    p, q, m = _int(params, "p"), _int(params, "q"), _int(params, "m")
    n = args[0]
    assert isinstance(n, int)
    previous, current = a0 % m, a1 % m
    if n == 0:
        return previous
    for _ in range(n - 1):
        previous, current = current, (p * current + q * previous) % m
    return current


def _dedupe(params: JSONObject, args: list[JSON]) -> JSON:
    fold = _bool(params, "fold_case")
    seen: set[str] = set()
    kept: list[JSON] = []
    for word in _strs(args[0]):
        key = word.lower() if fold else word
        if key not in seen:
            seen.add(key)
            kept.append(word)
    return kept


def _max_window_sum(params: JSONObject, args: list[JSON]) -> JSON:
    width, xs = _int(params, "w"), _ints(args[0])
    if len(xs) < width:
        return None
    return max(sum(xs[i : i + width]) for i in range(len(xs) - width + 1))


def _digit_sum(params: JSONObject, args: list[JSON]) -> JSON:
    base, n = _int(params, "base"), args[0]
    assert isinstance(n, int)
    total = 0
    while n:
        n, digit = divmod(n, base)
        total += digit
    return total


def _balanced(params: JSONObject, args: list[JSON]) -> JSON:
    pairs = _strs(params["pairs"])
    closers = {pair[1]: pair[0] for pair in pairs}
    openers = {pair[0] for pair in pairs}
    stack: list[str] = []
    for char in _str(args[0]):
        if char in openers:
            stack.append(char)
        elif char in closers and (not stack or stack.pop() != closers[char]):
            return False
    return not stack


def _top_word(params: JSONObject, args: list[JSON]) -> JSON:
    shortest = _int(params, "min_len")
    counts = Counter(w.lower() for w in _str(args[0]).split() if len(w) >= shortest)
    if not counts:
        return None
    return min(counts, key=lambda word: (-counts[word], word))


def _clamp(params: JSONObject, args: list[JSON]) -> JSON:
    low, high = _int(params, "low"), _int(params, "high")
    clamped: list[JSON] = [min(max(x, low), high) for x in _ints(args[0])]
    return clamped


def _nth_largest(params: JSONObject, args: list[JSON]) -> JSON:
    nth = _int(params, "nth")
    distinct = sorted(set(_ints(args[0])), reverse=True)
    return distinct[nth - 1] if len(distinct) >= nth else None


def _prefix_mod(params: JSONObject, args: list[JSON]) -> JSON:
    m, total = _int(params, "m"), 0
    sums: list[JSON] = []
    for x in _ints(args[0]):
        total += x
        sums.append(total % m)
    return sums


def _interleave(params: JSONObject, args: list[JSON]) -> JSON:
    first, second = _ints(args[0]), _ints(args[1])
    if params["first"] == "b":
        first, second = second, first
    merged: list[JSON] = []
    for index in range(max(len(first), len(second))):
        merged.extend(x[index] for x in (first, second) if index < len(x))
    return merged


def _balanced_args(rng: random.Random, params: JSONObject) -> list[JSON]:
    chars: list[str] = []
    stack: list[str] = []
    for _ in range(rng.randint(0, 14)):
        roll = rng.random()
        if roll < 0.4:
            pair = rng.choice(BRACKET_PAIRS)
            chars.append(pair[0])
            stack.append(pair[1])
        elif roll < 0.8 and stack:
            chars.append(stack.pop())
        else:
            chars.append(rng.choice("xyz "))
    chars.extend(reversed(stack))
    if chars and rng.random() < 0.5:
        index = rng.randrange(len(chars))
        if rng.random() < 0.5:
            del chars[index]
        else:
            chars[index] = rng.choice("()[]{}<>")
    return ["".join(chars)]


WORDS = ["ash", "bo", "cedar", "dune", "elm", "fig", "a", "gale", "hive", "ix", "jade", "kelp"]


def _top_word_args(rng: random.Random, params: JSONObject) -> list[JSON]:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 12))]
    words = [
        w.upper() if rng.random() < 0.2 else w.capitalize() if rng.random() < 0.2 else w
        for w in words
    ]
    text = ""
    for word in words:
        text += word + rng.choice([" ", " ", "  ", "\n", "\t"])
    return [text]


def _dedupe_args(rng: random.Random, params: JSONObject) -> list[JSON]:
    words: list[JSON] = []
    for _ in range(rng.randint(0, 12)):
        word = rng.choice(WORDS[:6])
        words.append(word.upper() if rng.random() < 0.3 else word)
    return [words]


def _range_params(rng: random.Random) -> JSONObject:
    low = rng.randint(-20, 10)
    return {"low": low, "high": low + rng.randint(5, 30)}


def _signed(q: int) -> str:
    return f"+ {q}" if q >= 0 else f"- {-q}"


FAMILIES: tuple[TaskFamily, ...] = (
    TaskFamily(
        "sum_multiples",
        "(xs: list[int]) -> int",
        lambda rng: {"k": rng.randint(2, 9)},
        lambda p: (
            f"Return the sum of the elements of xs that are divisible by {p['k']} (negative "
            "multiples and 0 count; an empty list gives 0)."
        ),
        lambda rng, p: [_random_ints(rng)],
        _sum_multiples,
        lambda p: [[[]], [[_int(p, "k"), -_int(p, "k"), 0, 1]]],
    ),
    TaskFamily(
        "count_in_range",
        "(xs: list[int]) -> int",
        _range_params,
        lambda p: f"Return how many elements x of xs satisfy {p['low']} <= x <= {p['high']}.",
        lambda rng, p: [_random_ints(rng)],
        _count_in_range,
        lambda p: [[[]], [[_int(p, "low"), _int(p, "high"), _int(p, "low") - 1]]],
    ),
    TaskFamily(
        "rotate_left",
        "(xs: list[int]) -> list[int]",
        lambda rng: {"k": rng.randint(1, 9)},
        lambda p: (
            f"Return a new list: xs rotated left by {p['k']} positions, wrapping around (so "
            "[1, 2, 3] rotated left by 1 is [2, 3, 1]). The shift may exceed len(xs); an empty "
            "list gives []."
        ),
        lambda rng, p: [_random_ints(rng)],
        _rotate_left,
        lambda p: [[[]], [[7]], [list(range(_int(p, "k")))]],
    ),
    TaskFamily(
        "caesar",
        "(s: str) -> str",
        lambda rng: {"k": rng.randint(1, 25)},
        lambda p: (
            f"Return s with every lowercase ASCII letter a-z moved {p['k']} places forward in "
            "the alphabet, wrapping from z to a. Every other character (capitals, digits, "
            "spaces, punctuation) stays as it is."
        ),
        lambda rng, p: [_random_text(rng, string.ascii_lowercase * 2 + "ABXYZ 09.,!", 30)],
        _caesar,
        lambda p: [[""], ["xyz abc XYZ"]],
    ),
    TaskFamily(
        "run_length",
        "(s: str) -> list[list[str | int]]",
        lambda rng: {"fold_case": rng.random() < 0.5},
        lambda p: (
            "Return the run-length encoding of s as a list of [character, count] pairs, one per "
            'maximal run of equal consecutive characters (so "aaB" gives [["a", 2], ["B", 1]]).'
            + (
                " Characters that differ only in case count as equal; each pair holds the "
                "run's first character as written."
                if p["fold_case"]
                else " Characters that differ in case are different."
            )
        ),
        lambda rng, p: [
            "".join(rng.choice("aAbBc") * rng.randint(1, 3) for _ in range(rng.randint(0, 8)))
        ],
        _run_length,
        lambda p: [[""], ["aAaA"]],
    ),
    TaskFamily(
        "recurrence",
        "(n: int) -> int",
        lambda rng: {
            "a0": rng.randint(-3, 3),
            "a1": rng.randint(1, 5),
            "p": rng.randint(1, 3),
            "q": rng.choice([-2, -1, 1, 2]),
            "m": rng.randint(1000, 9999),
        },
        lambda p: (
            f"The sequence a has a(0) = {p['a0']}, a(1) = {p['a1']} and a(n) = {p['p']}*a(n-1) "
            f"{_signed(_int(p, 'q'))}*a(n-2) for n >= 2. Return a(n) modulo {p['m']}, as a "
            f"number in 0..{_int(p, 'm') - 1}. n is between 0 and 5000, so the function must "
            "not recurse naively."
        ),
        lambda rng, p: [rng.randint(0, 5000)],
        _recurrence,
        lambda p: [[0], [1], [2], [5000]],
    ),
    TaskFamily(
        "dedupe",
        "(words: list[str]) -> list[str]",
        lambda rng: {"fold_case": rng.random() < 0.5},
        lambda p: (
            "Return words without repeats: keep the first occurrence of each word, in the "
            "original order."
            + (
                " Words that differ only in case are repeats; keep the first spelling."
                if p["fold_case"]
                else " Words that differ in case are different words."
            )
        ),
        _dedupe_args,
        _dedupe,
        lambda p: [[[]], [["Elm", "elm", "ELM", "ash"]]],
    ),
    TaskFamily(
        "max_window_sum",
        "(xs: list[int]) -> int | None",
        lambda rng: {"w": rng.randint(2, 5)},
        lambda p: (
            f"Return the largest sum of {p['w']} consecutive elements of xs, or None if xs has "
            f"fewer than {p['w']} elements."
        ),
        lambda rng, p: [_random_ints(rng)],
        _max_window_sum,
        lambda p: [[[]], [[1] * (_int(p, "w") - 1)], [[-5] * _int(p, "w")]],
    ),
    TaskFamily(
        "digit_sum",
        "(n: int) -> int",
        lambda rng: {"base": rng.randint(2, 16)},
        lambda p: (
            f"Return the sum of the digits of n written in base {p['base']}, each digit taken "
            "as its integer value (in base 16 the digit f counts 15). n >= 0, and 0 gives 0."
        ),
        lambda rng, p: [rng.randint(0, 10**12)],
        _digit_sum,
        lambda p: [[0], [_int(p, "base") - 1], [_int(p, "base")]],
    ),
    TaskFamily(
        "balanced",
        "(s: str) -> bool",
        lambda rng: {"pairs": list(rng.sample(BRACKET_PAIRS, rng.randint(2, 4)))},
        lambda p: (
            "Return True if the bracket pairs "
            + " ".join(_strs(p["pairs"]))
            + " are balanced in s: every opening bracket is closed by its own partner, in "
            "nested order. Every other character, including other kinds of brackets, is ignored."
        ),
        _balanced_args,
        _balanced,
        lambda p: [[""], [_strs(p["pairs"])[0][0]], [_strs(p["pairs"])[1][1]]],
    ),
    TaskFamily(
        "top_word",
        "(text: str) -> str | None",
        lambda rng: {"min_len": rng.randint(1, 4)},
        lambda p: (
            "Split text on whitespace and lowercase each word; ignore words shorter than "
            f"{p['min_len']} characters. Return the most frequent remaining word, the "
            "alphabetically smallest among equally frequent ones, or None if no word remains."
        ),
        _top_word_args,
        _top_word,
        lambda p: [[""], ["a B"]],
    ),
    TaskFamily(
        "clamp",
        "(xs: list[int]) -> list[int]",
        lambda rng: {"low": rng.randint(-10, 0), "high": rng.randint(1, 15)},
        lambda p: (
            f"Return a new list with each element of xs limited to the range [{p['low']}, "
            f"{p['high']}]: values below {p['low']} become {p['low']}, values above "
            f"{p['high']} become {p['high']}."
        ),
        lambda rng, p: [_random_ints(rng, -30, 30)],
        _clamp,
        lambda p: [[[]]],
    ),
    TaskFamily(
        "nth_largest",
        "(xs: list[int]) -> int | None",
        lambda rng: {"nth": rng.randint(2, 4)},
        lambda p: (
            f"Return the {ORDINALS[_int(p, 'nth')]} largest distinct value in xs (equal values "
            f"count once), or None if xs has fewer than {p['nth']} distinct values."
        ),
        lambda rng, p: [_random_ints(rng, -10, 10)],
        _nth_largest,
        lambda p: [[[]], [[3] * 5]],
    ),
    TaskFamily(
        "prefix_mod",
        "(xs: list[int]) -> list[int]",
        lambda rng: {"m": rng.randint(3, 97)},
        lambda p: (
            "Return the running sums of xs (result i is xs[0] + ... + xs[i]), each reduced "
            f"modulo {p['m']} to the range 0..{_int(p, 'm') - 1}."
        ),
        lambda rng, p: [_random_ints(rng)],
        _prefix_mod,
        lambda p: [[[]], [[-1]]],
    ),
    TaskFamily(
        "interleave",
        "(a: list[int], b: list[int]) -> list[int]",
        lambda rng: {"first": rng.choice(["a", "b"])},
        lambda p: (
            f"Return the elements of a and b alternately, starting with {p['first']}[0]; when "
            "one list runs out, append the rest of the other."
        ),
        lambda rng, p: [_random_ints(rng, longest=6), _random_ints(rng, longest=6)],
        _interleave,
        lambda p: [[[], []], [[1], []], [[], [2, 3]]],
    ),
)
FAMILIES_BY_NAME = {family.name: family for family in FAMILIES}


def _call_text(function_name: str, args: list[JSON]) -> str:
    return f"{function_name}({', '.join(repr(arg) for arg in args)})"


def make_task(
    family: TaskFamily, rng: random.Random, limits: SandboxLimits = DEFAULT_LIMITS
) -> tuple[str, JSONObject, JSONObject]:
    """(prompt, payload, private) of one task of `family`, drawn from `rng`."""
    params = family.make_params(rng)
    suffix = "".join(rng.choice(string.ascii_lowercase) for _ in range(5))
    function_name = f"{family.name}_{suffix}"
    examples: list[JSON] = []
    for _ in range(VISIBLE_EXAMPLES):
        args = family.make_args(rng, params)
        examples.append({"args": args, "result": family.oracle(params, args)})
    hidden_args = family.edge_args(params) + [
        family.make_args(rng, params) for _ in range(HIDDEN_RANDOM_CASES)
    ]
    cases: list[JSON] = [
        {"args": args, "expected": family.oracle(params, args)} for args in hidden_args
    ]
    payload: JSONObject = {
        "family": family.name,
        "function_name": function_name,
        "signature": f"def {function_name}{family.signature}",
        "description": family.describe(params),
        "params": params,
        "examples": examples,
    }
    return instruction(payload, limits), payload, {"cases": cases}


def instruction(input: JSONObject, limits: SandboxLimits = DEFAULT_LIMITS) -> str:
    """The instruction for a function spec (template `python.txt`), stating the sandbox limits.

    Raises ExamError if the spec lacks a string function name, signature or description, or its
    examples are not {args: [...], result} objects.
    """
    function_name, signature, description = (
        input.get(key) for key in ("function_name", "signature", "description")
    )
    if not all(isinstance(v, str) for v in (function_name, signature, description)):
        raise ExamError("a function spec needs a function name, a signature and a description")
    examples = input.get("examples", [])
    if not isinstance(examples, list):
        raise ExamError("a function spec's examples must be a list")
    example_texts = []
    for example in examples:
        if not isinstance(example, dict) or not isinstance(example.get("args"), list):
            raise ExamError("each example must be an object with a list of args and a result")
        args = example["args"]
        assert isinstance(args, list)
        example_texts.append(f"{_call_text(str(function_name), args)} == {example['result']!r}")
    return render_instruction(
        NAME,
        {
            "signature": str(signature),
            "description": str(description),
            "examples": f"Examples: {'; '.join(example_texts)}. " if example_texts else "",
            "cpu_seconds": str(limits.cpu_seconds),
            "memory_mib": str(limits.memory_bytes // MiB),
        },
    )


INPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "python input",
    "description": "The spec of one Python function: its name, signature, behaviour, examples.",
    "type": "object",
    "required": ["function_name", "signature", "description", "examples"],
    "additionalProperties": False,
    "properties": {
        "function_name": {"type": "string", "pattern": IDENTIFIER_PATTERN},
        "signature": {
            "type": "string",
            "maxLength": MAX_SIGNATURE_CHARS,
            "pattern": SIGNATURE_PATTERN,
            "description": "the def line without its colon, e.g. 'def total(xs: list[int]) -> int'",
        },
        "description": {"type": "string", "minLength": 1, "maxLength": MAX_DESCRIPTION_CHARS},
        "examples": {
            "type": "array",
            "maxItems": MAX_EXAMPLES,
            "items": {
                "type": "object",
                "required": ["args", "result"],
                "additionalProperties": False,
                "properties": {"args": {"type": "array"}, "result": {}},
            },
        },
        "family": {
            "type": "string",
            "pattern": IDENTIFIER_PATTERN,
            "description": "the exam task family the spec was drawn from, if any",
        },
        "params": {"type": "object", "description": "that family's parameters"},
    },
    "dependentRequired": {"family": ["params"], "params": ["family"]},
}
OUTPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "python output",
    "description": "The complete source code defining the function (standard library only).",
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_SOURCE_CHARS,
}
EXAMPLE_INPUT: JSONObject = {
    "function_name": "sum_even",
    "signature": "def sum_even(xs: list[int]) -> int",
    "description": "Return the sum of the even elements of xs (an empty list gives 0).",
    "examples": [{"args": [[1, 2, 3, 4]], "result": 6}, {"args": [[]], "result": 0}],
}
EXAMPLE_OUTPUT: JSON = (
    "def sum_even(xs: list[int]) -> int:\n    return sum(x for x in xs if x % 2 == 0)\n"
)


@dataclass(frozen=True)
class PythonCapability(DeclaredSchemas):
    """Small Python functions, all hidden cases must pass (one point per item)."""

    INPUT_SCHEMA = INPUT_SCHEMA
    OUTPUT_SCHEMA = OUTPUT_SCHEMA
    EXAMPLE = (EXAMPLE_INPUT, EXAMPLE_OUTPUT)

    name: str = NAME
    description: str = (
        "Writing small, correct Python functions from a specification, checked by hidden unit "
        "tests run in a time- and memory-limited sandbox."
    )
    version: str = VERSION
    item_count: int = 5
    threshold: Fraction = Fraction(3, 5)
    limits: SandboxLimits = DEFAULT_LIMITS
    runs_code: bool = True
    """Grading runs strangers' code: the exam needs the box
    (`accord.identity.challenges.sandbox`)."""

    def instruction(self, input: JSONObject) -> str:
        """Raises ExamError if the spec lacks a name, signature or description, or has
        malformed examples."""
        return instruction(input, self.limits)

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        """Raises ExamError on a seed shorter than 16 bytes or `n` outside 0..1000."""

        def make(rng: random.Random, item_id: str) -> tuple[str, JSONObject, JSONObject]:
            return make_task(rng.choice(FAMILIES), rng, self.limits)

        return generate_items(self.name, self.version, seed, n, make)

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        """Run the answer in the sandbox against the hidden cases.

        Raises ExamError if `item` is not a python item or is malformed, or if the sandbox
        cannot start; every fault of the answer itself is a zero grade with its reason.
        """
        check_item(item, self.name)
        cases = private_field(item, "cases")
        function_name = item.payload.get("function_name")
        if not isinstance(cases, list) or not isinstance(function_name, str):
            raise ExamError(f"item {item.item_id} is malformed")
        if not isinstance(answer, str):
            return wrong(item, "the answer must be Python source code, as a string")
        if len(answer) > MAX_SOURCE_CHARS:
            return wrong(item, f"source longer than {MAX_SOURCE_CHARS} characters")
        inputs: list[list[JSON]] = []
        for case in cases:
            if not isinstance(case, dict) or not isinstance(case.get("args"), list):
                raise ExamError(f"item {item.item_id} has a malformed case")
            args = case["args"]
            assert isinstance(args, list)
            inputs.append(args)
        run = run_function_cases(answer, function_name, inputs, self.limits)
        if run.failure is not None:
            return wrong(item, run.failure)
        total = len(cases)
        for number, (case, result) in enumerate(zip(cases, run.results, strict=True), start=1):
            assert isinstance(case, dict)
            if result.error is not None:
                return wrong(item, f"hidden case {number} of {total} {result.error}")
            if not json_equal(result.value, case.get("expected")):
                # The value is not shown: a grade is logged, and what the code returns is its
                # own choice (see identity.challenges.sandbox on what may come back).
                return wrong(item, f"hidden case {number} of {total}: wrong result")
        return correct(item, f"passed all {total} hidden cases")


PYTHON = PythonCapability()
