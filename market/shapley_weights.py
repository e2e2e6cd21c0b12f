"""The integer weights of the exact Shapley sums (`accord.market.shapley._exact_sums`), shared
by the readable Python path (`shapley._fold_in_python`) and the numpy one
(`accord.market.shapley_int64`). Pure; each table is kept per n for reuse.

c(s), for a coalition of size s of n players: c(0) = c(n) = (n-1)! and
c(s) = n·(s-1)!·(n-s-1)! between.
"""

from __future__ import annotations

import math
from functools import lru_cache


@lru_cache(maxsize=4)
def size_weights(n: int) -> tuple[int, ...]:
    """c(s) for each coalition size s = 0..n."""
    factorial = [math.factorial(k) for k in range(n + 1)]
    return (
        factorial[n - 1],
        *(n * factorial[s - 1] * factorial[n - s - 1] for s in range(1, n)),
        factorial[n - 1],
    )


@lru_cache(maxsize=4)
def reduced_size_weights(n: int) -> tuple[int, tuple[int, ...]]:
    """g, the greatest common divisor of the weights c(0..n) (`size_weights`), and each
    c(s) / g. The largest c(s) / g is far smaller than c(s): 48,048 against 1.4·10^12 at
    n = 16."""
    weights = size_weights(n)
    common = math.gcd(*weights)
    return common, tuple(weight // common for weight in weights)


def mask_sizes(n: int) -> map[int]:
    """The size of the coalition of every mask of n players, in mask order."""
    return map(int.bit_count, range(1 << n))


@lru_cache(maxsize=4)
def mask_weights(n: int) -> tuple[int, ...]:
    """c(|S|) for every mask of n players, in mask order."""
    return tuple(map(size_weights(n).__getitem__, mask_sizes(n)))
