"""What an accord process sets up for itself at its entry point, never at `import accord`.

A library leaves its host's interpreter as it found it, so `import accord` (and any
`accord.*` module) changes no process-wide state: no import hook, no recursion limit. The
two entry points that own their process call `prepare_process()` before anything heavy loads:

- the `accord` command (`accord.api.cli.main`, and so `accord serve` and `accord agent run`);
- the service (`accord.api.app.create_app`, for a uvicorn factory that is not `accord serve`).

It does two things: puts the recursion limit back where py_ecc's import would leave it at
100,000 (`accord._stack`: a hostile JSON document would otherwise kill the service with
SIGSEGV instead of a RecursionError), and defers py_ecc's BLS code until something needs it
(`accord._bls`: 0.6 to 0.75 s of each command's start). A host that embeds accord and wants
either calls `prepare_process()` itself.
"""

from __future__ import annotations

from accord._bls import defer_bls_keystores
from accord._stack import keep_recursion_limit


def prepare_process() -> None:
    """Keep the recursion limit (first: py_ecc's package raises it), then defer the BLS
    keystores. Idempotent; raises nothing."""
    keep_recursion_limit()
    defer_bls_keystores()
