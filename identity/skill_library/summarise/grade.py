"""The `summarise` skill's fact grader: the summary fits in `max_words` words and states each
key fact of the oracle's summary: every figure (thousands separators aside) and every name of
it appears in the answer."""

import re
from typing import Any

NOT_FACTS = {"The", "Project"}


def grade(input: dict[str, Any], expected: str, answer: object) -> bool:
    if not isinstance(answer, str) or not answer.strip():
        return False
    if len(answer.split()) > input["max_words"]:
        return False
    said = answer.replace(",", "")
    figures = [f.replace(",", "") for f in re.findall(r"\d[\d,]*\d|\d", expected)]
    names = [w for w in re.findall(r"[A-Z][a-z]+", expected) if w not in NOT_FACTS]
    return all(fact in said for fact in figures + names)
