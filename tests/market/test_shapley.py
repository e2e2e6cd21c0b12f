"""Shapley values (exact and sampled) and the largest-remainder split of wei."""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from fractions import Fraction
from itertools import compress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.market import shapley as shapley_module
from accord.market import shapley_int64
from accord.market.errors import MarketError, SettlementError
from accord.market.money import Wei
from accord.market.shapley import CoalitionValues, ShapleyResult, shapley, split_wei

Game = Callable[[frozenset[str]], Fraction]


def names(n: int) -> list[str]:
    return [f"p{i:02d}" for i in range(n)]


def table_game(players: list[str], table: list[Fraction]) -> Game:
    """v(S) = table[mask of S] (bit i for players[i])."""
    bit = {p: 1 << i for i, p in enumerate(players)}
    return lambda s: table[sum(bit[p] for p in s)]


# -- property tests (exact) ------------------------------------------------------------------

# Rationals k/d with |k| <= 100 and d <= 12, built from two integers: hypothesis's own
# st.fractions(max_denominator=12) draws the same kind of values 8 times slower, and drawing a
# game's table of up to 64 of them was nearly all of these tests' time.
fractions = st.builds(Fraction, st.integers(-100, 100), st.integers(1, 12))


@st.composite
def games(draw: st.DrawFn, min_players: int = 1) -> tuple[list[str], list[Fraction]]:
    n = draw(st.integers(min_players, 6))
    return names(n), draw(st.lists(fractions, min_size=1 << n, max_size=1 << n))


@settings(max_examples=60, deadline=None)
@given(games())
def test_efficiency(game: tuple[list[str], list[Fraction]]) -> None:
    players, table = game
    result = shapley(players, table_game(players, table))
    assert sum(result.values.values()) == table[-1] - table[0]
    assert result.method == "exact" and result.half_width is None and result.seed is None
    assert result.evaluations == len(result.evaluated) == 1 << len(players)


@settings(max_examples=60, deadline=None)
@given(games(min_players=2), st.data())
def test_symmetry(game: tuple[list[str], list[Fraction]], data: st.DataObject) -> None:
    players, table = game
    i, j = data.draw(
        st.lists(st.sampled_from(range(len(players))), min_size=2, max_size=2, unique=True)
    )

    def swap(mask: int) -> int:
        bi, bj = (mask >> i) & 1, (mask >> j) & 1
        return mask & ~((1 << i) | (1 << j)) | (bi << j) | (bj << i)

    symmetric = [min(table[m], table[swap(m)]) for m in range(len(table))]
    result = shapley(players, table_game(players, symmetric))
    assert result.values[players[i]] == result.values[players[j]]


@settings(max_examples=60, deadline=None)
@given(games(), st.data())
def test_null_player(game: tuple[list[str], list[Fraction]], data: st.DataObject) -> None:
    players, table = game
    k = data.draw(st.sampled_from(range(len(players))))
    null = [table[m & ~(1 << k)] for m in range(len(table))]
    result = shapley(players, table_game(players, null))
    assert result.values[players[k]] == 0


@settings(max_examples=60, deadline=None)
@given(games(), st.data())
def test_additivity(game: tuple[list[str], list[Fraction]], data: st.DataObject) -> None:
    players, first = game
    second = data.draw(st.lists(fractions, min_size=len(first), max_size=len(first)))
    both = [a + b for a, b in zip(first, second, strict=True)]
    phi_v = shapley(players, table_game(players, first)).values
    phi_w = shapley(players, table_game(players, second)).values
    phi_sum = shapley(players, table_game(players, both)).values
    assert all(phi_sum[p] == phi_v[p] + phi_w[p] for p in players)


# -- textbook games --------------------------------------------------------------------------


def test_glove_game() -> None:
    # The glove game (Wikipedia, "Shapley value"): players 1 and 2 hold a right glove, player 3
    # a left one; a pair is worth 1. Published values: (1/6, 1/6, 2/3).
    def v(s: frozenset[str]) -> Fraction:
        return Fraction(int("3" in s and bool({"1", "2"} & s)))

    assert shapley(["1", "2", "3"], v).values == {
        "1": Fraction(1, 6),
        "2": Fraction(1, 6),
        "3": Fraction(2, 3),
    }


def test_weighted_majority_game() -> None:
    # The weighted voting game [51; 50, 49, 1] (Shapley-Shubik, the classic textbook example):
    # A is pivotal in 4 of the 6 orders, B and C in 1 each: (2/3, 1/6, 1/6).
    weight = {"A": 50, "B": 49, "C": 1}

    def v(s: frozenset[str]) -> Fraction:
        return Fraction(int(sum(weight[p] for p in s) >= 51))

    assert shapley(list(weight), v).values == {
        "A": Fraction(2, 3),
        "B": Fraction(1, 6),
        "C": Fraction(1, 6),
    }


def test_un_security_council() -> None:
    # UN Security Council (Shapley-Shubik power index, e.g. Straffin, "Game Theory and
    # Strategy"): a motion passes with 9 of 15 votes including all 5 permanent members.
    # Published values: permanent 421/2145 ≈ 0.1963, non-permanent 4/2145 ≈ 0.00186.
    permanent = [f"P{i}" for i in range(5)]
    others = [f"E{i}" for i in range(10)]

    def v(s: frozenset[str]) -> Fraction:
        return Fraction(int(len(s) >= 9 and all(p in s for p in permanent)))

    values = shapley(permanent + others, v).values
    assert {values[p] for p in permanent} == {Fraction(421, 2145)}
    assert {values[p] for p in others} == {Fraction(4, 2145)}


def test_airport_game() -> None:
    # The airport game (Littlechild & Owen 1973): planes need runways costing 2, 4, 5, 9;
    # v(S) = the largest cost in S. The Shapley value splits each runway segment equally
    # among the planes that use it: 2/4, +2/3, +1/2, +4/1 → (1/2, 7/6, 5/3, 17/3).
    cost = {"a": 2, "b": 4, "c": 5, "d": 9}

    def v(s: frozenset[str]) -> Fraction:
        return Fraction(max((cost[p] for p in s), default=0))

    assert shapley(list(cost), v).values == {
        "a": Fraction(1, 2),
        "b": Fraction(7, 6),
        "c": Fraction(5, 3),
        "d": Fraction(17, 3),
    }


def test_owner_and_workers_game() -> None:
    # The business game (Wikipedia, "Shapley value", Examples): an owner o and workers w1,
    # w2; a coalition with the owner and m workers makes m·p (p = 1), nothing without the
    # owner. Published values: owner m·p/2 = 1, each worker p/2 = 1/2.
    def v(s: frozenset[str]) -> Fraction:
        return Fraction(len(s - {"o"})) if "o" in s else Fraction(0)

    assert shapley(["o", "w1", "w2"], v).values == {
        "o": Fraction(1),
        "w1": Fraction(1, 2),
        "w2": Fraction(1, 2),
    }


def test_exact_accepts_int_values_and_memoises_each_coalition_once() -> None:
    calls: list[frozenset[str]] = []

    def v(s: frozenset[str]) -> Fraction:
        calls.append(s)
        return len(s) ** 2  # type: ignore[return-value]  # an int is accepted

    result = shapley(names(5), v)
    assert len(calls) == len(set(calls)) == 32
    assert result.values == dict.fromkeys(names(5), Fraction(5))
    assert result.evaluated == {s: Fraction(len(s) ** 2) for s in calls}


def test_sixteen_players_exactly() -> None:
    players = names(16)
    result = shapley(players, lambda s: Fraction(len(s) * (len(s) - 1), 7))
    assert result.method == "exact" and result.evaluations == 65_536
    assert set(result.values.values()) == {Fraction(15, 7)}


def textbook_shapley(players: list[str], v: Game) -> dict[str, Fraction]:
    """φ_i = Σ_{S ⊆ N - {i}} |S|!(n-|S|-1)!/n! · (v(S + i) - v(S)), term by term in
    Fractions: slow, and obviously the definition."""
    n = len(players)
    values = {}
    for i, player in enumerate(players):
        others = players[:i] + players[i + 1 :]
        total = Fraction(0)
        for mask in range(1 << (n - 1)):
            s = frozenset(p for k, p in enumerate(others) if mask >> k & 1)
            weight = Fraction(math.factorial(len(s)) * math.factorial(n - len(s) - 1))
            total += weight * (Fraction(v(s | {player})) - Fraction(v(s)))
        values[player] = total / math.factorial(n)
    return values


def random_table(rng: random.Random, n: int) -> list[Fraction | int]:
    """2^n values: ints (some beyond int64), small and huge Fractions, sevenths."""
    table: list[Fraction | int] = []
    for _ in range(1 << n):
        kind = rng.randrange(4)
        if kind == 0:
            table.append(rng.randint(-(10**30), 10**30))
        elif kind == 1:
            table.append(Fraction(rng.randint(-1000, 1000), rng.randint(1, 60)))
        elif kind == 2:
            table.append(Fraction(rng.randint(-(10**40), 10**40), rng.randint(1, 10**25)))
        else:
            table.append(Fraction(rng.randint(-5, 5), 7))
    return table


@pytest.fixture(params=["numpy", "python"])
def sums_in(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the int64 sums (numpy installed) and with Python integers only."""
    if request.param == "python":
        monkeypatch.setattr(shapley_module, "_numpy", lambda: None)
    else:
        pytest.importorskip("numpy")
    return str(request.param)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 11])
def test_exact_is_the_textbook_sum_to_the_last_digit(n: int, sums_in: str) -> None:
    # Mixed denominators, ints among the Fractions, huge and negative values: the integer sums
    # (blocks of 2^8 coalitions past 8 players) give the definition's values exactly.
    rng = random.Random(n)
    players = [f"agent-{rng.randrange(10**6)}-{i}" for i in range(n)]
    v = table_game(players, random_table(rng, n))  # type: ignore[arg-type]  # ints are accepted
    result = shapley(players, v)
    assert result.values == textbook_shapley(players, v)
    assert list(result.values) == players


@pytest.mark.parametrize("n", [10, 11, 12])
@pytest.mark.parametrize("largest", [1, 7, 10**4, 10**12, 2**50, 2**62, 2**63, 10**30])
def test_exact_sums_at_the_edge_of_int64(n: int, largest: int, sums_in: str) -> None:
    # Values near where the int64 sums stop being safe (and past it): the same exact values
    # as the definition, whichever sums ran.
    rng = random.Random(largest + n)
    players = names(n)
    table = [
        Fraction(rng.choice([-largest, largest, rng.randint(-largest, largest)]), d)
        for d in (rng.choice([1, 3, 7, 21]) for _ in range(1 << n))
    ]
    v = table_game(players, table)
    result = shapley(players, v)
    assert result.values == textbook_shapley(players, v)


def test_exact_sums_take_int64_when_they_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    calls: list[int] = []
    fold = shapley_int64.fold_weighted

    def counted(*args: object) -> list[int]:
        calls.append(1)
        return fold(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(shapley_int64, "fold_weighted", counted)
    players = names(12)
    table = [Fraction(mask % 97 - 40, 1 + mask % 3) for mask in range(1 << 12)]
    assert shapley(players, table_game(players, table)).values == textbook_shapley(
        players, table_game(players, table)
    )
    assert calls == [1]
    huge = [x * 10**20 for x in table]
    shapley(players, table_game(players, huge))
    assert calls == [1]  # past int64: Python integers


@pytest.mark.parametrize(
    ("largest", "fold"),
    [(10**6, "weighted"), (2_929_101_905, "weighted"), (2_929_101_906, "by size")],
)
def test_exact_sums_at_16_players_weigh_by_the_reduced_weights(
    largest: int, fold: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 16 players the weights c(s) reach 1.4·10^12, but divided by their gcd at most 48,048:
    # values up to 2,929,101,905 still sum weighted in int64 (that times 48,048·2^16 is just
    # under 2^63), one more by coalition size. Either way, the same values as the Python
    # integers give.
    np = pytest.importorskip("numpy")
    calls: list[str] = []
    for name, label in (("fold_weighted", "weighted"), ("fold_by_size", "by size")):
        original = getattr(shapley_int64, name)

        def counted(*args: object, original: Any = original, label: str = label) -> list[int]:
            calls.append(label)
            return original(*args)  # type: ignore[no-any-return]

        monkeypatch.setattr(shapley_int64, name, counted)
    rng = np.random.default_rng(largest)
    players = names(16)
    table = [Fraction(int(x)) for x in rng.integers(-largest, largest, 1 << 16, endpoint=True)]
    table[-1] = Fraction(largest)
    game = table_game(players, table)
    in_int64 = shapley(players, game).values
    assert calls == [fold]
    monkeypatch.setattr(shapley_module, "_numpy", lambda: None)
    assert shapley(players, game).values == in_int64
    assert calls == [fold]
    assert sum(in_int64.values()) == table[-1] - table[0]


def test_exact_sums_by_size_when_only_they_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    # 14 players, values up to 10^12 in thirds and sevenths: the weighted terms would leave
    # int64 even with the weights divided by their gcd, the sums by coalition size do not.
    # Same values as the Python integers give.
    pytest.importorskip("numpy")
    calls: list[str] = []
    by_size = shapley_int64.fold_by_size

    def counted(*args: object) -> list[int]:
        calls.append("by size")
        return by_size(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(shapley_int64, "fold_by_size", counted)
    rng = random.Random(14)
    players = names(14)
    table = [Fraction(rng.randint(-(10**12), 10**12), rng.choice([1, 3, 7])) for _ in range(2**14)]
    game = table_game(players, table)
    in_int64 = shapley(players, game).values
    assert calls == ["by size"]
    monkeypatch.setattr(shapley_module, "_numpy", lambda: None)
    assert shapley(players, game).values == in_int64
    assert calls == ["by size"]
    assert sum(in_int64.values()) == table[-1] - table[0]


def test_exact_evaluated_maps_every_coalition_to_its_value(sums_in: str) -> None:
    # Kept as the integer terms of each v(S) (numpy arrays or lists, by which sums ran), read
    # back as Fractions of Python ints.
    players = names(10)
    table = [Fraction(mask * 3 - 700, 1 + mask % 5) for mask in range(1 << 10)]
    result = shapley(players, table_game(players, table))
    evaluated = result.evaluated
    everything = {
        frozenset(p for i, p in enumerate(players) if mask >> i & 1): table[mask]
        for mask in range(1 << 10)
    }
    assert len(evaluated) == result.evaluations == 1 << 10
    assert evaluated == everything and everything == evaluated
    assert dict(evaluated.items()) == everything and set(evaluated) == set(everything)
    assert evaluated[frozenset({"p03", "p07"})] == table[(1 << 3) | (1 << 7)]
    for value in [evaluated[frozenset({"p01"})], *dict(evaluated.items()).values()]:
        assert type(value) is Fraction
        assert type(value.numerator) is int and type(value.denominator) is int
    assert frozenset({"p03", "nobody"}) not in evaluated
    assert evaluated.get(frozenset({"nobody"})) is None
    with pytest.raises(KeyError):
        evaluated[frozenset({"nobody"})]


def test_coalition_values_need_one_value_per_coalition() -> None:
    with pytest.raises(ValueError, match="3 players have 8 coalitions"):
        CoalitionValues(names(3), [0] * 8, [1] * 7)


@pytest.mark.parametrize("denominators", [[6, 4, 10], [1, 7], [5]])
def test_exact_sums_over_any_common_denominator(denominators: list[int], sums_in: str) -> None:
    # The largest denominator a multiple of the rest, or not (then their lcm): the same exact
    # values as the definition.
    rng = random.Random(sum(denominators))
    players = names(11)
    table = [Fraction(rng.randint(-999, 999), rng.choice(denominators)) for _ in range(1 << 11)]
    v = table_game(players, table)
    assert shapley(players, v).values == textbook_shapley(players, v)


@pytest.mark.parametrize(
    "players",
    [[], ["a", "a"], ["a", 1]],
)
def test_bad_players_are_refused(players: list[str]) -> None:
    with pytest.raises(SettlementError):
        shapley(players, lambda s: Fraction(0))


def test_a_float_value_is_refused() -> None:
    with pytest.raises(SettlementError, match="int or a Fraction"):
        shapley(["a", "b"], lambda s: 0.5)  # type: ignore[arg-type,return-value]


def test_sampling_needs_a_seed_and_a_budget() -> None:
    with pytest.raises(SettlementError, match="seed"):
        shapley(names(3), lambda s: Fraction(len(s)), exact_limit=2)
    with pytest.raises(SettlementError, match="max_evaluations"):
        shapley(names(10), lambda s: Fraction(len(s)), exact_limit=2, seed=1, max_evaluations=20)
    assert issubclass(SettlementError, MarketError)


# -- sampled values within their stated bound ------------------------------------------------


def unanimity_game(players: list[str], rng: random.Random) -> tuple[Game, dict[str, Fraction]]:
    """A weighted sum plus unanimity games: v(S) = Σ_{i∈S} a_i + Σ_T c_T·[T ⊆ S].

    Closed form (Harsanyi dividends): φ_i = a_i + Σ_{T∋i} c_T / |T|.
    """
    base = {p: Fraction(rng.randint(0, 20)) for p in players}
    blocs = [
        (frozenset(rng.sample(players, rng.randint(2, 6))), Fraction(rng.randint(5, 60)))
        for _ in range(12)
    ]

    def v(s: frozenset[str]) -> Fraction:
        return sum((base[p] for p in s), Fraction(0)) + sum(
            (c for t, c in blocs if t <= s), Fraction(0)
        )

    phi = dict(base)
    for t, c in blocs:
        for p in t:
            phi[p] += c / len(t)
    return v, phi


def majority_game(players: list[str], quota: int) -> tuple[Game, dict[str, Fraction]]:
    """A symmetric majority game: worth 100 with at least `quota` members; φ_i = 100/n."""
    return (
        lambda s: Fraction(100 * (len(s) >= quota)),
        dict.fromkeys(players, Fraction(100, len(players))),
    )


def check_sampled(result: ShapleyResult, exact: dict[str, Fraction]) -> tuple[int, int]:
    assert result.method == "sampled" and result.half_widths is not None
    assert result.half_width == max(result.half_widths.values())
    covered = sum(abs(result.values[p] - exact[p]) <= result.half_widths[p] for p in exact)
    return covered, len(exact)


def test_sampled_values_are_within_their_stated_bound() -> None:
    # 12 games of 20 to 30 players, each sampled with its own fixed seed: nominally 95% of the
    # per-player intervals cover the exact value; ask for at least 90% over the ~600 intervals
    # (a binomial 95%·600 = 570 ± 5.3 — 540 is over 5 standard deviations away).
    rng = random.Random(2026)
    covered = total = 0
    for case in range(12):
        players = names(rng.randint(20, 30))
        if case % 3 == 2:
            v, exact = majority_game(players, len(players) // 2 + 1)
            bound = Fraction(1, 10)
        else:
            v, exact = unanimity_game(players, rng)
            bound = Fraction(1, 100)
        result = shapley(players, v, seed=1000 + case, half_width=bound)
        assert result.converged and result.seed == 1000 + case
        grand, empty = v(frozenset(players)), v(frozenset())
        assert result.half_width is not None and result.half_width <= bound * (grand - empty)
        assert sum(result.values.values()) == grand - empty  # efficiency holds exactly
        hit, count = check_sampled(result, exact)
        covered += hit
        total += count
    assert covered >= 0.90 * total, f"{covered}/{total} intervals cover the exact value"


def test_additive_game_is_sampled_exactly() -> None:
    players = names(25)
    weight = {p: Fraction(i + 1, 3) for i, p in enumerate(players)}
    result = shapley(players, lambda s: sum((weight[p] for p in s), Fraction(0)), seed=5)
    assert result.values == weight and result.half_width == 0
    assert result.samples == 64  # MIN_PAIRS antithetic pairs


def test_sampling_is_reproducible_from_its_seed_and_its_log() -> None:
    players = names(22)
    v, _ = unanimity_game(players, random.Random(3))
    first = shapley(players, v, seed=77, half_width=Fraction(2, 100))
    again = shapley(players, first.evaluated.__getitem__, seed=77, half_width=Fraction(2, 100))
    assert again == first
    other = shapley(players, v, seed=78, half_width=Fraction(2, 100))
    assert other.values != first.values


def test_sampling_stops_at_max_evaluations() -> None:
    players = names(30)
    v, _ = majority_game(players, 16)
    result = shapley(players, v, seed=1, half_width=Fraction(1, 10**6), max_evaluations=5_000)
    assert not result.converged and result.evaluations <= 5_000


# -- agreement with shap ---------------------------------------------------------------------


def test_agreement_with_shap_exact_explainer() -> None:
    np = pytest.importorskip("numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shap = pytest.importorskip("shap")
    rng = random.Random(11)
    for n in range(4, 11):
        players = names(n)
        table = [Fraction(rng.randint(-50, 200), rng.randint(1, 9)) for _ in range(1 << n)]
        table[0] = Fraction(0)
        v = table_game(players, table)

        def model(x: object, v: Game = v, players: list[str] = players) -> object:
            rows = np.asarray(x).astype(bool).tolist()
            return np.array([float(v(frozenset(compress(players, row)))) for row in rows])

        masker = shap.maskers.Independent(np.zeros((1, n)), max_samples=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            explained = shap.explainers.Exact(model, masker)(np.ones((1, n)), max_evals=2**n + 1)
        ours = shapley(players, v).values
        for i, p in enumerate(players):
            assert abs(float(explained.values[0][i]) - float(ours[p])) <= 1e-9, (n, p)


# -- split_wei -------------------------------------------------------------------------------

player_ids = st.text("abcdefgh", min_size=1, max_size=4)
share_maps = st.dictionaries(
    player_ids,
    st.builds(Fraction, st.integers(-10_000, 10_000), st.integers(1, 1000)),  # see `fractions`
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**30), share_maps)
def test_split_sums_exactly(amount: int, shares: dict[str, Fraction]) -> None:
    parts = split_wei(Wei(amount), shares)
    assert sum(parts.values()) == amount
    assert list(parts) == list(shares)
    assert all(isinstance(x, int) and x >= 0 for x in parts.values())
    positive = {p: s for p, s in shares.items() if s > 0}
    if positive:
        total = sum(positive.values())
        for p, s in shares.items():
            quota = amount * max(s, Fraction(0)) / total
            assert quota - 1 < parts[p] < quota + 1
            if s <= 0:
                assert parts[p] == 0


def test_negative_shares_get_nothing() -> None:
    assert split_wei(Wei(100), {"a": Fraction(-5), "b": Fraction(1), "c": Fraction(3)}) == {
        "a": 0,
        "b": 25,
        "c": 75,
    }


def test_all_shares_non_positive_split_equally() -> None:
    assert split_wei(Wei(10), {"a": Fraction(-1), "b": Fraction(0), "c": Fraction(-3)}) == {
        "a": 4,
        "b": 3,
        "c": 3,
    }


def test_tie_break_is_larger_remainder_then_player_id() -> None:
    # 10 wei in thirds: quotas 3⅓ each; the one wei left goes to the smallest id.
    thirds = {"c": Fraction(1), "a": Fraction(1), "b": Fraction(1)}
    assert split_wei(Wei(10), thirds) == {"c": 3, "a": 4, "b": 3}
    # 11 wei as 1:2:2 → quotas 2.2, 4.4, 4.4: floors 2, 4, 4; the one wei left goes to a 0.4
    # remainder, of y and z the smaller id.
    assert split_wei(Wei(11), {"x": Fraction(1), "z": Fraction(2), "y": Fraction(2)}) == {
        "x": 2,
        "z": 4,
        "y": 5,
    }
    # 7 wei as 1:1:5 → quotas 1, 1, 5: nothing left over, nobody gets an extra wei.
    assert split_wei(Wei(7), {"b": Fraction(1), "a": Fraction(1), "c": Fraction(5)}) == {
        "b": 1,
        "a": 1,
        "c": 5,
    }
    # The same inputs in any order give the same split.
    assert split_wei(Wei(10), dict(reversed(thirds.items()))) == split_wei(Wei(10), thirds)


def test_single_player_gets_everything() -> None:
    assert split_wei(Wei(10**30 + 7), {"solo": Fraction(-2)}) == {"solo": 10**30 + 7}
    assert split_wei(Wei(0), {"solo": Fraction(1)}) == {"solo": 0}


@pytest.mark.parametrize(
    ("amount", "shares"),
    [(-1, {"a": Fraction(1)}), (5, {}), (1.5, {"a": Fraction(1)}), (5, {"a": 0.5})],
)
def test_split_refuses_bad_input(amount: int, shares: dict[str, Fraction]) -> None:
    with pytest.raises(SettlementError):
        split_wei(Wei(amount), shares)


def test_closed_forms_of_the_sampled_games() -> None:
    # The closed forms the sampled test relies on, checked exactly on 8 to 12 players.
    rng = random.Random(9)
    for n in (8, 10, 12):
        players = names(n)
        v, phi = unanimity_game(players, rng)
        assert shapley(players, v).values == phi
        v, phi = majority_game(players, n // 2 + 1)
        assert shapley(players, v).values == phi


@pytest.mark.parametrize("n", [10, 12, 14])
@pytest.mark.parametrize("several", [False, True])
def test_the_int64_folds_equal_the_python_reference_fold(n: int, several: bool) -> None:
    """The speed path (accord/market/shapley_int64.py) against the readable one it stands in
    for (`shapley._fold_in_python`), on the same terms: the same H_i, to the last digit."""
    np = pytest.importorskip("numpy")
    rng = random.Random(n * 2 + several)
    numerators = [rng.randint(-(10**6), 10**6) for _ in range(1 << n)]
    denominators = [rng.choice([1, 3, 7]) if several else 1 for _ in range(1 << n)]
    denominator = math.lcm(*set(denominators))
    reference = shapley_module._fold_in_python(
        numerators, denominators, denominator != min(denominators), denominator
    )
    arrays = (np.array(numerators, dtype=np.int64), np.array(denominators, dtype=np.int64))
    assert shapley_int64.common_denominator(np, arrays[1]) == (denominator, min(denominators))
    assert shapley_int64.int64_room(arrays[0], min(denominators), denominator, n) == "weighted"
    for fold in (shapley_int64.fold_weighted, shapley_int64.fold_by_size):
        assert fold(np, *arrays, denominator != min(denominators), denominator) == reference
