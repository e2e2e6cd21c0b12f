"""The exact Shapley sums in numpy int64 arrays: a speed path, fenced here beside the readable
one it must equal.

`accord.market.shapley._exact_sums` defines the sums and runs them in Python integers
(`shapley._fold_in_python`, the reference path). From 10 to 16 players, when numpy is
installed and no sum can leave int64 (`int64_room`, a bound checked in Python integers
first), it runs them here instead: `fold_weighted` is `_fold_in_python` over int64 arrays, and
`fold_by_size` sums by coalition size where only that fits. tests/market/test_shapley.py holds
both to the Python path and to the textbook definition, value for value, at the edges of
int64 (`sums_in` runs each exact test with numpy hidden, too).

numpy is imported on first use (`numpy_or_none`), never at import.
"""

from __future__ import annotations

import math
from functools import lru_cache
from operator import mul
from typing import Any, Literal

from accord.market.shapley_weights import mask_sizes, reduced_size_weights, size_weights


@lru_cache(maxsize=1)
def numpy_or_none() -> Any:
    """numpy, if it is installed (imported on first use), else None."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def common_denominator(np: Any, denominators: Any) -> tuple[int, int]:
    """The least common multiple of a numpy int64 array of denominators, and the smallest.
    Usually the largest is a multiple of all the others (checked in one array pass), so the
    distinct ones need not be sorted out."""
    largest, smallest = int(denominators.max()), int(denominators.min())
    if largest == smallest or not (largest % denominators).any():
        return largest, smallest
    return math.lcm(*np.unique(denominators).tolist()), smallest


def int64_room(
    numerators: Any, smallest: int, denominator: int, n: int
) -> Literal["weighted", "by size"] | None:
    """Which int64 sums cannot overflow, checked in Python integers: every V(S) is at most
    L = max|numerator|·D/min(d) in size (min(d) is `smallest`).
    - "weighted" (`fold_weighted`): each term (c(|S|)/g)·V(S) is at most max(c/g)·L, and a
      sum has at most 2^n terms: max(c/g)·L·2^n < 2^63 (g: the weights' greatest common
      divisor, `shapley_weights.reduced_size_weights`).
    - "by size" (`fold_by_size`): only sums of V(S) over at most 2^(n-1) coalitions are
      int64; the weights multiply them in Python integers: L·2^(n-1) < 2^63.
    None when neither fits (the sums run in Python integers)."""
    largest = max(-int(numerators.min()), int(numerators.max()), 1)
    largest *= denominator // smallest
    if denominator >= 1 << 63:
        return None
    if (largest * max(reduced_size_weights(n)[1])) << n < 1 << 63:
        return "weighted"
    if largest << (n - 1) < 1 << 63:
        return "by size"
    return None


def fold_weighted(
    np: Any, numerators: Any, denominators: Any, several: bool, denominator: int
) -> list[int]:
    """`shapley._fold_in_python` in numpy int64 arrays (only where `int64_room` says
    "weighted"), with the weights c(s) divided by their greatest common divisor g: the sums
    are g times smaller, and are multiplied back in Python integers."""
    n = len(numerators).bit_length() - 1
    if several:
        numerators = numerators * (denominator // denominators)
    common, _ = reduced_size_weights(n)
    block = numerators * _mask_weights_int64(n)
    holding = [0] * n
    for i in reversed(range(n)):
        half = len(block) >> 1
        holding[i] = common * int(block[half:].sum())
        block = block[:half] + block[half:]
    return holding


def fold_by_size(
    np: Any, numerators: Any, denominators: Any, several: bool, denominator: int
) -> list[int]:
    """`shapley._fold_in_python`'s H_i = Σ_{S∋i} c(|S|)·V(S), as Σ_s c(s)·(Σ_{S∋i, |S|=s}
    V(S)): the inner sums in numpy int64 (one pass over the coalitions ordered by size per
    player), the n+1 products per player in Python integers. For games whose weighted terms
    would leave int64 but whose values are not huge (only where `int64_room` says "by size":
    at 16 players, values of about 2^31 to 2^48 over the common denominator)."""
    n = len(numerators).bit_length() - 1
    values = numerators * (denominator // denominators) if several else numerators
    masks, starts = _masks_by_size(n)
    values = values[masks]
    weights = size_weights(n)
    holding = []
    for i in range(n):
        by_size = np.add.reduceat(np.where((masks >> i) & 1, values, 0), starts)
        holding.append(sum(map(mul, weights, by_size.tolist())))
    return holding


@lru_cache(maxsize=4)
def _masks_by_size(n: int) -> tuple[Any, Any]:
    """Every mask of n players as a numpy int64 array ordered by size (then by mask), and
    where each size 0..n starts in it (none is empty: there are C(n, s) of each)."""
    np = numpy_or_none()
    assert np is not None
    sizes = np.fromiter(map(int.bit_count, range(1 << n)), np.int64, 1 << n)
    masks = np.argsort(sizes, kind="stable").astype(np.int64)
    starts = np.searchsorted(sizes[masks], np.arange(n + 1))
    return masks, starts


@lru_cache(maxsize=4)
def _mask_weights_int64(n: int) -> Any:
    """`shapley_weights.mask_weights(n)` divided by the weights' greatest common divisor, as
    a numpy int64 array (called only when the sums fit in int64)."""
    np = numpy_or_none()
    assert np is not None
    _, reduced = reduced_size_weights(n)
    return np.array(tuple(map(reduced.__getitem__, mask_sizes(n))), dtype=np.int64)
