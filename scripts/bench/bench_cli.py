"""The command line's start-up: `accord --help`, `accord --version` and a read command.

Setup: a fresh tmp `ACCORD_HOME` and an `ACCORD_DEVNET_PORT` from `find_free_port()`; the
venv's `accord` starts the devnet (`accord devnet up`), posts one single-part task
(`accord task post --title … --capability arithmetic --input … --expect …`, its budget
escrowed), and stops the devnet again (`accord devnet down`): a small home holding one
task, read without a chain from then on.

Measures: each repetition runs, side by side in a rotating order, `python -c pass` (the
interpreter alone: the baseline), `accord --help`, `accord --version` and
`accord task show TASK`, each as a subprocess of the venv's Python (`python -m accord.api.cli …`,
the module the `accord` script runs), timed from spawn to exit. Output goes to a pipe, as in a
script. The figures are wall-clock medians in seconds; `vs` is against `python -c pass`.

Run alone: `.venv/bin/python scripts/bench/bench_cli.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import REPO_ROOT, Goal, Measure, Section, progress, run_alone, side_by_side, temp_root

from accord.ledger.devnet import Devnet, find_free_port

GOAL_HELP_S = 0.3
GOAL_VERSION_S = 0.5
GOAL_TASK_SHOW_S = 1.0
COMMAND_TIMEOUT_S = 120.0
FIGURES = '{"kind": "figures", "figures": ["120.50", "33.20"], "operation": "sum"}'
EXPECTED = '{"value": "153.70"}'
"""The sum's output (an `expect` check: a service with no judge refuses a task without one)."""


class Home:
    """A tmp ACCORD_HOME and the environment every `accord` run of this bench gets."""

    def __init__(self, root: Path) -> None:
        self.path = root / "home"
        self.port = find_free_port()
        self.env = {
            **os.environ,
            "ACCORD_HOME": str(self.path),
            "ACCORD_DEVNET_PORT": str(self.port),
            "PYTHONPATH": str(REPO_ROOT),
        }
        for name in ("ACCORD_RPC_URL", "ACCORD_DB_URL", "ACCORD_REQUESTER_ETH_KEY"):
            self.env.pop(name, None)

    def accord(self, *args: str) -> str:
        """Run `accord ARGS`; its stdout. Raises RuntimeError naming the command when it
        exits non-zero."""
        result = subprocess.run(
            [sys.executable, "-m", "accord.api.cli", *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"accord {' '.join(args)} exited {result.returncode}: "
                f"{result.stderr.strip()[-300:]}"
            )
        return result.stdout

    def post_one_task(self) -> str:
        """Start the devnet, post one task, stop the devnet; the task's id."""
        self.accord("devnet", "up")
        try:
            posted = self.accord(
                "task",
                "post",
                "--title",
                "Add these",
                "--budget",
                "0.5eth",
                "--capability",
                "arithmetic",
                "--input",
                FIGURES,
                "--expect",
                EXPECTED,
                "--json",
            )
        finally:
            self.accord("devnet", "down")
        return str(json.loads(posted)["task_id"])

    def timed(self, argv: list[str]) -> Callable[[], float]:
        """A run of `argv` as a subprocess, returning its wall time in seconds. Raises
        RuntimeError when it exits non-zero."""

        def run() -> float:
            started = time.perf_counter()
            result = subprocess.run(
                argv, env=self.env, cwd=REPO_ROOT, capture_output=True, timeout=COMMAND_TIMEOUT_S
            )
            seconds = time.perf_counter() - started
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[1:])} exited {result.returncode}")
            return seconds

        return run


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    section = Section(
        key="cli",
        title="cli: start-up of `accord --help`, `--version` and `task show`",
        method=__doc__ or "",
    )
    root = Path(tempfile.mkdtemp(prefix="accord-bench-cli-", dir=temp_root()))
    home = Home(root)
    try:
        progress("setup: devnet up, one task posted, devnet down")
        task_id = home.post_one_task()
        python = sys.executable
        baseline = Measure("python -c pass (interpreter start)", "s")
        helped = Measure("accord --help", "s", baseline=baseline.name)
        version = Measure("accord --version", "s", baseline=baseline.name)
        shown = Measure("accord task show TASK", "s", baseline=baseline.name)
        section.measures += [baseline, helped, version, shown]
        cli = [python, "-m", "accord.api.cli"]
        side_by_side(
            reps + (0 if quick else 2),
            [
                (baseline, home.timed([python, "-c", "pass"])),
                (helped, home.timed([*cli, "--help"])),
                (version, home.timed([*cli, "--version"])),
                (shown, home.timed([*cli, "task", "show", task_id])),
            ],
            label="cli: ",
        )
        section.goals += [
            Goal("accord --help", GOAL_HELP_S, helped.median, "s", higher_is_better=False),
            Goal("accord --version", GOAL_VERSION_S, version.median, "s", higher_is_better=False),
            Goal(
                "accord task show TASK (a read)",
                GOAL_TASK_SHOW_S,
                shown.median,
                "s",
                higher_is_better=False,
            ),
        ]
        section.notes.append(
            "Find what a command imports, and what each import costs: "
            "`python -X importtime -m accord.api.cli task show TASK 2> imports.txt`."
        )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        section.error = str(exc)
    finally:
        Devnet(home.path / "devnet", home.port).down()
        shutil.rmtree(root, ignore_errors=True)
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "Start-up time of the accord command line.")
