"""Exam items of the `summarise` skill: a business document and its key facts.

Each document (an incident report, meeting notes or a project update) carries four key facts
(who, what, a date, an amount) among sentences that matter less. The oracle's answer is a
summary that states every key fact; the graders hold an answer to stating them (`grade.py`)
and a judge to stating them faithfully.
"""

import random
from typing import Any

PEOPLE = [
    "Dana Okafor",
    "Ingrid Halvorsen",
    "Marta Lindqvist",
    "Tomas Reyes",
    "Priya Raman",
    "Kwame Mensah",
    "Elif Demir",
    "Jonas Reuter",
    "Aiko Tanaka",
    "Niamh Brennan",
]
PROJECTS = ["Kestrel", "Harbour", "Lantern", "Meridian", "Quarry", "Saltmarsh", "Tamarack"]
SYSTEMS = [
    "billing service",
    "warehouse scanner fleet",
    "customer portal",
    "payroll export",
    "order API",
    "label printer queue",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
FILLER = [
    "Coffee in the third-floor kitchen has been restocked.",
    "The quarterly all-hands moves to the larger room.",
    "Several attendees asked for slides to be shared in advance.",
    "The team thanked facilities for fixing the air conditioning.",
    "A reminder: expense reports are due at the end of each month.",
    "Parking on the east side stays closed for resurfacing.",
]


def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(2026, 2028)}"


def _incident(rng: random.Random) -> tuple[str, str]:
    system, owner, day = rng.choice(SYSTEMS), rng.choice(PEOPLE), _date(rng)
    minutes, cost = rng.randint(12, 240), rng.randint(2, 90) * 1000
    facts = (
        f"The {system} was down for {minutes} minutes; {owner} owns the fix, due {day}; "
        f"the outage cost about EUR {cost:,}."
    )
    body = [
        f"Incident report: {system}.",
        f"During the morning peak the {system} stopped answering, and it stayed down for "
        f"{minutes} minutes before a restart brought it back.",
        rng.choice(FILLER),
        f"Finance puts the cost of the outage at about EUR {cost:,} in lost orders.",
        f"{owner} will own the permanent fix, to be in place by {day}.",
        rng.choice(FILLER),
    ]
    return " ".join(body), facts


def _meeting(rng: random.Random) -> tuple[str, str]:
    project, lead, day = rng.choice(PROJECTS), rng.choice(PEOPLE), _date(rng)
    budget = rng.randint(20, 400) * 1000
    facts = (
        f"Project {project} was approved with a budget of EUR {budget:,}; {lead} leads it; "
        f"it starts on {day}."
    )
    body = [
        f"Notes of the steering meeting on Project {project}.",
        rng.choice(FILLER),
        f"After a long discussion of the alternatives, the board approved Project {project} "
        f"with a budget of EUR {budget:,}.",
        f"{lead} was named to lead it, and work starts on {day}.",
        rng.choice(FILLER),
    ]
    return " ".join(body), facts


def _update(rng: random.Random) -> tuple[str, str]:
    project, owner, day = rng.choice(PROJECTS), rng.choice(PEOPLE), _date(rng)
    extra = rng.randint(5, 120) * 1000
    facts = f"Project {project} slips to {day}; it needs EUR {extra:,} more; {owner} reports it."
    body = [
        f"Status update from {owner} on Project {project}.",
        rng.choice(FILLER),
        f"Testing found problems that push the launch of Project {project} back to {day}.",
        f"Fixing them needs an extra EUR {extra:,}, which has been requested.",
        rng.choice(FILLER),
    ]
    return " ".join(body), facts


def generate(seed: str, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        document, facts = rng.choice([_incident, _meeting, _update])(rng)
        items.append({"input": {"document": document, "max_words": 60}, "answer": facts})
    return items
