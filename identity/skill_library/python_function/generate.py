"""Exam items of the `python-function` skill: a described function, examples and the oracle's
source (the hidden tests are drawn by `tests.py`)."""

import random
from typing import Any

FAMILIES: list[tuple[str, str, str]] = [
    (
        "running_total",
        "Given a list of integers, return the list of running totals (the i-th item is the sum "
        "of the first i+1 items).",
        "def running_total(xs):\n    out, total = [], 0\n    for x in xs:\n        total += x\n"
        "        out.append(total)\n    return out\n",
    ),
    (
        "count_vowels",
        "Return how many characters of the string are vowels (a, e, i, o, u; either case).",
        "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
    ),
    (
        "second_largest",
        "Return the second largest distinct integer in the list, or None if there is none.",
        "def second_largest(xs):\n    values = sorted(set(xs))\n"
        "    return values[-2] if len(values) > 1 else None\n",
    ),
    (
        "rle",
        "Run-length encode a string: each run of one character becomes the character followed "
        "by the run's length, e.g. 'aaab' -> 'a3b1'.",
        "def rle(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
        "        out.append(s[i] + str(j - i))\n        i = j\n    return ''.join(out)\n",
    ),
    (
        "digit_sum_power",
        "Return the sum of the digits of n (a non-negative integer) raised to the power k.",
        "def digit_sum_power(n, k):\n    return sum(int(d) for d in str(n)) ** k\n",
    ),
]


def _args(rng: random.Random, name: str) -> list[Any]:
    if name in ("running_total", "second_largest"):
        return [[rng.randint(-50, 50) for _ in range(rng.randint(0, 8))]]
    if name in ("count_vowels", "rle"):
        return ["".join(rng.choice("aabeiouxyzAE") for _ in range(rng.randint(0, 12)))]
    return [rng.randint(0, 99999), rng.randint(1, 3)]


def generate(seed: str, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        name, description, source = rng.choice(FAMILIES)
        namespace: dict[str, Any] = {}
        exec(source, namespace)
        examples = []
        for _ in range(2):
            args = _args(rng, name)
            examples.append({"args": args, "returns": namespace[name](*args)})
        items.append(
            {
                "input": {"function_name": name, "description": description, "examples": examples},
                "answer": {"source": source},
            }
        )
    return items
