"""Measure and curb repetition in a team's communication.

The IoA paper (arXiv 2407.07061) found that about half of its communication cost was repeated
content: agents restating the task, the plan and each other's results. These pure functions
measure that over a conversation's messages, given as texts or as JSON bodies
(`conversation.message_to_json`), for scripts/bench/bench_team.py.

Unit of repetition: **word shingles**. A text is lower-cased and split into words (runs of
letters, digits and underscores, `\\w+`); its shingles are the windows of `shingle` consecutive
words (a text shorter than that is one shingle of all its words). A shingle is *repeated* when an
earlier message contained it. Words rather than bytes, so that spacing, punctuation and case do
not hide a restatement, and so that the measure reads as "share of what was said that had been
said before". A JSON body counts by its string leaves (the content), not its keys or numbers,
which every message repeats by construction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

Body = str | Mapping[str, Any]
"""A message: its text, or its JSON body."""

_WORD = re.compile(r"\w+")


def text_of(body: Body) -> str:
    """The content of a message: the text itself, or a JSON body's string leaves joined by
    newlines (depth first, in the body's order)."""
    if isinstance(body, str):
        return body
    return "\n".join(_strings(body))


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def words(text: str) -> list[str]:
    """The lower-cased words of `text`."""
    return _WORD.findall(text.lower())


def shingles(text: str, shingle: int = 8) -> list[tuple[str, ...]]:
    """The `shingle`-word windows of `text`, in order (one window if it is shorter; none if it
    has no words)."""
    if shingle < 1:
        raise ValueError("a shingle has at least one word")
    ws = words(text)
    if not ws:
        return []
    if len(ws) <= shingle:
        return [tuple(ws)]
    return [tuple(ws[i : i + shingle]) for i in range(len(ws) - shingle + 1)]


def repeated_fraction(messages: Sequence[Body], shingle: int = 8) -> Fraction:
    """The share of all the messages' shingles that an earlier message already contained.

    0 when every message is new, close to 1 when each restates the ones before. Repeats inside
    one message do not count (a message is compared with earlier messages only). An empty
    conversation scores 0.
    """
    seen: set[tuple[str, ...]] = set()
    total = repeated = 0
    for body in messages:
        grams = shingles(text_of(body), shingle)
        total += len(grams)
        repeated += sum(1 for g in grams if g in seen)
        seen.update(grams)
    return Fraction(repeated, total) if total else Fraction(0)


def message_bytes(messages: Iterable[Body]) -> int:
    """The bytes the messages take: a text's UTF-8 length, a JSON body's compact canonical
    encoding (sorted keys, no spaces, UTF-8), as a ledger event would carry it."""
    size = 0
    for body in messages:
        if isinstance(body, str):
            size += len(body.encode())
        else:
            encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            size += len(encoded.encode())
    return size
