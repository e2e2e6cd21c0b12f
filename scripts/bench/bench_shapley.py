"""shapley: exact Shapley values against shap's exact explainer; evaluations of a sampled run.

The game, for n players: a weighted sum plus pairwise synergies around a ring,
v(S) = (Σ_{i∈S} a_i + Σ_{i∈S, i+1∈S} b_i) / 7 with integer a_i, b_i drawn from a fixed seed:
cheap and not additive, with the closed form φ_i = a_i/7 + (b_{i-1} + b_i)/14. One Python
function `game(frozenset) -> Fraction` is evaluated, once per coalition, by both sides.

Exact, n = 8, 12, 16 (side by side in each repetition, rotating the order):

- `accord.market.shapley.shapley(players, game)`: 2^n evaluations, exact `Fraction` values (its sums
  run in numpy int64 arrays at n = 10 to 16 when numpy is installed and they fit, as here: shap
  needs numpy);
- the same with numpy hidden from it (`accord.market.shapley._numpy` patched to None): the sums in
  Python integers only, as on an install without numpy;
- v alone: the 2^n calls of the game on coalitions made beforehand, the collector paused, in
  the same rotation: the floor both sides share, and a CPU probe of the machine's speed;
- `shap.explainers.Exact` with an all-zeros background (`maskers.Independent`, one row) on the
  all-ones instance, so its values are the Shapley values of v(S) = f(1_S); the model turns each
  masked row into the coalition of its ones and returns `float(game(S))`.

Both results are checked against the closed form (accord: exactly; shap: to 1e-9). shap's
numba code is compiled by an untimed warm-up call first.

Sampled, n = 50: `shapley(..., exact_limit=16, half_width=1/100, seed=rep)` (antithetic
permutation pairs until every player's 95% half-width is at most 1% of v(N) - v(∅)); the
distinct evaluations of v it needed, its time, and how many players' values fall within their
stated half-width of the closed form.

Run alone: `.venv/bin/python scripts/bench/bench_shapley.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import gc
import random
import time
import warnings
from collections.abc import Callable
from fractions import Fraction
from itertools import compress
from typing import Any
from unittest import mock

from _common import TIMES, Goal, Measure, Section, progress, run_alone, side_by_side

from accord.market import shapley as shapley_module
from accord.market.shapley import shapley

GOAL_SPEEDUP = 2.0
GOAL_AGREEMENT = 1e-9
SAMPLED_PLAYERS = 50
SAMPLED_BOUND = Fraction(1, 100)
MAX_EVALUATIONS = 200_000

Game = Callable[[frozenset[str]], Fraction]


def ring_game(n: int, seed: int = 7) -> tuple[list[str], Game, dict[str, Fraction]]:
    """Players, the game and its exact Shapley values (closed form)."""
    rng = random.Random(seed)
    players = [f"p{i:02d}" for i in range(n)]
    base = {p: rng.randint(1, 100) for p in players}
    synergy = {p: rng.randint(0, 60) for p in players}
    successor = {p: players[(i + 1) % n] for i, p in enumerate(players)}

    def game(coalition: frozenset[str]) -> Fraction:
        total = 0
        for p in coalition:
            total += base[p]
            if successor[p] in coalition:
                total += synergy[p]
        return Fraction(total, 7)

    exact = {
        p: Fraction(base[p], 7) + Fraction(synergy[players[i - 1]] + synergy[p], 14)
        for i, p in enumerate(players)
    }
    return players, game, exact


def _shap() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import shap

    return shap


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    section = Section(
        key="shapley",
        title=(
            "shapley: exact n = 8, 12, 16 against shap's exact explainer; sampled n = "
            f"{SAMPLED_PLAYERS} to a 1% bound"
        ),
        method=__doc__ or "",
    )
    failures: list[str] = []
    python_only_ratios: dict[int, float] = {}
    agreement.clear()
    try:
        shap = _shap()
    except ImportError as exc:
        shap = None
        failures.append(f"shap is not installed ({exc}); install the dev extra")
    import numpy as np

    for n in (8, 12, 16):
        players, game, exact = ring_game(n)
        ours = Measure(f"accord shapley, exact, n = {n} ({2**n:,} coalitions)", "ms")
        section.measures.append(ours)
        variants: list[tuple[Measure, Callable[[], float]]] = []

        def run_ours(
            players: list[str] = players, game: Game = game, exact: dict[str, Fraction] = exact
        ) -> float:
            start = time.perf_counter()
            result = shapley(players, game)
            ms = (time.perf_counter() - start) * 1_000
            if result.values != exact:
                failures.append(
                    f"accord's exact values differ from the closed form at n={len(players)}"
                )
            return ms

        variants.append((ours, run_ours))
        python_only = Measure(
            f"accord shapley, exact, n = {n}, Python integers only (no numpy)",
            "ms",
            baseline=ours.name,
        )
        section.measures.append(python_only)

        def run_python_only(run_ours: Callable[[], float] = run_ours) -> float:
            with mock.patch.object(shapley_module, "_numpy", lambda: None):
                return run_ours()

        variants.append((python_only, run_python_only))
        game_alone = Measure(
            f"v alone, n = {n}: {2**n:,} calls on coalitions made beforehand (floor, CPU probe)",
            "ms",
        )
        section.measures.append(game_alone)
        made = [frozenset(compress(players, map(int, f"{m:0{n}b}"[::-1]))) for m in range(2**n)]

        def run_game_alone(made: list[frozenset[str]] = made, game: Game = game) -> float:
            collecting = gc.isenabled()
            gc.disable()
            try:
                start = time.perf_counter()
                list(map(game, made))
                return (time.perf_counter() - start) * 1_000
            finally:
                if collecting:
                    gc.enable()

        variants.append((game_alone, run_game_alone))
        if shap is not None:
            theirs = Measure(f"shap.explainers.Exact, n = {n}", "ms", baseline=ours.name)
            section.measures.append(theirs)
            explainer = _explainer(shap, np, players, game)
            explainer(np.ones((1, n)), 2**n + 1)  # warm-up: numba compiles on first use

            def run_shap(
                players: list[str] = players,
                exact: dict[str, Fraction] = exact,
                explainer: Callable[[Any, int], Any] = explainer,
            ) -> float:
                n = len(players)
                start = time.perf_counter()
                values = explainer(np.ones((1, n)), 2**n + 1)
                ms = (time.perf_counter() - start) * 1_000
                worst = max(
                    abs(float(values[0][i]) - float(exact[p])) for i, p in enumerate(players)
                )
                agreement[n] = max(agreement.get(n, 0.0), worst)
                return ms

            variants.append((theirs, run_shap))
        side_by_side(reps, variants, label=f"shapley n={n}: ")
        if shap is not None:
            python_only_ratios[n] = theirs.median / python_only.median
            speedup = theirs.median / ours.median
            section.goals.append(
                Goal(
                    f"exact n = {n}: shap's time / accord's (same game, same run)",
                    GOAL_SPEEDUP,
                    speedup,
                    TIMES,
                )
            )
            section.goals.append(
                Goal(
                    f"exact n = {n}: largest |shap - closed form| (accord is exact)",
                    GOAL_AGREEMENT,
                    agreement[n],
                    "",
                    higher_is_better=False,
                )
            )

    evaluations, within = _sampled(section, reps)
    section.goals.append(
        Goal(
            f"sampled n = {SAMPLED_PLAYERS}: evaluations of v for a 1% bound (seeds 0..{reps - 1})",
            MAX_EVALUATIONS,
            evaluations,
            "evals",
            higher_is_better=False,
        )
    )
    section.notes += [
        "Both exact sides call the same Python game once per coalition, so the ratio is the "
        "cost of everything around those calls: accord makes each coalition as the union of "
        "two smaller ones, in blocks of 256, and sums in integers over a common denominator "
        "(one pass for all players); shap masks numpy rows, calls the model in batches, and its "
        "model adapter turns each row back into a coalition.",
        "shap's time / accord's with Python integers only: "
        + ", ".join(f"n = {n}: {ratio:.2f}{TIMES}" for n, ratio in python_only_ratios.items())
        + " (no goal: the goal is the default, with numpy there as it is wherever shap is).",
        f"Sampled n = {SAMPLED_PLAYERS}: {within} of the values fell within their stated "
        "half-width of the closed form (nominal coverage 95%). The goal is the default "
        f"max_evaluations ({MAX_EVALUATIONS:,}): a FAIL means the 1% bound was not reached.",
    ]
    if failures:
        section.error = failures[0]
    section.seconds = time.perf_counter() - started
    return section


agreement: dict[int, float] = {}


def _explainer(shap: Any, np: Any, players: list[str], game: Game) -> Callable[[Any, int], Any]:
    n = len(players)

    def model(rows: Any) -> Any:
        masks = np.asarray(rows).astype(bool).tolist()
        return np.array([float(game(frozenset(compress(players, row)))) for row in masks])

    masker = shap.maskers.Independent(np.zeros((1, n)), max_samples=1)
    explainer = shap.explainers.Exact(model, masker)

    def explain(instance: Any, max_evals: int) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return explainer(instance, max_evals=max_evals).values

    return explain


def _sampled(section: Section, reps: int) -> tuple[float, str]:
    players, game, exact = ring_game(SAMPLED_PLAYERS)
    evaluations = Measure(
        f"sampled n = {SAMPLED_PLAYERS}: distinct evaluations of v for a 1% bound", "evals"
    )
    seconds = Measure(f"sampled n = {SAMPLED_PLAYERS}: time to a 1% bound", "s")
    pairs = Measure(f"sampled n = {SAMPLED_PLAYERS}: antithetic pairs drawn", "pairs")
    section.measures += [evaluations, seconds, pairs]
    covered = total = 0
    for rep in range(reps):
        start = time.perf_counter()
        result = shapley(
            players,
            game,
            exact_limit=16,
            seed=rep,
            half_width=SAMPLED_BOUND,
            max_evaluations=MAX_EVALUATIONS,
        )
        seconds.samples.append(time.perf_counter() - start)
        evaluations.samples.append(
            result.evaluations if result.converged else float(MAX_EVALUATIONS + 1)
        )
        pairs.samples.append(result.samples / 2)
        assert result.half_widths is not None
        covered += sum(abs(result.values[p] - exact[p]) <= result.half_widths[p] for p in exact)
        total += len(exact)
        progress(f"shapley sampled: seed {rep}: {result.evaluations:,} evaluations")
    return evaluations.median, f"{covered} of {total}"


def main() -> None:
    run_alone(run, "Shapley values: exact against shap, and sampled evaluations.")


if __name__ == "__main__":
    main()
