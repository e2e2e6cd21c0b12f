"""Shapley values of a coalition game, and a split of wei in proportion to them.

`shapley(players, value)` returns the Shapley value of every player of the game `value`
(a function from a coalition, a frozenset of player ids, to an exact number):

    φ_i = Σ_{S ⊆ N - {i}} |S|! (n - |S| - 1)! / n! · (v(S + {i}) - v(S))

- **Exact** when n ≤ `exact_limit` (16 by default): v is evaluated once per coalition (2^n
  calls), the coalitions enumerated as bitmasks; the sum is done in integers over the common
  denominator of every v(S), so the values are exact `Fraction`s.
- **Sampled** beyond that: permutation sampling with antithetic pairs (a random permutation
  and its reverse). A player's marginal contribution averaged over the pair is one sample;
  sampling goes on, pair by pair, until the 95% confidence half-width of *every* player
  (normal approximation, z = 1.96, from the sample variance of its pair samples) is at most
  `half_width * |v(N) - v(∅)|` (a bound **relative** to the value to share), or until one more
  pair could exceed `max_evaluations` distinct evaluations of v. The estimates are exact
  `Fraction` means, so Σφ = v(N) - v(∅) exactly (each permutation's marginals telescope).
  The permutations come from `random.Random(seed).shuffle` over the players in the order
  given, so (players, seed, the logged v(S)) recompute the result exactly.

`split_wei(amount, shares)` turns shares into integer wei by largest remainder; the parts
always sum exactly to `amount`.

No I/O, no clock, no global randomness: the seed is an argument, and the result carries it.
"""

from __future__ import annotations

import gc
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from market.errors import SettlementError
from market.money import Wei

Coalition = frozenset[str]
Game = Callable[[Coalition], Fraction]

#: z of a two-sided 95% normal confidence interval.
Z_95 = Fraction(196, 100)
#: Antithetic pairs drawn before the stopping rule is first tried (the normal approximation
#: needs a few dozen samples; a tiny sample can show a variance of zero by chance).
MIN_PAIRS = 32
#: Reported half-widths are √ rounded up to this relative precision (the stopping rule itself
#: compares squares, exactly).
_SQRT_SCALE = 10**12


@dataclass(frozen=True)
class ShapleyResult:
    """The Shapley values of a game, and how they were obtained.

    `method` is "exact" or "sampled". For a sampled result, `half_width` is the largest
    per-player 95% half-width (`half_widths` has each, rounded up), `samples` the number of
    permutations (two per antithetic pair), `seed` the seed of the permutations and
    `converged` whether the stated bound was reached before `max_evaluations`. For an exact
    one `half_width`, `half_widths` and `seed` are None, `samples` is 0 and `converged` True.
    `evaluated` holds every v(S) used; `evaluations` is its size (v is memoised).
    """

    method: Literal["exact", "sampled"]
    values: dict[str, Fraction]
    half_width: Fraction | None
    half_widths: dict[str, Fraction] | None
    samples: int
    evaluations: int
    seed: int | None
    converged: bool
    evaluated: dict[Coalition, Fraction]


def shapley(
    players: Sequence[str],
    value: Game,
    *,
    exact_limit: int = 16,
    seed: int | None = None,
    half_width: Fraction = Fraction(1, 100),
    max_evaluations: int = 200_000,
) -> ShapleyResult:
    """The Shapley values of `value` over `players` (exact up to `exact_limit` players).

    Beyond `exact_limit` the values are sampled and `seed` is required. Raises
    SettlementError for no players, a duplicate or non-string player, a v(S) that is not an
    int or a Fraction, a sampled run without a seed, a negative `half_width`, or a
    `max_evaluations` too small for two antithetic pairs.
    """
    roster = _check_players(players)
    if len(roster) <= exact_limit:
        return _exact(roster, value)
    if seed is None:
        raise SettlementError(
            f"{len(roster)} players is over the exact limit of {exact_limit}: sampling needs a seed"
        )
    if half_width < 0:
        raise SettlementError(f"a half-width cannot be negative: {half_width}")
    return _sampled(roster, value, seed, Fraction(half_width), max_evaluations)


def _check_players(players: Sequence[str]) -> list[str]:
    roster = list(players)
    if not roster:
        raise SettlementError("a game needs at least one player")
    for player in roster:
        if not isinstance(player, str):
            raise SettlementError(f"a player id must be a string, not {player!r}")
    if len(set(roster)) != len(roster):
        duplicates = sorted({p for p in roster if roster.count(p) > 1})
        raise SettlementError(f"duplicate players: {duplicates}")
    return roster


def _exact_number(number: object, coalition: Coalition) -> Fraction:
    if isinstance(number, Fraction):
        return number
    if isinstance(number, int) and not isinstance(number, bool):
        return Fraction(number)
    raise SettlementError(
        f"v({sorted(coalition)}) = {number!r}: a coalition value must be an int or a Fraction"
    )


def _exact(roster: list[str], value: Game) -> ShapleyResult:
    n = len(roster)
    full = 1 << n
    # coalitions[mask] holds roster[i] exactly when bit i of mask is set; sizes[mask] = |S|.
    coalitions: list[Coalition] = [frozenset()]
    sizes = [0]
    # 2^n small objects that all live until the end: the cyclic garbage collector would scan
    # them again and again for nothing (a third of the time at n = 16), so it pauses here.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for player in roster:
            single = frozenset((player,))
            coalitions += [coalition | single for coalition in coalitions]
            sizes += [size + 1 for size in sizes]
        numbers = [value(coalition) for coalition in coalitions]
    finally:
        if collecting:
            gc.enable()
    if not all(type(number) is Fraction for number in numbers):
        numbers = [_exact_number(x, c) for x, c in zip(numbers, coalitions, strict=True)]

    # n!·φ_i = Σ_{S∋i} (|S|-1)!(n-|S|)! v(S) - Σ_{S∌i} |S|!(n-|S|-1)! v(S), in integers over
    # the common denominator D of every v(S):
    #   n!·D·φ_i = Σ_{S∋i} c(S) - Σ_S b(S),  b(S) = |S|!(n-|S|-1)!·D·v(S) (0 for S = N),
    #   c(S) = b(S) + (|S|-1)!(n-|S|)!·D·v(S).
    denominator = math.lcm(*{number.denominator for number in numbers})
    scaled = [number.numerator * (denominator // number.denominator) for number in numbers]
    weight = [math.factorial(s) * math.factorial(n - s - 1) for s in range(n)] + [0]
    weight_in = [0, *weight[:n]]
    both_weight = [w_in + w for w_in, w in zip(weight_in, weight, strict=True)]
    without_total = sum(weight[size] * v for size, v in zip(sizes, scaled, strict=True))
    both = [both_weight[size] * v for size, v in zip(sizes, scaled, strict=True)]
    scale = math.factorial(n) * denominator
    values: dict[str, Fraction] = {}
    for i, player in enumerate(roster):
        block = 1 << i
        holding = sum(sum(both[start : start + block]) for start in range(block, full, 2 * block))
        values[player] = Fraction(holding - without_total, scale)
    evaluated = dict(zip(coalitions, numbers, strict=True))
    return ShapleyResult(
        method="exact",
        values=values,
        half_width=None,
        half_widths=None,
        samples=0,
        evaluations=len(evaluated),
        seed=None,
        converged=True,
        evaluated=evaluated,
    )


def _sampled(
    roster: list[str], value: Game, seed: int, relative: Fraction, max_evaluations: int
) -> ShapleyResult:
    n = len(roster)
    evaluated: dict[Coalition, Fraction] = {}

    def v(coalition: Coalition) -> Fraction:
        known = evaluated.get(coalition)
        if known is None:
            known = evaluated[coalition] = _exact_number(value(coalition), coalition)
        return known

    empty, grand = v(frozenset()), v(frozenset(roster))
    target = relative * abs(grand - empty)
    target_squared = target * target
    rng = random.Random(seed)
    order = list(roster)
    # Per player, over the pairs: Σ t and Σ t², t = the sum of its two marginal contributions
    # (twice the pair's sample).
    sums = dict.fromkeys(roster, Fraction(0))
    squares = dict.fromkeys(roster, Fraction(0))
    pairs = 0
    per_pair = 2 * (n - 1)  # new coalitions a pair can add at most (∅ and N are known)
    converged = False
    while True:
        if len(evaluated) + per_pair > max_evaluations:
            break
        rng.shuffle(order)
        marginal = dict.fromkeys(roster, Fraction(0))
        for permutation in (order, order[::-1]):
            prefix: Coalition = frozenset()
            before = empty
            for player in permutation:
                prefix = prefix | {player}
                after = v(prefix)
                marginal[player] += after - before
                before = after
        for player, t in marginal.items():
            sums[player] += t
            squares[player] += t * t
        pairs += 1
        if pairs >= MIN_PAIRS and all(
            _variance_of_mean(sums[p], squares[p], pairs) * Z_95 * Z_95 <= target_squared
            for p in roster
        ):
            converged = True
            break
    if pairs < 2:
        raise SettlementError(
            f"max_evaluations={max_evaluations} is too small for two antithetic pairs of "
            f"{n} players (each pair needs up to {per_pair} evaluations)"
        )
    values = {p: sums[p] / (2 * pairs) for p in roster}
    half_widths = {
        p: _sqrt_up(_variance_of_mean(sums[p], squares[p], pairs) * Z_95 * Z_95) for p in roster
    }
    return ShapleyResult(
        method="sampled",
        values=values,
        half_width=max(half_widths.values()),
        half_widths=half_widths,
        samples=2 * pairs,
        evaluations=len(evaluated),
        seed=seed,
        converged=converged,
        evaluated=evaluated,
    )


def _variance_of_mean(total: Fraction, squares: Fraction, pairs: int) -> Fraction:
    """s²/K of the pair samples y = t/2, from Σt and Σt² over K pairs."""
    return (squares - total * total / pairs) / (4 * (pairs - 1) * pairs)


def _sqrt_up(square: Fraction) -> Fraction:
    """√square, rounded up to about 1e-12 relative (exact when the root is rational there)."""
    p, q = square.numerator, square.denominator
    scaled = p * q * _SQRT_SCALE * _SQRT_SCALE
    root = math.isqrt(scaled)
    if root * root < scaled:
        root += 1
    return Fraction(root, q * _SQRT_SCALE)


def split_wei(amount: Wei, shares: Mapping[str, Fraction]) -> dict[str, Wei]:
    """Split `amount` wei among the players of `shares`, in proportion to their shares.

    The rule: a negative share counts as zero; the amount is split in proportion to the
    positive shares (if no share is positive, equally among all players). Each player gets
    the floor of its exact quota; the wei left over (fewer than the players) go one each to
    the largest remainders, ties broken by player id ascending. The parts sum exactly to
    `amount`; a player whose share is ≤ 0 gets 0 (unless every share is ≤ 0).

    Raises SettlementError for a negative or non-integer amount, no players, or a share that
    is not an int or a Fraction.
    """
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise SettlementError(f"an amount in wei must be a whole number, not {amount!r}")
    if amount < 0:
        raise SettlementError(f"cannot split a negative amount: {amount}")
    if not shares:
        raise SettlementError("cannot split an amount among no players")
    weights: dict[str, Fraction] = {}
    for player, share in shares.items():
        exact = _exact_number(share, frozenset((player,)))
        weights[player] = exact if exact > 0 else Fraction(0)
    total = sum(weights.values(), Fraction(0))
    if total == 0:
        weights = dict.fromkeys(weights, Fraction(1))
        total = Fraction(len(weights))
    parts: dict[str, int] = {}
    remainders: list[tuple[Fraction, str]] = []
    for player, weight in weights.items():
        quota = amount * weight / total
        whole = quota.numerator // quota.denominator
        parts[player] = whole
        remainders.append((quota - whole, player))
    left = amount - sum(parts.values())
    remainders.sort(key=lambda item: (-item[0], item[1]))
    for _, player in remainders[:left]:
        parts[player] += 1
    return {player: Wei(part) for player, part in parts.items()}
