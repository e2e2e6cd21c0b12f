"""`accord audit TASK`: the numbered checklist over a finished collaboration."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from accord.api import output
from accord.api.output import JsonFlag, amount, amounts, emit, escape, fail
from accord.ledger.errors import LedgerError
from accord.ledger.sealing import is_commitment
from accord.ledger.settings import Settings
from accord.market.errors import MarketError

if TYPE_CHECKING:
    from rich.console import Console

    from accord.audit.checks import AuditReport
    from accord.ledger.store import LogStore


def audit(
    task_id: Annotated[str, typer.Argument(help="The task to audit.")],
    as_json: JsonFlag = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write a readable HTML report to this file.")
    ] = None,
    outputs: Annotated[
        Path | None,
        typer.Option(
            help="A folder of sealed outputs (`accord task result TASK --out DIR` writes "
            "DIR/sealed): the checks re-run on them. Without it, only the outputs this home "
            "holds are opened; the rest are held to the operator's signed verdicts."
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="Audit the task of the accord service at this URL from what it publishes "
            "(its log and checkpoints, each checked) and the chain, in this process, with no "
            "home: nothing is written to disk but --html."
        ),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(
            help="With --server: read the chain through this JSON-RPC URL, not the one the "
            "service advertises (GET /chain)."
        ),
    ] = None,
) -> None:
    """Re-check a finished collaboration from the log and the chain alone; exit 1 on FAIL,
    INCOMPLETE (a python check or exam this machine's box could not re-run) or PENDING (a task
    in progress whose newest entries are not anchored yet), 2 for a task the
    log does not hold, an outputs folder that is not one or an HTML path that cannot be
    written. A read: it starts no devnet and creates no home. The report says whether the
    checks re-ran on the outputs or were held to their signed verdicts."""
    if html is not None and (html.is_dir() or not html.parent.is_dir()):
        fail(f"cannot write the HTML report to {html}: not a file in an existing folder", 2)
    if outputs is not None and not outputs.is_dir():
        fail(f"--outputs {outputs} is not a folder of sealed outputs", 2)
    if rpc_url is not None and server is None:
        fail("--rpc-url reads the chain of a service: give --server URL too", 2)
    if server is not None:
        _audit_published(task_id, server, rpc_url, outputs, html, as_json)
        return
    from accord.audit.checks import audit_task
    from accord.ledger.wiring import check_recorded_devnet, connect_chain, open_store
    from accord.market.wiring import connect_escrow

    try:
        settings = Settings.from_env()
        store = open_store(settings, create=False)
        if not _holds_task(store, task_id):
            fail(f"no task {task_id!r} in the log (see `accord task list`)", 2)
        check_recorded_devnet(settings)  # another chain is named, not read as missing anchors
        anchors = connect_chain(settings, start_devnet=False)
        escrow, _ = connect_escrow(settings, start_devnet=False)
        report = audit_task(
            store, task_id, anchors=anchors, escrow=escrow, outputs=sealed_outputs(store, outputs)
        )
    except ValueError as exc:
        fail(str(exc), 2)
    except (LedgerError, MarketError) as exc:
        fail(str(exc), 1)
    _finish(report, store, html, as_json)


def _audit_published(
    task_id: str,
    server: str,
    rpc_url: str | None,
    outputs: Path | None,
    html: Path | None,
    as_json: bool,
) -> None:
    """`accord audit TASK --server URL`: the same checklist over the service's published log
    (`accord.audit.remote`), held in memory, and the chain."""
    from accord.audit.checks import audit_task
    from accord.audit.remote import published_chains, published_log, refused_audit

    try:
        with published_log(server) as published:
            store = published.store
            if published.refusal is not None:
                report = refused_audit(task_id, published.refusal)
            else:
                if not _holds_task(store, task_id):
                    fail(f"no task {task_id!r} in the log of {server}", 2)
                anchors, escrow = published_chains(published, rpc_url)
                report = audit_task(
                    store,
                    task_id,
                    anchors=anchors,
                    escrow=escrow,
                    outputs=sealed_outputs(store, outputs),
                )
            _finish(report, store, html, as_json, where=f" of {server}")
    except (LedgerError, MarketError) as exc:
        fail(str(exc), 1)


def _finish(
    report: AuditReport, store: LogStore, html: Path | None, as_json: bool, where: str = ""
) -> None:
    """Print `report` (and write its HTML); exit 1 unless it passed, 2 for a task the log
    does not hold."""
    from accord.audit.checks import NO_SUCH_TASK
    from accord.audit.html import render_html

    task_id = report.task_id
    failure = report.first_failure
    if failure is not None and failure.detail.startswith(NO_SUCH_TASK):
        fail(f"no task {task_id!r} in the log{where} (see `accord task list`)", 2)
    if html is not None:
        try:
            html.write_text(render_html(report, store))
        except OSError as exc:
            fail(f"cannot write the HTML report to {html}: {exc.strerror or exc}", 2)
    if as_json:
        emit(report.to_json())
    else:
        print_report(report, output.out())
        print_chain_facts(report.facts.get("on_chain"), output.out())
        if html is not None:
            output.say(f"report written to {html}")
    if not report.ok:
        raise typer.Exit(1)


def sealed_outputs(store: LogStore, folder: Path | None) -> Callable[[str], bytes | None]:
    """The sealed bytes of a commitment: from this home's blob store, else from `folder` (a
    file named by the commitment, directly in it or in its `sealed/`). The audit checks every
    one against its commitment, so a wrong file is found, not trusted."""
    from accord.market.blobs import BlobError, BlobStore
    from accord.market.work import MAX_FILE_BYTES

    blobs = BlobStore(store.engine)

    def read(commitment: str) -> bytes | None:
        if not is_commitment(commitment):
            return None
        with contextlib.suppress(BlobError):
            held = blobs.sealed(commitment)
            if held is not None:
                return held
        for candidate in (
            [] if folder is None else [folder / commitment, folder / "sealed" / commitment]
        ):
            if candidate.is_file() and candidate.stat().st_size <= MAX_FILE_BYTES:
                return candidate.read_bytes()
        return None

    return read


def _holds_task(store: LogStore, task_id: str) -> bool:
    """Whether any stored entry is about `task_id`: by the subject index, or else by the
    signed bytes themselves (an operator may have edited the index; the audit then says so)."""
    from accord.market.tasks import TASK_POSTED

    if store.find(kind=TASK_POSTED, subject=task_id, limit=1):
        return True
    needle = b'"subject":' + json.dumps(task_id, ensure_ascii=False).encode()
    return any(needle in stored.data for stored in store.entries())


def print_report(report: AuditReport, console: Console) -> None:
    marks = {
        "pass": "[green]✓[/]",
        "fail": "[red]✗[/]",
        "skipped": "-",
        "not-run": " ",
        "unchecked": "[yellow]?[/]",
        "pending": "[blue]…[/]",
    }
    console.print(f"auditing {report.task_id}")
    for step in report.steps:
        where = f" [entry {step.entry}]" if step.entry is not None else ""
        console.print(
            f" {marks[step.status]} ({step.number}) {step.title}: "
            f"{escape(amounts(step.detail))}{where}"
        )
    failure = report.first_failure
    unchecked = [s for s in report.steps if s.status == "unchecked"]
    pending = [s for s in report.steps if s.status == "pending"]
    if failure is None and pending:
        steps = ", ".join(str(s.number) for s in pending)
        console.print(f"[bold blue]PENDING[/]: the task is in progress; step {steps} waits")
    elif failure is None and unchecked:
        steps = ", ".join(str(s.number) for s in unchecked)
        console.print(f"[bold yellow]INCOMPLETE[/]: step {steps} could not be re-run here")
    elif failure is None:
        console.print("[bold green]PASS[/]")
    else:
        where = f", entry {failure.entry}" if failure.entry is not None else ""
        console.print(
            f"[bold red]FAIL[/] at step {failure.number}{where}: {escape(amounts(failure.detail))}"
        )


def print_chain_facts(facts: object, console: Console) -> None:
    """The payouts, addresses and transaction hashes of the report, for a cross-check on a
    block explorer (`facts` is the report's `on_chain`, from `accord.audit.checks.chain_facts`)."""
    if not isinstance(facts, dict):
        return
    console.print("on chain, to cross-check:")
    for payout in facts.get("payouts", []):
        paid = int(payout["wei"])  # exact too, to match the transaction on a block explorer
        console.print(
            f"  paid {amount(paid)} ({paid} wei) to {payout['address']} ({payout['agent']})"
        )
    escrow = facts.get("escrow")
    if isinstance(escrow, dict):
        console.print(f"  escrow {escrow['address']} on chain {escrow['chain_id']}")
        for tx in escrow["transactions"]:
            console.print(f"    {tx['event']:<8} block {tx['block_number']} tx {tx['tx_hash']}")
    registry = facts.get("registry")
    if isinstance(registry, dict):
        console.print(f"  registry {registry['address']} on chain {registry['chain_id']}")
        for anchor in registry["anchors"]:
            console.print(
                f"    anchor size {anchor['size']} block {anchor['block_number']} "
                f"tx {anchor['tx_hash']}"
            )
    if facts.get("error"):
        console.print(f"  {escape(str(facts['error']))}")
