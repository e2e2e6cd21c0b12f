"""Repetition in a team's communication: measured exactly on small examples, curbed by a guard."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accord.coordinator.conversation import Discuss, message_to_json
from accord.coordinator.repetition import (
    message_bytes,
    repeated_fraction,
    shingles,
    text_of,
)

TASK = (
    "Translate the attached quarterly report into French and summarise its three main risks "
    "for the board in under two hundred words."
)


def test_restating_the_task_every_message_scores_high() -> None:
    messages = [f"{TASK} Step {i}: I will handle part {i}." for i in range(10)]
    # Each message: 28 words, 21 shingles; 15 (14 inside the task, 1 ending on "step") repeat
    # in the 9 messages after the first, 6 name the step number: 9 * 15 / (10 * 21) = 9/14.
    assert repeated_fraction(messages) == Fraction(9, 14)
    assert repeated_fraction([TASK] * 10) == Fraction(9, 10)


def test_distinct_messages_score_zero() -> None:
    messages = [
        "alpha beta gamma delta epsilon zeta eta theta",
        "one two three four five six seven eight nine",
        "red orange yellow green blue indigo violet",
    ]
    assert repeated_fraction(messages) == 0


def test_exact_small_examples() -> None:
    # shingle 2: "a b c" -> (a b)(b c); "a b d" -> (a b)(b d): 1 of 4 repeated.
    assert repeated_fraction(["a b c", "a b d"], shingle=2) == Fraction(1, 4)
    # The same message twice: its 2 shingles repeat, of 4.
    assert repeated_fraction(["a b c", "A, b  c!"], shingle=2) == Fraction(1, 2)
    # Repeats inside one message do not count.
    assert repeated_fraction(["a b a b a b"], shingle=2) == 0
    # Shorter than a shingle: the whole message is one shingle.
    assert repeated_fraction(["ok", "ok", "ok"], shingle=8) == Fraction(2, 3)
    # Three copies of an 8-word text with shingle 8: 2 of 3 repeated.
    eight = "w1 w2 w3 w4 w5 w6 w7 w8"
    assert repeated_fraction([eight] * 3) == Fraction(2, 3)
    assert repeated_fraction([]) == 0
    assert repeated_fraction(["", "..."]) == 0


def test_shingles() -> None:
    assert shingles("A b, c d", 3) == [("a", "b", "c"), ("b", "c", "d")]
    assert shingles("x", 3) == [("x",)]
    assert shingles("  ", 3) == []
    with pytest.raises(ValueError):
        shingles("x", 0)


def test_json_bodies_count_their_content_not_their_keys() -> None:
    bodies = [
        message_to_json(Discuss("did:L", f"point number {i} is unique", "discussion", "did:A"))
        for i in ("one", "two", "three")
    ]
    assert "point number one is unique" in text_of(bodies[0])
    # Keys repeat in every body but do not count; speaker and state strings do.
    score = repeated_fraction(bodies, shingle=3)
    assert 0 < score < 1
    # Bodies whose strings differ score 0 although every key repeats.
    fresh = [{"kind": "discuss", "text": t} for t in ("aa bb cc", "dd ee ff", "gg hh ii")]
    assert repeated_fraction(fresh, shingle=3) == 0


def test_message_bytes() -> None:
    assert message_bytes([]) == 0
    assert message_bytes(["abc", "é"]) == 3 + 2
    assert message_bytes([{"b": 1, "a": "x"}]) == len('{"a":"x","b":1}')
    assert message_bytes(["ab", {"k": "é"}]) == 2 + len('{"k":"é"}'.encode())


@given(st.lists(st.text(max_size=40), max_size=6), st.integers(1, 5))
def test_fraction_is_a_share(messages: list[str], shingle: int) -> None:
    score = repeated_fraction(messages, shingle)
    assert 0 <= score <= 1
    # Saying everything again at the end never lowers the score.
    assert repeated_fraction([*messages, *messages], shingle) >= score
