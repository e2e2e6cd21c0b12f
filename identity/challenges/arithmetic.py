"""Capability `arithmetic`: exact integer expressions, unit conversions and figures.

Exam items are either an expression over integers with plus, minus, times, divide (printed with
the Unicode minus, multiplication and division signs) and parentheses, or a conversion between
units of one dimension (length, mass, time). A requester may also give a list of decimal figures
and an operation (sum, product, mean, min, max): "sum these invoice figures". Every answer is an
exact rational number; the grader accepts an integer, a decimal string ("-12.5") or a fraction
string ("25/2") and compares with `Fraction`. Floats are refused: they are not exact.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from decimal import Decimal
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
    private_field,
    render_instruction,
    wrong,
)
from accord.identity.errors import ExamError

NAME = "arithmetic"
VERSION = "1"

MINUS_SIGN = "\N{MINUS SIGN}"
TIMES_SIGN = "\N{MULTIPLICATION SIGN}"
DIVISION_SIGN = "\N{DIVISION SIGN}"
OPERATOR_SYMBOLS = {"+": "+", "-": MINUS_SIGN, "*": TIMES_SIGN, "/": DIVISION_SIGN}
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}

UNITS: dict[str, tuple[str, Fraction]] = {
    "km": ("length", Fraction(1000)),
    "m": ("length", Fraction(1)),
    "cm": ("length", Fraction(1, 100)),
    "mm": ("length", Fraction(1, 1000)),
    "t": ("mass", Fraction(1_000_000)),
    "kg": ("mass", Fraction(1000)),
    "g": ("mass", Fraction(1)),
    "mg": ("mass", Fraction(1, 1000)),
    "h": ("time", Fraction(3600)),
    "min": ("time", Fraction(60)),
    "s": ("time", Fraction(1)),
}
"""Each unit's dimension and its size in the dimension's base unit (m, g, s)."""

MAX_ANSWER_CHARS = 200
MAX_EXPRESSION_CHARS = 1000
MAX_FIGURES = 1000
MAX_FIGURE_CHARS = 40
FIGURE_OPERATIONS = ("sum", "product", "mean", "min", "max")
DECIMAL_PATTERN = r"^-?\d+(\.\d+)?$"
EXPRESSION_PATTERN = r"^[0-9+*/()\s\u2212\u00d7\u00f7-]+$"
EXACT_NUMBER_PATTERN = r"^\s*[+\u2212-]?\d+(\.\d+|\s*/\s*\d*[1-9]\d*)?\s*$"
_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?\d+\.\d+")
_FRACTION = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class Number:
    value: int


@dataclass(frozen=True)
class Operation:
    operator: str
    left: Expression
    right: Expression


Expression = Number | Operation


def evaluate(expression: Expression) -> Fraction:
    """The exact value. Raises ZeroDivisionError when a divisor is zero."""
    if isinstance(expression, Number):
        return Fraction(expression.value)
    left, right = evaluate(expression.left), evaluate(expression.right)
    if expression.operator == "+":
        return left + right
    if expression.operator == "-":
        return left - right
    if expression.operator == "*":
        return left * right
    return left / right


def render(expression: Expression) -> str:
    """Infix text with the fewest parentheses that keep the meaning, in `OPERATOR_SYMBOLS`."""
    if isinstance(expression, Number):
        return str(expression.value)
    precedence = PRECEDENCE[expression.operator]
    left = render(expression.left)
    right = render(expression.right)
    if isinstance(expression.left, Operation) and PRECEDENCE[expression.left.operator] < precedence:
        left = f"({left})"
    if isinstance(expression.right, Operation):
        right_precedence = PRECEDENCE[expression.right.operator]
        if right_precedence < precedence or (
            right_precedence == precedence and expression.operator in "-/"
        ):
            right = f"({right})"
    return f"{left} {OPERATOR_SYMBOLS[expression.operator]} {right}"


def _random_expression(rng: random.Random, leaves: int) -> Expression:
    if leaves == 1:
        return Number(rng.randint(2, 999) if rng.random() < 0.6 else rng.randint(1, 99))
    left_leaves = rng.randint(1, leaves - 1)
    return Operation(
        rng.choice("+-*/"),
        _random_expression(rng, left_leaves),
        _random_expression(rng, leaves - left_leaves),
    )


def random_expression(rng: random.Random) -> tuple[Expression, Fraction]:
    """An expression of 4 to 6 integers with a defined value of modest size, and that value."""
    while True:
        expression = _random_expression(rng, rng.randint(4, 6))
        try:
            value = evaluate(expression)
        except ZeroDivisionError:
            continue
        if value.denominator <= 10**6 and abs(value) <= 10**9:
            return expression, value


def random_decimal(rng: random.Random) -> Decimal:
    """A positive decimal below 10 000 with 0 to 3 decimal places, e.g. 37.25."""
    places = rng.randint(0, 3)
    return Decimal(rng.randint(1, 10_000 * 10**places - 1)).scaleb(-places)


def format_fraction(value: Fraction) -> str:
    """`value` as "n" when whole, otherwise "p/q" in lowest terms."""
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )


FIGURE_TASKS = {
    "sum": "Compute the exact sum of these figures: {figures}.",
    "product": "Compute the exact product of these figures: {figures}.",
    "mean": "Compute the exact mean (the sum divided by the count) of these figures: {figures}.",
    "min": "Find the smallest of these figures: {figures}.",
    "max": "Find the largest of these figures: {figures}.",
}


def _string(input: JSONObject, key: str) -> str:
    value = input.get(key)
    if not isinstance(value, str):
        raise ExamError(f"an arithmetic input needs a string {key!r}")
    return value


def instruction(input: JSONObject) -> str:
    """The instruction for an arithmetic input (template `arithmetic.txt`).

    Raises ExamError for an input of no known kind or lacking a field its kind needs.
    """
    kind = input.get("kind")
    if kind == "expression":
        task = f"Compute the exact value of {_string(input, 'expression')}."
    elif kind == "conversion":
        value, source, target = (_string(input, key) for key in ("value", "from", "to"))
        task = f"Convert {value} {source} to {target}."
    elif kind == "figures":
        figures = input.get("figures")
        operation = input.get("operation")
        if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
            raise ExamError("a figures input needs a list of decimal strings")
        if not isinstance(operation, str) or operation not in FIGURE_TASKS:
            raise ExamError(f"unknown figures operation {operation!r}")
        task = FIGURE_TASKS[operation].format(figures=", ".join(str(f) for f in figures))
    else:
        raise ExamError(f"unknown arithmetic input kind {kind!r}")
    return render_instruction(NAME, {"task": task})


def _make_expression_item(rng: random.Random) -> tuple[str, JSONObject, JSONObject]:
    expression, value = random_expression(rng)
    payload: JSONObject = {"kind": "expression", "expression": render(expression)}
    return instruction(payload), payload, {"answer": format_fraction(value)}


def _make_conversion_item(rng: random.Random) -> tuple[str, JSONObject, JSONObject]:
    dimension = rng.choice(["length", "mass", "time"])
    units = [unit for unit, (unit_dimension, _) in UNITS.items() if unit_dimension == dimension]
    source, target = rng.sample(units, 2)
    amount = random_decimal(rng)
    value = Fraction(amount) * UNITS[source][1] / UNITS[target][1]
    payload: JSONObject = {"kind": "conversion", "value": str(amount), "from": source, "to": target}
    return instruction(payload), payload, {"answer": format_fraction(value)}


def _make_item(rng: random.Random, item_id: str) -> tuple[str, JSONObject, JSONObject]:
    if rng.random() < 0.5:
        return _make_expression_item(rng)
    return _make_conversion_item(rng)


def parse_exact_number(answer: JSON) -> Fraction | str:
    """The exact value of an answer, or a string saying why it is not an exact number."""
    if isinstance(answer, bool) or answer is None:
        return f"expected a number, got {answer!r}"
    if isinstance(answer, int):
        return Fraction(answer)
    if isinstance(answer, float):
        return "floats are not exact; send an integer or a decimal or fraction string"
    if not isinstance(answer, str):
        return f"expected a number, got a {type(answer).__name__}"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    text = answer.strip().replace(MINUS_SIGN, "-")
    try:
        if _INTEGER.fullmatch(text) or _DECIMAL.fullmatch(text):
            return Fraction(Decimal(text))
        match = _FRACTION.fullmatch(text)
        if match:
            denominator = int(match.group(2))
            if denominator == 0:
                return "fraction with a zero denominator"
            return Fraction(int(match.group(1)), denominator)
    except ValueError:
        return "number too long"
    return f"not an integer, decimal or fraction: {answer[:40]!r}"


def _kind_schema(kind: str, properties: JSONObject) -> JSONObject:
    """The rule `kind == <kind>` implies the object has exactly `properties`, all required."""
    required: list[JSON] = ["kind", *properties]
    return {
        "if": {"required": ["kind"], "properties": {"kind": {"const": kind}}},
        "then": {
            "required": required,
            "properties": {"kind": {"const": kind}, **properties},
            "additionalProperties": False,
        },
    }


def _same_dimension(dimension: str) -> JSONObject:
    units: list[JSON] = [unit for unit, (found, _) in UNITS.items() if found == dimension]
    return {
        "if": {"required": ["from"], "properties": {"from": {"enum": units}}},
        "then": {"properties": {"to": {"enum": units}}},
    }


UNIT_NAMES: list[JSON] = list(UNITS)
INPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "arithmetic input",
    "description": (
        "An integer expression, a unit conversion, or decimal figures and an operation on them."
    ),
    "type": "object",
    "required": ["kind"],
    "properties": {"kind": {"enum": ["expression", "conversion", "figures"]}},
    "allOf": [
        _kind_schema(
            "expression",
            {
                "expression": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_EXPRESSION_CHARS,
                    "pattern": EXPRESSION_PATTERN,
                    "description": "integers, + - * / (or \u2212 \u00d7 \u00f7) and brackets",
                }
            },
        ),
        _kind_schema(
            "conversion",
            {
                "value": {
                    "type": "string",
                    "maxLength": MAX_FIGURE_CHARS,
                    "pattern": DECIMAL_PATTERN,
                },
                "from": {"enum": UNIT_NAMES},
                "to": {"enum": UNIT_NAMES},
            },
        ),
        _kind_schema(
            "figures",
            {
                "figures": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_FIGURES,
                    "items": {
                        "type": "string",
                        "maxLength": MAX_FIGURE_CHARS,
                        "pattern": DECIMAL_PATTERN,
                    },
                },
                "operation": {"enum": list(FIGURE_OPERATIONS)},
            },
        ),
        *(_same_dimension(dimension) for dimension in ("length", "mass", "time")),
    ],
}
OUTPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "arithmetic output",
    "description": (
        'The exact value: a JSON integer, or a string holding an integer, a decimal ("-12.5") '
        'or a fraction ("25/2"). Floats are not exact and are refused.'
    ),
    "anyOf": [
        {"type": "integer"},
        {"type": "string", "maxLength": MAX_ANSWER_CHARS, "pattern": EXACT_NUMBER_PATTERN},
    ],
}
EXAMPLE_INPUT: JSONObject = {
    "kind": "figures",
    "figures": ["120.50", "43.19"],
    "operation": "sum",
}
EXAMPLE_OUTPUT: JSON = "163.69"


@dataclass(frozen=True)
class ArithmeticCapability(DeclaredSchemas):
    """Exact arithmetic and unit conversion, all-or-nothing per item."""

    INPUT_SCHEMA = INPUT_SCHEMA
    OUTPUT_SCHEMA = OUTPUT_SCHEMA
    EXAMPLE = (EXAMPLE_INPUT, EXAMPLE_OUTPUT)

    name: str = NAME
    description: str = (
        "Exact arithmetic on integer expressions with + - * / and parentheses, unit "
        "conversions (km/m/cm/mm, t/kg/g/mg, h/min/s), and the sum, product, mean, minimum or "
        "maximum of decimal figures, answered as exact numbers."
    )
    version: str = VERSION
    item_count: int = 20
    threshold: Fraction = Fraction(4, 5)

    def instruction(self, input: JSONObject) -> str:
        """Raises ExamError for an input of no known kind or lacking a field its kind needs."""
        return instruction(input)

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        """Raises ExamError on a seed shorter than 16 bytes or `n` outside 0..1000."""
        return generate_items(self.name, self.version, seed, n, _make_item)

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        """Raises ExamError if `item` is not an arithmetic item or lacks its answer."""
        check_item(item, self.name)
        expected = parse_exact_number(private_field(item, "answer"))
        if isinstance(expected, str):
            raise ExamError(f"item {item.item_id} has a malformed answer: {expected}")
        given = parse_exact_number(answer)
        if isinstance(given, str):
            return wrong(item, given)
        if given != expected:
            return wrong(item, f"{format_fraction(given)} is not the value asked for")
        return correct(item)


ARITHMETIC = ArithmeticCapability()
