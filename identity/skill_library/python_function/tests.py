"""Hidden tests of a `python-function` item: arguments drawn from the item, results from the
oracle's source (the declarer's code, run in this box; the answer runs in a box of its own)."""

import hashlib
import random
from typing import Any


def _args(rng: random.Random, name: str) -> list[Any]:
    if name in ("running_total", "second_largest"):
        return [[rng.randint(-1000, 1000) for _ in range(rng.randint(0, 30))]]
    if name in ("count_vowels", "rle"):
        return ["".join(rng.choice("aaabeiouxyzAEQ ") for _ in range(rng.randint(0, 40)))]
    return [rng.randint(0, 10**9), rng.randint(0, 4)]


def tests(input: dict[str, Any], expected: dict[str, Any]) -> list[list[Any]]:
    name = input["function_name"]
    digest = hashlib.sha256(repr(input).encode("utf-8")).hexdigest()
    rng = random.Random(digest)
    namespace: dict[str, Any] = {}
    exec(expected["source"], namespace)
    cases = [example["args"] for example in input["examples"]]
    cases += [_args(rng, name) for _ in range(12)]
    return [[args, namespace[name](*args)] for args in cases]
