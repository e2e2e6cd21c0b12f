"""What every `accord` command prints, and where: one module for all of them.

- Data goes to stdout: lines and tables for a person, or, with `--json`, one JSON document.
- An error is one line on stderr (`error: …`), or, when the command was given `--json`, a JSON
  object on stdout: `{"error": message, "code": exit status}`.
- Exit status: 0 success, 1 a failure the message explains, 2 bad input. An expected failure
  of the domain exits by the status the service answers it with (`exit_code_of`), so the CLI
  and the API agree on whose fault it is.
- On a terminal the consoles wrap at its width; written to a file or a pipe they do not wrap at
  all, so a DID or a credential id is never split across lines.

Nothing here imports more than `typer` at import time (rich is loaded on the first print), so
building the command tree stays cheap.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from accord.ledger.devnet import DevnetInfo

UNWRAPPED_WIDTH = 100_000
"""The width of a console that writes to a file or a pipe: no line is ever that long, so
nothing is wrapped (tables only take the width their cells need)."""

_json_errors = False
"""Whether the running command was given `--json` (errors are then JSON on stdout)."""


def _remember_json(value: bool) -> bool:
    """The `--json` option's callback: errors of this command follow the flag."""
    global _json_errors
    _json_errors = value
    return value


def use_json_errors() -> None:
    """Report errors as JSON from now on (`main` does, when `--json` is on the command line
    but the parser refused the input before reading the flag)."""
    _remember_json(True)


def reset() -> None:
    """Forget a previous command's `--json` (the root callback calls this on every run)."""
    _remember_json(False)


def json_errors() -> bool:
    """Whether errors are reported as JSON on stdout (the command was given `--json`)."""
    return _json_errors


JsonFlag = Annotated[
    bool,
    typer.Option(
        "--json",
        help='Print data as JSON; errors as {"error": …, "code": …} on stdout.',
        callback=_remember_json,
    ),
]
"""The `--json` option every command that shows data takes."""


def _console(stream: TextIO, *, stderr: bool) -> Console:
    from rich.console import Console

    terminal = stream.isatty()
    return Console(
        file=stream,
        stderr=stderr,
        emoji=False,
        highlight=False,
        soft_wrap=not terminal,
        width=None if terminal else UNWRAPPED_WIDTH,
    )


_consoles: dict[tuple[int, bool], Console] = {}


def _cached(stream: TextIO, *, stderr: bool) -> Console:
    """One console per stream (tests swap sys.stdout; each stream gets its own)."""
    key = (id(stream), stderr)
    console = _consoles.get(key)
    if console is None or console.file is not stream:
        console = _consoles[key] = _console(stream, stderr=stderr)
    return console


def out() -> Console:
    """The console for data and messages (stdout)."""
    return _cached(sys.stdout, stderr=False)


def err() -> Console:
    """The console for errors, warnings and progress (stderr)."""
    return _cached(sys.stderr, stderr=True)


def say(*objects: Any, **options: Any) -> None:
    """Print for a person on stdout (rich markup; `options` as rich's `Console.print`)."""
    out().print(*objects, **options)


def emit(data: Any) -> None:
    """Print `data` as indented JSON with sorted keys on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def escape(text: str) -> str:
    """`text` with rich markup escaped, to print it as it is."""
    from rich.markup import escape as escape_markup

    return escape_markup(text)


def report_error(message: str, code: int) -> None:
    """Report an error without exiting: JSON on stdout under `--json`, else a red line on
    stderr (the message is plain text: brackets in it are printed, never read as markup)."""
    if _json_errors:
        emit({"error": message, "code": code})
        return
    from rich.markup import escape

    err().print(f"[bold red]error:[/] {escape(message)}")


BAD_INPUT_STATUSES = frozenset({400, 404, 413, 422})
"""The problem statuses (`accord.api.problems`) that put the fault in the request: malformed or
invalid input, an unknown object, a file that can never fit. The CLI exits 2 for them."""


def exit_code(status: int | None) -> int:
    """2 (bad input) for a status in BAD_INPUT_STATUSES, 1 for every other failure (a
    conflict, a wait, a rate limit, the chain or the database away; None: no answer)."""
    return 2 if status in BAD_INPUT_STATUSES else 1


def exit_code_of(exc: Exception) -> int:
    """The exit status of an expected failure: `exit_code` of the status the service answers
    it with (`accord.api.problems.domain_problem`). Imports the problem mapping (and FastAPI with
    it) only here, on the way out of a failed command."""
    from accord.api.problems import domain_problem

    return exit_code(domain_problem(exc).status)


def fail(message: str, code: int = 1) -> NoReturn:
    """Report an error and end the command with exit status `code` (1 a failure, 2 bad input).

    Raises typer.Exit(code), always.
    """
    report_error(message, code)
    raise typer.Exit(code)


def note(message: str) -> None:
    """Something a person should know that is not a problem (a devnet this command started,
    a wait), on stderr: `--json` output on stdout stays one JSON document."""
    from rich.markup import escape

    err().print(f"[cyan]note:[/] {escape(message)}")


def devnet_started(info: DevnetInfo) -> None:
    """Say that this command started the managed devnet, which was not running (commands
    that need the chain start it rather than fail; a person should know it now runs)."""
    note(
        f"the devnet was not running: started it at {info.rpc_url} (pid {info.pid}); "
        "`accord devnet down` stops it"
    )


def warn(message: str) -> None:
    """A warning on stderr (never on stdout: it would corrupt `--json` output)."""
    from rich.markup import escape

    err().print(f"[yellow]warning:[/] {escape(message)}")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 agent`, `2 agents`, `0 agents`; `nouns` for a plural that is not `noun` + s
    (`plural(n, "entry", "entries")`)."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def amount(wei: int) -> str:
    """An amount of wei as a person reads it: `0.25 ETH`, `≈0.066667 ETH`, `1000 wei`
    (`accord.market.money.display_eth`; `--json` keeps the exact wei as an integer string)."""
    from accord.market.money import display_eth

    return display_eth(wei)


def amounts(text: str) -> str:
    """`text` (a message, a check's detail) with each amount of wei in it written as
    `amount` writes it."""
    from accord.market.money import with_amounts

    return with_amounts(text)


def duration(seconds: float) -> str:
    """A span for a person: `45 s`, `1 min 25 s`, `2 h 3 min`, `1 day 2 h` (whole seconds,
    rounded up: a wait never reads shorter than it is)."""
    left = max(0, -int(-seconds // 1))
    days, left = divmod(left, 86400)
    hours, left = divmod(left, 3600)
    minutes, secs = divmod(left, 60)
    if days:
        return f"{plural(days, 'day')} {hours} h" if hours else plural(days, "day")
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"
