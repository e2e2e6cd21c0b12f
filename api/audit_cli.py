"""`accord audit TASK`: the numbered checklist over a finished collaboration."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from audit.checks import AuditReport, audit_task
from audit.html import render_html
from ledger.errors import LedgerError
from ledger.runtime import connect_chain, open_store
from ledger.settings import Settings
from market.errors import MarketError
from market.runtime import connect_escrow

out = Console(emoji=False, highlight=False)
err = Console(stderr=True, emoji=False, highlight=False)


def audit(
    task_id: Annotated[str, typer.Argument(help="The task to audit.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write a readable HTML report to this file.")
    ] = None,
) -> None:
    """Re-check a finished collaboration from the log and the chain alone; exit 1 on FAIL."""
    try:
        settings = Settings.from_env()
        store = open_store(settings)
        anchors = connect_chain(settings, start_devnet=False)
        escrow, _ = connect_escrow(settings, start_devnet=False)
        report = audit_task(store, task_id, anchors=anchors, escrow=escrow)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    except (LedgerError, MarketError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    if html is not None:
        html.write_text(render_html(report, store))
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        print_report(report, out)
        if html is not None:
            out.print(f"report written to {html}")
    if not report.ok:
        raise typer.Exit(1)


def print_report(report: AuditReport, console: Console) -> None:
    marks = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "skipped": "-", "not-run": " "}
    console.print(f"auditing {report.task_id}")
    for step in report.steps:
        where = f" [entry {step.entry}]" if step.entry is not None else ""
        console.print(
            f" {marks[step.status]} ({step.number}) {step.title}: {escape(step.detail)}{where}"
        )
    failure = report.first_failure
    if failure is None:
        console.print("[bold green]PASS[/]")
    else:
        where = f", entry {failure.entry}" if failure.entry is not None else ""
        console.print(
            f"[bold red]FAIL[/] at step {failure.number}{where}: {escape(failure.detail)}"
        )
