"""Capability `retrieval`: answer a question from a generated corpus, and only from it.

Each item carries a small corpus (in the payload) about invented companies and people: where each
company sits, when and by whom it was founded, its staff and registry code, where each founder was
born. Since every entity is invented, outside knowledge cannot help; since every item has its own
corpus, answers do not carry over. Questions are direct look-ups, reverse look-ups (which company
has this code), two-hop (where was the founder of X born) and comparisons (which of X and Y is
larger). The grader compares the normalised answer exactly.

Real work takes the same input, a requester's corpus and question; `answer_format` is optional
there (the exam states it so the grader knows how to normalise).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from fractions import Fraction

from accord.identity.challenges import names
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

NAME = "retrieval"
VERSION = "2"
"""2: the instruction no longer says the corpus is fictional (a requester's corpus need not be)."""
COMPANIES_PER_CORPUS = 6
MAX_ANSWER_CHARS = 200
MAX_PASSAGES = 1000
MAX_PASSAGE_CHARS = 20_000
MAX_QUESTION_CHARS = 1000
ANSWER_FORMATS = ("name", "integer", "date")


@dataclass(frozen=True)
class Company:
    name: str
    city: str
    founded: date
    founder: str
    employees: int
    registry_code: str


@dataclass(frozen=True)
class Founder:
    name: str
    birthplace: str
    born: date


def _distinct(rng: random.Random, make: Callable[[random.Random], str], count: int) -> list[str]:
    found: list[str] = []
    while len(found) < count:
        candidate = make(rng)
        if candidate not in found:
            found.append(candidate)
    return found


def _make_world(rng: random.Random) -> tuple[list[Company], list[Founder]]:
    count = COMPANIES_PER_CORPUS
    company_names = _distinct(rng, names.company, count)
    founder_names = _distinct(rng, names.person, count)
    cities = _distinct(rng, names.city, count + 3)
    codes = _distinct(rng, lambda r: names.code(r, 2, 5), count)
    staff = rng.sample(range(120, 90_000), count)
    companies, founders = [], []
    for index in range(count):
        born = names.random_date(rng, 1900, 1960)
        founders.append(Founder(founder_names[index], rng.choice(cities), born))
        companies.append(
            Company(
                company_names[index],
                rng.choice(cities),
                names.random_date(rng, born.year + 20, born.year + 60),
                founder_names[index],
                staff[index],
                codes[index],
            )
        )
    return companies, founders


def _company_passage(rng: random.Random, company: Company) -> str:
    founded = names.write_date(rng, company.founded)
    staff = f"{company.employees:,}"
    if rng.random() < 0.5:
        return (
            f"{company.name} is headquartered in {company.city}. It was founded on {founded} by "
            f"{company.founder} and employs {staff} people. Its registry code is "
            f"{company.registry_code}."
        )
    return (
        f"Founded by {company.founder} on {founded}, {company.name} (registry code "
        f"{company.registry_code}) has its head office in {company.city} and a workforce of "
        f"{staff}."
    )


def _founder_passage(rng: random.Random, founder: Founder) -> str:
    born = names.write_date(rng, founder.born)
    if rng.random() < 0.5:
        return f"{founder.name} was born in {founder.birthplace} on {born}."
    return f"Born on {born} in {founder.birthplace}, {founder.name} later became an entrepreneur."


def _question(
    rng: random.Random, companies: list[Company], founders: list[Founder]
) -> tuple[str, str, JSON]:
    """(question, answer format, answer)."""
    company = rng.choice(companies)
    kind = rng.choice(
        ["city", "founder", "employees", "founded", "code", "birthplace", "larger", "born"]
    )
    founder = next(f for f in founders if f.name == company.founder)
    if kind == "city":
        return f"In which city is {company.name} headquartered?", "name", company.city
    if kind == "founder":
        return f"Who founded {company.name}?", "name", company.founder
    if kind == "employees":
        return f"How many people does {company.name} employ?", "integer", company.employees
    if kind == "founded":
        return f"On what date was {company.name} founded?", "date", company.founded.isoformat()
    if kind == "code":
        question = f"Which company has the registry code {company.registry_code}?"
        return question, "name", company.name
    if kind == "birthplace":
        question = f"In which city was the founder of {company.name} born?"
        return question, "name", founder.birthplace
    if kind == "born":
        question = f"On what date was the founder of {company.name} born?"
        return question, "date", founder.born.isoformat()
    other = rng.choice([c for c in companies if c is not company])
    first, second = (company, other) if rng.random() < 0.5 else (other, company)
    larger = max(first, second, key=lambda c: c.employees)
    question = f"Which has more employees, {first.name} or {second.name}?"
    return question, "name", larger.name


def _make_item(rng: random.Random, item_id: str) -> tuple[str, JSONObject, JSONObject]:
    companies, founders = _make_world(rng)
    passages = [_company_passage(rng, c) for c in companies]
    passages += [_founder_passage(rng, f) for f in founders]
    rng.shuffle(passages)
    question, answer_format, answer = _question(rng, companies, founders)
    corpus: list[JSON] = list(passages)
    payload: JSONObject = {"corpus": corpus, "question": question, "answer_format": answer_format}
    return instruction(payload), payload, {"answer": answer}


def instruction(input: JSONObject) -> str:
    """The instruction for a corpus and a question (template `retrieval.txt`).

    Raises ExamError if the input has no string question.
    """
    question = input.get("question")
    if not isinstance(question, str):
        raise ExamError("a retrieval input needs a string question")
    return render_instruction(NAME, {"question": question})


INPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "retrieval input",
    "description": "A corpus of passages and a question to answer from it alone.",
    "type": "object",
    "required": ["corpus", "question"],
    "additionalProperties": False,
    "properties": {
        "corpus": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_PASSAGES,
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_PASSAGE_CHARS},
        },
        "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS},
        "answer_format": {
            "enum": list(ANSWER_FORMATS),
            "description": "what the answer is: a name, a count (integer) or a date",
        },
    },
}
OUTPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "retrieval output",
    "description": (
        "A string (a name as the corpus spells it, or a date as YYYY-MM-DD) or, for a count, "
        "a non-negative JSON integer."
    ),
    "anyOf": [
        {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER_CHARS},
        {"type": "integer", "minimum": 0},
    ],
}
EXAMPLE_INPUT: JSONObject = {
    "corpus": [
        "Brelmor Works Ltd is headquartered in Kelvaholm. It was founded on 14 March 1931 by "
        "Thaeris Quolven and employs 2,400 people. Its registry code is KX-20493.",
        "Thaeris Quolven was born in Vraelmouth on 2 June 1902.",
    ],
    "question": "In which city was the founder of Brelmor Works Ltd born?",
}
EXAMPLE_OUTPUT: JSON = "Vraelmouth"


_INTEGER = re.compile(r"\d{1,3}(,\d{3})*|\d+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def normalise_answer(answer_format: str, answer: JSON) -> str | None:
    """The comparable form of an answer, or None if it is not in the stated format.

    Raises ExamError for an unknown answer format.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ExamError(f"unknown answer format {answer_format!r}")
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return str(answer) if answer_format == "integer" and answer >= 0 else None
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER_CHARS:
        return None
    text = " ".join(unicodedata.normalize("NFC", answer).casefold().split()).removesuffix(".")
    if answer_format == "integer":
        if not _INTEGER.fullmatch(text):
            return None
        return str(int(text.replace(",", "")))
    if answer_format == "date":
        if not _DATE.fullmatch(text):
            return None
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            return None
    return text.strip()


@dataclass(frozen=True)
class RetrievalCapability(DeclaredSchemas):
    """Question answering over a given corpus of invented facts, exact normalised match."""

    INPUT_SCHEMA = INPUT_SCHEMA
    OUTPUT_SCHEMA = OUTPUT_SCHEMA
    EXAMPLE = (EXAMPLE_INPUT, EXAMPLE_OUTPUT)

    name: str = NAME
    description: str = (
        "Answering questions (look-ups, reverse look-ups, two-hop and comparisons) from a given "
        "corpus of fictional facts, with exact answers."
    )
    version: str = VERSION
    item_count: int = 10
    threshold: Fraction = Fraction(4, 5)

    def instruction(self, input: JSONObject) -> str:
        """Raises ExamError if the input has no string question."""
        return instruction(input)

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        """Raises ExamError on a seed shorter than 16 bytes or `n` outside 0..1000."""
        return generate_items(self.name, self.version, seed, n, _make_item)

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        """Raises ExamError if `item` is not a retrieval item or is malformed."""
        check_item(item, self.name)
        answer_format = item.payload.get("answer_format")
        if not isinstance(answer_format, str):
            raise ExamError(f"item {item.item_id} has no answer format")
        expected = normalise_answer(answer_format, private_field(item, "answer"))
        if expected is None:
            raise ExamError(f"item {item.item_id} has a malformed answer")
        given = normalise_answer(answer_format, answer)
        if given is None:
            return wrong(item, f"not a {answer_format} in the stated format")
        if given != expected:
            return wrong(item, "not the answer the corpus gives")
        return correct(item)


RETRIEVAL = RetrievalCapability()
