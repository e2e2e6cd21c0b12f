"""Shapley values of a coalition game, and a split of wei in proportion to them.

`shapley(players, value)` returns the Shapley value of every player of the game `value`
(a function from a coalition, a frozenset of player ids, to an exact number):

    φ_i = Σ_{S ⊆ N - {i}} |S|! (n - |S| - 1)! / n! · (v(S + {i}) - v(S))

- **Exact** when n ≤ `exact_limit` (16 by default): v is evaluated once per coalition (2^n
  calls, in bitmask order); the sums are done in integers over the common denominator of
  every v(S), one pass over the 2^n values for all players (`_exact_sums`), so the values are
  exact `Fraction`s. From 10 to 16 players, when numpy is installed and no sum can leave int64
  (a bound checked first), that pass runs in numpy int64 arrays; otherwise in Python integers.
  Both give the same values to the last digit.
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
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import add, attrgetter, mul
from typing import Any, Literal

from accord.market import shapley_int64
from accord.market.errors import SettlementError
from accord.market.money import Wei
from accord.market.shapley_weights import mask_weights

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
#: Coalitions are made in blocks over the first this many players (see `_exact`).
_LOW_PLAYERS = 8
#: From _INT64_FROM to _INT64_UP_TO players the exact sums run in numpy int64 arrays when
#: numpy is installed and they fit (`accord.market.shapley_int64`, the speed path fenced
#: beside this module's Python one: `int64_room`): weighted (`fold_weighted`, the weights
#: divided by their gcd, each then under 2^16) where that leaves room, else by coalition size
#: (`fold_by_size`), which needs only 2^(n-1).
#: Below, numpy's fixed costs outweigh what it saves; above, exact values are not the default
#: (16 is `shapley`'s exact limit) and the arrays grow as 2^n.
_INT64_FROM = 10
_INT64_UP_TO = 16
# A Fraction keeps its terms in two slots, behind the properties `numerator` and `denominator`:
# read directly, 2^n of them cost half as much (the values are checked to be Fractions first).
if hasattr(Fraction(1), "_numerator") and hasattr(Fraction(1), "_denominator"):
    _NUMERATOR, _DENOMINATOR = attrgetter("_numerator"), attrgetter("_denominator")
else:  # pragma: no cover - another implementation of fractions
    _NUMERATOR, _DENOMINATOR = attrgetter("numerator"), attrgetter("denominator")


@dataclass(frozen=True)
class ShapleyResult:
    """The Shapley values of a game, and how they were obtained.

    `method` is "exact" or "sampled". For a sampled result, `half_width` is the largest
    per-player 95% half-width (`half_widths` has each, rounded up), `samples` the number of
    permutations (two per antithetic pair), `seed` the seed of the permutations and
    `converged` whether the stated bound was reached before `max_evaluations`. For an exact
    one `half_width`, `half_widths` and `seed` are None, `samples` is 0 and `converged` True.
    `evaluated` holds every v(S) used, keyed by coalition (a `CoalitionValues` for an exact
    result, a dict for a sampled one); `evaluations` is its size (v is memoised).
    """

    method: Literal["exact", "sampled"]
    values: dict[str, Fraction]
    half_width: Fraction | None
    half_widths: dict[str, Fraction] | None
    samples: int
    evaluations: int
    seed: int | None
    converged: bool
    evaluated: Mapping[Coalition, Fraction]


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
    # v is called once per coalition, in mask order (bit i for roster[i]). A coalition is the
    # union of its part in the first _LOW_PLAYERS players (one of `lows`) and its part in the
    # rest (`high`), made as `low | high`: the low part is copied slot for slot and the high
    # part's players are added (the other way round, each of the low part's players is hashed
    # into a new table: at n = 12, where the high part has at most 4 players, 1M more
    # instructions per call, 8% of what shapley adds to v's own). They are made a block of
    # 2^_LOW_PLAYERS at a time and freed after their calls, so the sets v reads stay in the
    # CPU's cache (all 2^n sets at once are tens of MB at n = 16, and v ran about a third
    # slower on them), and the result holds no 2^n frozensets (`CoalitionValues` keeps v(S)
    # by mask).
    # The values stay alive until the sums are done: the cyclic garbage collector would scan
    # them again and again for nothing, so it pauses for the whole computation.
    split = min(len(roster), _LOW_PLAYERS)
    collecting = gc.isenabled()
    gc.disable()
    try:
        lows = _coalitions(roster[:split])
        numbers = list(map(value, lows))
        for high in _coalitions(roster[split:])[1:]:
            numbers += map(value, [low | high for low in lows])
        if list(map(type, numbers)).count(Fraction) != len(numbers):
            numbers = [
                _exact_number(x, c) for x, c in zip(numbers, _coalitions(roster), strict=True)
            ]
        values, numerators, denominators = _exact_sums(roster, numbers)
        # The 2^n Fractions are released here, before the collector resumes (they die unless
        # v keeps them): the result keeps their terms as ints, which the collector does not
        # track, so no collection has to walk 2^n Fractions for it.
        del numbers
        evaluated = CoalitionValues(roster, numerators, denominators)
    finally:
        if collecting:
            gc.enable()
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


def _exact_sums(roster: list[str], numbers: list[Fraction]) -> tuple[dict[str, Fraction], Any, Any]:
    """φ of every player from v(S) = numbers[mask of S] (bit i for roster[i]), in integers;
    with the numerators and denominators of `numbers` (lists of ints, or numpy int64 arrays
    when the sums ran in numpy).

    Over the common denominator D of every v(S), with V(S) = D·v(S) (an integer):

        n!·D·φ_i = Σ_{S∋i} (|S|-1)!(n-|S|)!·V(S) - Σ_{S∌i} |S|!(n-|S|-1)!·V(S)
                 = H_i - W,   H_i = Σ_{S∋i} c(|S|)·V(S),   W = Σ_S b(|S|)·V(S),

    with b(s) = s!(n-s-1)! (b(n) = 0) and c(s) = (s-1)!(n-s)! + b(s), that is c(0) = c(n) =
    (n-1)! and c(s) = n·(s-1)!(n-s-1)! between. Every H_i comes from one pass: halving the
    array of c(|S|)·V(S) by its top bit, the upper half sums to H of that bit's player, and
    the two halves added make the array of the bits left (2^n additions in all). W needs no
    pass of its own: the formula is efficient for every game (Σφ_i = v(N) - v(∅) is an
    identity of the weights), so n·W = Σ_i H_i - n!·(V(N) - V(∅)) exactly.
    """
    n = len(roster)
    count = len(numbers)
    np = _numpy() if _INT64_FROM <= n <= _INT64_UP_TO else None  # the speed path, if it can
    if np is not None:
        try:
            numerators = np.fromiter(map(_NUMERATOR, numbers), np.int64, count)
            denominators = np.fromiter(map(_DENOMINATOR, numbers), np.int64, count)
        except OverflowError:  # a term beyond int64
            np = None
    if np is None:
        numerators = list(map(_NUMERATOR, numbers))
        denominators = list(map(_DENOMINATOR, numbers))
        distinct = set(denominators)
        denominator, smallest = math.lcm(*distinct), min(distinct)
    else:
        denominator, smallest = shapley_int64.common_denominator(np, denominators)
    room = shapley_int64.int64_room(numerators, smallest, denominator, n) if np else None
    several = smallest != denominator
    if room == "weighted":
        holding = shapley_int64.fold_weighted(np, numerators, denominators, several, denominator)
    elif room == "by size":
        holding = shapley_int64.fold_by_size(np, numerators, denominators, several, denominator)
    else:
        if np is not None:
            numerators, denominators = numerators.tolist(), denominators.tolist()
        holding = _fold_in_python(numerators, denominators, several, denominator)
    factorial = math.factorial(n)
    ends = (numbers[-1] - numbers[0]) * denominator
    without, remainder = divmod(sum(holding) - factorial * int(ends), n)
    assert remainder == 0, "the Shapley weights are efficient"
    scale = factorial * denominator
    values = {
        player: Fraction(h - without, scale) for player, h in zip(roster, holding, strict=True)
    }
    return values, numerators, denominators


def _fold_in_python(
    numerators: list[int], denominators: list[int], several: bool, denominator: int
) -> list[int]:
    """H_i for every bit i, in Python integers, from the terms of every v(S) by mask (over
    `denominator`, a multiple of each: `several` when they are not all equal to it)."""
    n = len(numerators).bit_length() - 1
    scaled: Iterable[int] = numerators
    if several:
        factor = {d: denominator // d for d in set(denominators)}
        scaled = map(mul, numerators, map(factor.__getitem__, denominators))
    block = list(map(mul, mask_weights(n), scaled))
    holding = [0] * n
    for i in reversed(range(n)):
        half = len(block) >> 1
        upper = block[half:]
        holding[i] = sum(upper)
        del block[half:]
        block = list(map(add, block, upper))
    return holding


def _numpy() -> Any:
    """numpy for the speed path (`accord.market.shapley_int64`), or None: the sums then run
    in Python integers (tests and the bench hide numpy by replacing this)."""
    return shapley_int64.numpy_or_none()


class CoalitionValues(Mapping[Coalition, Fraction]):
    """v(S) for every coalition S of `roster`, a read-only mapping keyed by frozenset, kept by
    bitmask (bit i for roster[i]) rather than as 2^n frozensets, and as the integer terms of
    each v(S) (`numerators[mask]` / `denominators[mask]`, in lowest terms) rather than as 2^n
    Fractions: ints are not tracked by the cyclic garbage collector, Fractions are. Iterates
    the coalitions in mask order (∅, {roster[0]}, {roster[1]}, {roster[0], roster[1]}, ...).

    Raises ValueError when the terms are not one per coalition."""

    __slots__ = ("_bits", "_roster", "_terms_of")

    def __init__(self, roster: Sequence[str], numerators: Any, denominators: Any) -> None:
        """`numerators` and `denominators`: lists of Python ints, or numpy int64 arrays
        (turned into lists on first read: the result of a computation need not pay for it
        unread). Not checked term by term: `shapley` makes them."""
        if not len(numerators) == len(denominators) == 1 << len(roster):
            raise ValueError(f"{len(roster)} players have {1 << len(roster)} coalitions")
        self._roster = tuple(roster)
        self._bits = {player: 1 << i for i, player in enumerate(self._roster)}
        self._terms_of: tuple[Any, Any] = (numerators, denominators)

    def _terms(self) -> tuple[list[int], list[int]]:
        # Replaced in one assignment, so a reader in another thread sees both as lists or
        # neither.
        numerators, denominators = self._terms_of
        if not isinstance(numerators, list):
            numerators, denominators = numerators.tolist(), denominators.tolist()
            self._terms_of = (numerators, denominators)
        return numerators, denominators

    def __getitem__(self, coalition: Coalition) -> Fraction:
        if not isinstance(coalition, frozenset):
            raise KeyError(coalition)
        mask = 0
        for player in coalition:
            bit = self._bits.get(player)
            if bit is None:
                raise KeyError(coalition)
            mask |= bit
        numerators, denominators = self._terms()
        return Fraction(numerators[mask], denominators[mask])

    def __iter__(self) -> Iterator[Coalition]:
        return iter(_coalitions(self._roster))

    def __len__(self) -> int:
        return len(self._terms_of[0])

    def items(self) -> ItemsView[Coalition, Fraction]:
        numbers = map(Fraction, *self._terms())
        return dict(zip(_coalitions(self._roster), numbers, strict=True)).items()

    def __repr__(self) -> str:
        return f"CoalitionValues({dict(self.items())!r})"


def _coalitions(roster: Sequence[str]) -> list[Coalition]:
    """Every coalition of `roster` in mask order."""
    coalitions: list[Coalition] = [frozenset()]
    for player in roster:
        single = frozenset((player,))
        coalitions += [coalition | single for coalition in coalitions]
    return coalitions


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
