"""Run every accord benchmark in one process, print the tables and write BENCHMARKS.md.

    scripts/with_postgres.sh .venv/bin/python scripts/bench/run_all.py   # `make bench`
    .venv/bin/python scripts/bench/run_all.py            # without PostgreSQL: scale on SQLite
    .venv/bin/python scripts/bench/run_all.py --quick    # smaller sizes, 3 repetitions
    .venv/bin/python scripts/bench/run_all.py --only proofs,gas --output /tmp/B.md
    .venv/bin/python scripts/bench/run_all.py --only cli --update   # just cli's part of the report

Exit status 1 when a goal fails or a bench breaks (the report is written either way).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import bench_api
import bench_append
import bench_audit
import bench_box
import bench_checks
import bench_cli
import bench_gas
import bench_identity
import bench_load
import bench_market
import bench_proofs
import bench_scale
import bench_shapley
import bench_skills
import bench_team
import bench_tiles
import bench_verify
from _common import (
    REPO_ROOT,
    Section,
    console,
    goals_table,
    machine,
    number,
    parser,
    ratio_text,
    reps_of,
    show,
)

BENCHES: dict[str, tuple[str, Callable[[bool, int], Section]]] = {
    "append": ("append throughput", bench_append.run),
    "verify": ("verify throughput", bench_verify.run),
    "proofs": ("inclusion proofs", bench_proofs.run),
    "tiles": ("tiles: the log served as C2SP tlog-tiles", bench_tiles.run),
    "gas": ("anchoring gas", bench_gas.run),
    "identity": ("identity credentials and onboarding", bench_identity.run),
    "market": ("market: sealed-bid clearing and task posting", bench_market.run),
    "shapley": ("shapley: exact against shap, sampled evaluations", bench_shapley.run),
    "checks": ("checks: v(S) of a six-member team from its checks", bench_checks.run),
    "box": ("box: a boxed run of strangers' code against a bare interpreter", bench_box.run),
    "load": ("load: reads and a benign settlement while a hostile task settles", bench_load.run),
    "skills": (
        "skills: exam pass rate vs held-out real-part pass rate of the reference agent",
        bench_skills.run,
    ),
    "team": ("team conversations: five agents, three sub-tasks", bench_team.run),
    "audit": ("audit of the demo task and `make demo` wall time", bench_audit.run),
    "api": ("api: signed requests through uvicorn, two workers", bench_api.run),
    "cli": ("cli: start-up of accord --help, --version and task show", bench_cli.run),
    "scale": ("scale: reads, listing, commits and reindex to 10^6 events", bench_scale.run),
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _goal_rows(sections: Sequence[Section]) -> list[str]:
    rows = [
        "| bench | goal | target | measured (median) | result |",
        "| --- | --- | ---: | ---: | :---: |",
    ]
    for section in sections:
        if section.error is not None:
            rows.append(f"| {section.key} | bench failed: {_cell(section.error)} | | | **FAIL** |")
        for goal in section.goals:
            sign = "≥" if goal.higher_is_better else "≤"
            rows.append(
                f"| {section.key} | {_cell(goal.name)} | {sign} {number(goal.target)} {goal.unit} "
                f"| {number(goal.measured)} {goal.unit} | "
                f"{'PASS' if goal.passed else '**FAIL**'} |"
            )
    return rows


def _measure_rows(section: Section) -> list[str]:
    rows = [
        "| measurement | median | unit | min … max | n | vs baseline |",
        "| --- | ---: | --- | ---: | ---: | --- |",
    ]
    for m in section.measures:
        spread = f"{number(min(m.samples))} … {number(max(m.samples))}" if m.samples else "—"
        versus = f"{ratio_text(section.ratio(m))} {_cell(m.baseline)}" if m.baseline else ""
        rows.append(
            f"| {_cell(m.name)} | {number(m.median)} | {m.unit} | {spread} | "
            f"{len(m.samples)} | {versus} |"
        )
    return rows


def _method(section: Section) -> list[str]:
    """The bench's docstring, without its 'Run alone' line."""
    lines = [line for line in section.method.strip().splitlines() if "Run alone" not in line]
    return [line.removeprefix("    ") if line.startswith("    ") else line for line in lines]


def _section_block(section: Section) -> list[str]:
    out = [
        f"## {section.title}",
        "",
        *_method(section),
        "",
        *_measure_rows(section),
        "",
        *[f"- {note}" for note in section.notes],
        f"- Bench time: {section.seconds:.0f} s.",
        "",
    ]
    if section.error is not None:
        out += [f"**This bench failed:** {section.error}", ""]
    return out


def updated(report: str, sections: Sequence[Section], command: str) -> str:
    """`report` (a BENCHMARKS.md) with `sections` put in place of their earlier runs: each
    one's own part (from its `## KEY:` heading to the next heading) and its rows of the goals
    table, the goals' count redone; the rest, from the full run, left as it was. A section
    the report lacks is added at its end. Each updated part says when and by what it ran."""
    lines = report.rstrip("\n").split("\n")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    for section in sections:
        section.notes.append(f"Updated alone by `{command}` on {when}; other parts are older.")
        block = _section_block(section)
        start = next(
            (i for i, line in enumerate(lines) if line.startswith(f"## {section.key}:")), None
        )
        if start is None:
            lines += ["", *block]
        else:
            end = next(
                (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
            )
            lines[start:end] = block
        rows = _goal_rows([section])[2:]
        mine = [i for i, line in enumerate(lines) if line.startswith(f"| {section.key} | ")]
        if mine:
            lines[mine[0] : mine[-1] + 1] = rows
    goal_rows = [line for line in lines if line.endswith(("| PASS |", "| **FAIL** |"))]
    passed = sum(line.endswith("| PASS |") for line in goal_rows)
    lines = [
        f"## Goals: {passed} of {len(goal_rows)} pass" if line.startswith("## Goals: ") else line
        for line in lines
    ]
    return "\n".join(lines).rstrip() + "\n"


def markdown(
    sections: Sequence[Section],
    box: dict[str, str],
    *,
    quick: bool,
    reps: int,
    seconds: float,
    command: str,
) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    passed = sum(g.passed for s in sections for g in s.goals)
    total = sum(len(s.goals) for s in sections)
    broken = [s.key for s in sections if s.error is not None]
    out = [
        "# accord benchmarks",
        "",
        f"Generated by `{command}` on {when}"
        + (" (**quick run**: smaller sizes)" if quick else "")
        + f"; {reps} repetitions per measurement, full run time **{seconds / 60:.1f} min** "
        f"({seconds:.0f} s).",
        "",
        "Every bench runs its variants side by side: each repetition runs every variant once, in "
        "a rotating order, so the noise of this shared machine falls on all of them alike. Figures "
        "are **medians** over the repetitions (min … max beside them); ratios are against a "
        "baseline measured in the same run. Regenerate with `make bench` "
        "(or `.venv/bin/python scripts/bench/run_all.py [--quick]`); each bench also runs alone, "
        "e.g. `.venv/bin/python scripts/bench/bench_proofs.py --quick`.",
        "",
        "## Machine",
        "",
        "| | |",
        "| --- | --- |",
        *[f"| {key} | {_cell(value)} |" for key, value in box.items()],
        "",
        f"## Goals: {passed} of {total} pass"
        + (f"; broken: {', '.join(broken)}" if broken else ""),
        "",
        *_goal_rows(sections),
        "",
    ]
    for section in sections:
        out += _section_block(section)
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    args = parser("Run all accord benchmarks and write BENCHMARKS.md.")
    args.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHES)}")
    args.add_argument(
        "--output", type=Path, default=REPO_ROOT / "BENCHMARKS.md", help="report path"
    )
    args.add_argument(
        "--update",
        action="store_true",
        help="put the chosen benches' parts and goals into the existing report, leaving the rest",
    )
    options = args.parse_args()
    reps = reps_of(options)
    chosen = [name.strip() for name in options.only.split(",") if name.strip()] or list(BENCHES)
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        args.error(f"unknown bench {unknown}; choose from {list(BENCHES)}")

    started = time.perf_counter()
    box = machine()
    console.rule("accord benchmarks" + (" (quick)" if options.quick else ""))
    for key, value in box.items():
        console.print(f"[bold]{key}[/bold]: {value}")

    sections: list[Section] = []
    for name in chosen:
        title, run = BENCHES[name]
        console.rule(title)
        load_before = os.getloadavg()[0]
        try:
            section = run(options.quick, reps)
        except Exception as exc:  # report the failure, keep going with the other benches
            traceback.print_exc()
            section = Section(
                key=name, title=title, method="", error=f"{type(exc).__name__}: {exc}"
            )
        section.notes.append(
            f"Load average (1 min) on the machine: {load_before:.2f} before this bench, "
            f"{os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores; other work shares them)."
        )
        sections.append(section)
        show(section)

    seconds = time.perf_counter() - started
    argv = " ".join(["scripts/bench/run_all.py", *sys.argv[1:]])
    if options.update and options.output.exists():
        options.output.write_text(updated(options.output.read_text(), sections, argv))
    else:
        options.output.write_text(
            markdown(sections, box, quick=options.quick, reps=reps, seconds=seconds, command=argv)
        )
    console.rule("summary")
    console.print(goals_table(sections))
    console.print(
        f"Full run time: {seconds:.0f} s ({seconds / 60:.1f} min); wrote {options.output}"
    )
    ok = all(s.error is None for s in sections) and all(g.passed for s in sections for g in s.goals)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
