"""Invented names, places, dates and codes for generated documents and corpora. Pure.

Names are built from syllables, so they belong to nobody real and outside knowledge cannot help;
the space is large enough that two exams almost never share an answer.
"""

from __future__ import annotations

import random
import string
from datetime import date, timedelta

ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "qu", "r",
          "s", "st", "t", "th", "tr", "v", "vr", "w", "z"]  # fmt: skip
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
CODAS = ["", "", "", "l", "n", "r", "s", "th", "x", "m", "nd", "rk"]
COMPANY_KINDS = ["Works", "Labs", "Holdings", "Foundry", "Logistics", "Textiles", "Instruments",
                 "Collective", "Dynamics", "Cooperative", "Mills", "Systems"]  # fmt: skip
COMPANY_SUFFIXES = ["Ltd", "GmbH", "Inc", "AG", "BV", "SA"]
CITY_ENDINGS = ["mouth", "ford", "holm", "vale", "burg", "stead", "moor", "haven", "wick", "by"]
EVENT_KINDS = ["Symposium", "Festival", "Fair", "Summit", "Gala", "Workshop", "Exhibition"]
STREET_KINDS = ["Street", "Lane", "Road", "Avenue", "Way", "Row"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip


def word(rng: random.Random, syllables: int) -> str:
    """A pronounceable invented word, capitalised, e.g. "Vraelmor"."""
    text = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables))
    return (text + rng.choice(CODAS)).capitalize()


def person(rng: random.Random) -> str:
    """An invented full name, e.g. "Thaeris Quolven"."""
    return f"{word(rng, rng.randint(1, 2))} {word(rng, rng.randint(2, 3))}"


def company(rng: random.Random) -> str:
    """An invented company, e.g. "Druvex Instruments GmbH"."""
    return f"{word(rng, 2)} {rng.choice(COMPANY_KINDS)} {rng.choice(COMPANY_SUFFIXES)}"


def city(rng: random.Random) -> str:
    """An invented town, e.g. "Kelvaholm"."""
    return word(rng, rng.randint(1, 2)) + rng.choice(CITY_ENDINGS)


def street_address(rng: random.Random) -> str:
    return f"{rng.randint(1, 240)} {word(rng, 2)} {rng.choice(STREET_KINDS)}"


def event_name(rng: random.Random) -> str:
    return f"{word(rng, 2)} {rng.choice(EVENT_KINDS)} {rng.randint(2, 40)}"


def code(rng: random.Random, prefix_letters: int = 2, digits: int = 6) -> str:
    """An identifier such as "KX-204931"."""
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(prefix_letters))
    return f"{letters}-{rng.randrange(10**digits):0{digits}d}"


def email(rng: random.Random, name: str, domain_word: str) -> str:
    local = name.split()[0].lower()
    return f"{local}.{rng.randint(10, 99)}@{domain_word.lower()}.example"


def random_date(rng: random.Random, first_year: int, last_year: int) -> date:
    start = date(first_year, 1, 1)
    span = (date(last_year, 12, 31) - start).days
    return start + timedelta(days=rng.randint(0, span))


def long_date(day: date) -> str:
    """ "14 March 2031"."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def us_date(day: date) -> str:
    """ "March 14, 2031"."""
    return f"{MONTHS[day.month - 1]} {day.day}, {day.year}"


def write_date(rng: random.Random, day: date) -> str:
    """`day` in one of three unambiguous spellings (never day/month digits)."""
    return rng.choice([long_date, us_date, date.isoformat])(day)
