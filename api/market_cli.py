"""`accord task …` and `accord bid …`: the market from the command line.

Posting escrows the budget on chain (the managed devnet unless ACCORD_RPC_URL); bids are sealed
by commit-reveal, the salt kept in `$ACCORD_HOME/bids/` (mode 0600) between the two steps.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn
from urllib.parse import quote

import typer

from accord.api import output
from accord.api.output import (
    JsonFlag,
    amount,
    amounts,
    emit,
    escape,
    exit_code,
    exit_code_of,
    fail,
    plural,
    say,
)
from accord.identity.errors import IdentityError
from accord.ledger.errors import ChainError, LedgerError
from accord.ledger.sealing import is_commitment
from accord.ledger.settings import Settings
from accord.market.errors import BidRejected, MarketError, WorkError
from accord.market.money import Wei, parse_amount

if TYPE_CHECKING:
    from accord.client import AccordClient
    from accord.identity.onboarding import Onboarding
    from accord.ledger.signing import Signer
    from accord.market.service import Market
    from accord.market.tasks import Task
    from accord.market.wiring import MarketContext

task_app = typer.Typer(help="Paid tasks: post, show, list, bids, award.", no_args_is_help=True)
bid_app = typer.Typer(help="Sealed bids by hand: commit, then reveal.", no_args_is_help=True)

SERVER_ENV = "ACCORD_SERVER"
"""The environment variable naming the service `--server` reads from
(`accord.client.SERVER_ENV`, spelled out here so building the command tree does not import the
HTTP client)."""

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar=SERVER_ENV,
        help="Read from the accord service at this URL instead of the local store.",
    ),
]


def open_market(settings: Settings) -> MarketContext:
    """The market over the configured ledger and chain (`accord.market.wiring.open_market`,
    imported when a command needs it); a managed devnet it has to start is said on stderr. Raises
    what that raises."""
    from accord.market.wiring import open_market as open_configured_market

    return open_configured_market(settings, devnet_started=output.devnet_started)


def agent_names(onboarding: Onboarding | None) -> dict[str, str]:
    """Each registered agent's name by its DID; {} when there is no registry to read or it
    cannot be read (names are for the reader: a DID alone is still right)."""
    if onboarding is None:
        return {}
    try:
        return {record.did: record.name for record in onboarding.registry.list()}
    except (IdentityError, LedgerError):
        return {}


def named(did: str, names: Mapping[str, str]) -> str:
    """`name (did)` for a registered agent, the bare DID otherwise."""
    name = names.get(did)
    return did if name is None else f"{name} ({did})"


def with_names(text: str, names: Mapping[str, str]) -> str:
    """`text` with each registered agent's DID followed by its name: `did (name)` reads as
    `name (did)`."""
    for did, name in names.items():
        text = text.replace(did, f"{name} ({did})")
    return text


@contextmanager
def _market() -> Iterator[MarketContext]:
    """The market over the configured ledger and chain; expected failures become one line
    (a refused bid names the agents it is about)."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)
    context: MarketContext | None = None
    try:
        context = open_market(settings)
        yield context
    except BidRejected as exc:
        detail = str(exc).split(": ", 1)[-1]
        names = agent_names(None if context is None else context.onboarding)
        message = f"bid rejected ({exc.reason}): {with_names(amounts(detail), names)}"
        fail(message, code=exit_code_of(exc))
    except (MarketError, LedgerError, IdentityError) as exc:
        fail(str(exc), code=exit_code_of(exc))


class _ReadOnlyEscrow:
    """The escrow side of a market opened to read: read commands never start or reach a chain,
    so any escrow action refuses (with ChainError) instead of sending anything."""

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise ChainError("this command only reads the log: it does not reach the chain")

    open = refund_to_requester = requester_address = deposit_of = pay_out = chain_id = _refuse
    operator_address = deposit_record = escrow_address = release = deposit_problem = _refuse
    bond = bonded = block_number = block_hash = answer = answered = answers_of = _refuse


@contextmanager
def read_market() -> Iterator[Market]:
    """The market over the configured log, to read: it creates no home, starts no devnet and
    reaches no chain. Expected failures become one line (an unknown task is exit 2)."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)
    from accord.identity.onboarding import open_onboarding
    from accord.ledger.service import Ledger
    from accord.ledger.wiring import clock_of, open_store, operator_signer
    from accord.market.service import Market

    try:
        store = open_store(settings, create=False)
        ledger = Ledger(store, operator_signer(settings), clock_of(settings))
        yield Market(ledger, open_onboarding(settings, ledger), _ReadOnlyEscrow())
    except (MarketError, LedgerError, IdentityError) as exc:
        fail(str(exc), code=exit_code_of(exc))


def _read_task(task_id: str) -> dict[str, Any]:
    """`task show`'s view of a task, read from the log and the views alone: no market service,
    no onboarding, no chain (`accord.market.task_reads`), so the command starts fast.
    Expected failures become one line (an unknown task is exit 2)."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)
    from accord.ledger.wiring import clock_of, open_store
    from accord.market.task_reads import read_requester_record, read_task
    from accord.market.tasks import clock_state

    try:
        store = open_store(settings, create=False)
        task = read_task(store, task_id)
        data: dict[str, Any] = task.to_json()
        data["state"] = clock_state(task, clock_of(settings)())
        data["requester_record"] = read_requester_record(store, task.requester).to_json()
    except (MarketError, LedgerError) as exc:
        fail(str(exc), code=exit_code_of(exc))
    return data


def require_task(task_id: str) -> Task:
    """The task `task_id`, read from the log before a command starts a devnet or reaches a
    chain: a task the log does not hold is bad input, exit 2, in every command."""
    with read_market() as market:
        return market.task(task_id)


def _task_view(market: Market, task: Any) -> dict[str, Any]:
    data: dict[str, Any] = task.to_json()
    data["state"] = market.state(task)
    return data


@contextmanager
def remote(server: str, signer: Signer | None = None) -> Iterator[AccordClient]:
    """A client of the service at `server` (signing as `signer` when given); its failures
    become one line (exit 2 when the request was at fault: an unknown object or bad input,
    else 1)."""
    from accord.client import AccordClient, ApiError

    try:
        with AccordClient(server, signer=signer) as client:
            yield client
    except ApiError as exc:
        bad_url = not server.startswith(("http://", "https://"))
        code = 2 if bad_url else exit_code(exc.status)
        output.report_error(str(exc), code)
        raise typer.Exit(code) from None


OwnKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--key",
        help="With --server: your own did:key file, which signs the request (the service never "
        "holds it; `accord key new` makes one).",
    ),
]


def own_signer(key: Path) -> Signer:
    """The did:key in the key file `key` (made by `accord key new` or a first posting). Exits
    2 when it is missing or cannot be read."""
    from accord.ledger.signing import read_keyfile

    if not key.is_file():
        fail(f"--key {key}: no such key file (make one with `accord key new {key}`)", 2)
    try:
        return read_keyfile(key)
    except LedgerError as exc:
        fail(str(exc), 2)


@contextmanager
def signed_remote(server: str, key: Path | None, acting: str) -> Iterator[AccordClient]:
    """`remote(server)` signing as the did:key in `key`. Exits 2 without one: `acting` says
    what needs it."""
    if key is None:
        fail(f"with --server, {acting} is signed by you: give --key FILE (your did:key)", 2)
    with remote(server, own_signer(key)) as client:
        yield client


# -- tasks -------------------------------------------------------------------------------------


@task_app.command("post")
def task_post(
    spec: Annotated[
        Path | None,
        typer.Option(
            help="A task spec (JSON): title, budget, windows, parts and checks. Files the "
            'inputs name as {"$file": "invoice.txt"} are read relative to it and stored.'
        ),
    ] = None,
    title: Annotated[str | None, typer.Option(help="What the task is.")] = None,
    budget: Annotated[str | None, typer.Option(help="The most it pays: 0.5eth, 20gwei.")] = None,
    capability: Annotated[
        str | None, typer.Option(help="The capability of the task's one part.")
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option("--input", help="The part's input: JSON, or @file.json."),
    ] = None,
    expect: Annotated[
        str | None,
        typer.Option(
            help="The output the part must give: JSON, or @file.json (an `expect` check "
            "equal to it). Without a judge on the service, a task needs a check that can "
            "reject a wrong answer."
        ),
    ] = None,
    description: Annotated[str, typer.Option(help="What the deliverable must contain.")] = "",
    bidding: Annotated[str, typer.Option(help="How long sealed bids are taken.")] = "30s",
    reveal: Annotated[str, typer.Option(help="How long bids are revealed after that.")] = "30s",
    delivery: Annotated[str, typer.Option(help="Time to deliver after the award.")] = "10m",
    review: Annotated[str, typer.Option(help="Time to review the delivered work.")] = "1h",
    rule: Annotated[str, typer.Option(help="second-score or first-score.")] = "second-score",
    as_agent: Annotated[
        str | None, typer.Option("--as", help="Post as this agent (default: the operator).")
    ] = None,
    eth_key: Annotated[
        str | None,
        typer.Option(
            help='The account paying the escrow: a key file ({"key": "0x…"}, as payout '
            "keys are kept) or, locally, a hex private key (default: ACCORD_REQUESTER_ETH_KEY, "
            "or a funded devnet account). With --server, a key file, required: you deposit."
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="With --server: your own did:key file, which signs the posting (made there "
            "on first use). The service never holds it.",
        ),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="With --server: your own JSON-RPC URL (default: GET /chain's)."),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="With --server: post at most once under this key (retries are safe)."),
    ] = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """Post a paid task (the requester's parts and checks); its budget is escrowed on chain in
    the same step. Either --spec FILE, or the flags of a single part: --title, --budget,
    --capability and --input, and --expect (the output it must give; without it the part is
    checked by its output schema and the requester's review only, which a service with no
    judge refuses, exit 2).

    With --server URL you are a requester holding your own keys: --key signs the posting,
    and your account (--eth-key FILE) deposits the budget itself; the command returns once
    the service has seen the deposit and the task takes bids."""
    from accord.market.auction import PAYMENT_RULES

    if rule not in PAYMENT_RULES:
        fail(f"--rule must be one of {', '.join(PAYMENT_RULES)}", code=2)
    if spec is not None:
        if any(v is not None for v in (title, budget, capability, input_json, expect)):
            fail(
                "give either --spec or --title/--budget/--capability/--input/--expect, not both",
                2,
            )
        request, request_files = _read_spec(spec)
    else:
        missing = [
            flag
            for flag, value in (
                ("--title", title),
                ("--budget", budget),
                ("--capability", capability),
                ("--input", input_json),
            )
            if value is None
        ]
        if missing:
            fail(f"missing {', '.join(missing)} (or give the whole task with --spec FILE)", 2)
        request = {
            "title": title,
            "description": description,
            "budget": budget,
            "bidding": bidding,
            "reveal": reveal,
            "delivery": delivery,
            "review": review,
            "rule": rule,
            "parts": [{"id": "part", "capability": capability, "input": _json_arg(input_json)}],
        }
        if expect is not None:
            expected = {"id": "expected", "weight": 1, "kind": "expect", "part": "part"}
            request["checks"] = [{**expected, "path": "$", "equals": _json_arg(expect, "--expect")}]
        request_files = {}
    if server:
        if as_agent is not None:
            fail("--as names a key the local store holds; with --server give --key FILE", 2)
        _post_remote(
            server, request, request_files, key, eth_key, rpc_url, idempotency_key, as_json
        )
        return
    if key is not None or rpc_url is not None or idempotency_key is not None:
        fail("--key, --rpc-url and --idempotency-key go with --server URL", 2)
    if eth_key is not None and Path(eth_key).is_file():
        eth_key = _eth_key_file(Path(eth_key))
    with _market() as market:
        requester = market.signer_for(as_agent)
        for content in request_files.values():  # held by the requester, kept once posted
            market.market.upload_file(requester.did, content)
        task_spec = market.market.spec_from_request(request, requester=requester.did)
        paying = (
            eth_key or os.environ.get("ACCORD_REQUESTER_ETH_KEY") or market.default_requester_key()
        )
        task = market.market.post(requester, task_spec, requester_key=paying)
        data = _task_json(market, task)
        data["warnings"] = market.market.warnings(task_spec)
    if as_json:
        emit(data)
        return
    parts = len(task_spec.parts)
    checks = len(task_spec.requester_checks)
    say(
        f"[green]✓[/] posted {task.task_id}: {escape(task_spec.title)!r}, "
        f"{plural(parts, 'part')}, {plural(checks, 'check')}, "
        f"{amount(task_spec.budget)} escrowed"
    )
    say(f"  bids until {task.bidding_ends:%H:%M:%S}, reveals until {task.reveal_ends:%H:%M:%S}")
    for warning in data["warnings"]:
        output.warn(warning)


def _eth_key_file(path: Path) -> str:
    """The hex key of an Ethereum key file. Exits 2 when it cannot be read."""
    from accord.kit.wallet import WalletError, read_key_file

    try:
        return read_key_file(path)
    except WalletError as exc:
        fail(str(exc), 2)


def _post_remote(
    server: str,
    request: dict[str, Any],
    files: Mapping[str, bytes],
    key: Path | None,
    eth_key: str | None,
    rpc_url: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Post `request` to the service at `server` as a requester holding its own keys: signed
    by the did:key in `key`, the escrow deposited from the account in the key file `eth_key`
    (`accord.kit.Requester`). Exits 2 for missing or unreadable keys, 1 when the chain or the
    service fails, with the service's problem as the message."""
    from accord.client import AccordClient, ApiError
    from accord.kit import Requester, Wallet
    from accord.ledger.errors import AccordError
    from accord.ledger.signing import load_or_create_keyfile

    if key is None or eth_key is None:
        fail(
            "with --server you post as yourself: give --key FILE (your did:key, made there on "
            "first use) and --eth-key FILE (the account that deposits the budget)",
            2,
        )
    eth_path = Path(eth_key)
    if not eth_path.is_file():
        fail(f"--eth-key {eth_key}: no such key file (with --server it is a file, not a key)", 2)
    try:
        signer = load_or_create_keyfile(key)
    except LedgerError as exc:
        fail(str(exc), 2)
    try:
        with AccordClient(server, signer=signer) as client:
            wallet = Wallet.from_key_file(eth_path, client.get("/chain"), rpc_url)
            requester = Requester(client, wallet)
            for content in files.values():
                client.upload_file(content)
            posted = requester.post(request, idempotency_key=idempotency_key)
            deposit = requester.deposit(posted)
            task = requester.wait_until_bidding(posted)
    except ApiError as exc:
        code = 2 if not server.startswith(("http://", "https://")) else exit_code(exc.status)
        fail(str(exc), code)
    except AccordError as exc:
        fail(str(exc), 1)
    data = {**task, "escrow": posted.escrow, "deposit_tx": deposit.tx_hash or None}
    if as_json:
        emit(data)
        return
    budget = Wei(int(task["spec"]["budget"]))
    say(
        f"[green]✓[/] posted {task['task_id']}: {escape(task['spec']['title'])!r}, signed by "
        f"{signer.did}, {amount(budget)} escrowed from {wallet.address}"
    )
    say(f"  {task['state']}: bids until {task['bidding_ends']}")
    for warning in task.get("warnings", []):
        output.warn(warning)


def _json_arg(text: str | None, flag: str = "--input") -> Any:
    """JSON given on the command line, or `@path` to a JSON file. Exits 2 otherwise."""
    assert text is not None
    try:
        if text.startswith("@"):
            return json.loads(Path(text[1:]).read_text())
        return json.loads(text)
    except OSError as exc:
        fail(f"cannot read {text[1:]}: {exc.strerror}", 2)
    except ValueError as exc:
        fail(f"{flag} is not JSON: {exc}", 2)


def _read_spec(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The spec file, its `{"$file": "name"}` references replaced by the files' sha256, and the
    files to store. Exits 2 for a spec that cannot be read or names a file that cannot be."""
    from accord.market.work import attach_files

    try:
        request = json.loads(path.read_text())
    except OSError as exc:
        fail(f"cannot read the spec {path}: {exc.strerror}", 2)
    except ValueError as exc:
        fail(f"the spec {path} is not JSON: {exc}", 2)
    if not isinstance(request, dict):
        fail(f"the spec {path} must be a JSON object", 2)
    try:
        request["parts"], files = attach_files(
            request.get("parts"), lambda name: (path.parent / name).read_bytes()
        )
    except WorkError as exc:
        fail(str(exc), 2)
    return request, files


def _task_json(context: MarketContext, task: Any) -> dict[str, Any]:
    data: dict[str, Any] = task.to_json()
    data["state"] = context.market.state(task)
    return data


@task_app.command("show")
def task_show(task_id: str, as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """One task: its spec, windows, state, its requester's record, and the winner once
    awarded."""
    if server:
        with remote(server) as client:
            data = client.task(task_id)
    else:
        data = _read_task(task_id)
    if as_json:
        emit(data)
        return
    spec = data["spec"]
    say(f"[bold]{data['task_id']}[/]  {escape(spec['title'])}  ({data['state']})")
    say(f"  requester   {data['requester']}")
    record = data.get("requester_record")
    if record is not None:
        say(
            f"  its record  {record['tasks_posted']} posted, {record['tasks_settled']} settled, "
            f"{plural(record['reviews_rejected'], 'review')} rejected "
            f"({record['rejections_overturned']} overturned)"
        )
    say(
        f"  budget      {amount(int(spec['budget']))} "
        f"({'escrowed' if data['escrowed'] else 'not escrowed'})"
    )
    if spec.get("description"):
        say(f"  description {escape(spec['description'])}")
    say(f"  needs       {', '.join(spec['capabilities'])}")
    for part in spec.get("parts", []):
        say(f"  part        {part['id']} ({part['capability']})")
    for check in spec.get("checks", []):
        reads = ", ".join(check.get("reads", []))
        say(f"  check       {check['id']} ({check['kind']}, weight {check['weight']}) on {reads}")
    if spec.get("parts") and not spec.get("checks"):
        say("  checks      each part's output schema, and the requester's review")
    for digest, meta in spec.get("files", {}).items():
        size = plural(int(meta.get("size") or 0), "byte")
        say(f"  file        {digest} ({size}; `accord task file`)")
    say(f"  rule        {spec['rule']}")
    say(f"  bidding     until {data['bidding_ends']}")
    say(f"  revealing   until {data['reveal_ends']}")
    if data.get("winner") is not None and data.get("price") is not None:
        say(f"  winner      {data['winner']} at {amount(int(data['price']))}")


@task_app.command("list")
def task_list(
    state: Annotated[
        str | None,
        typer.Option(help="Only tasks in this state now: bidding, revealing, awarded, ..."),
    ] = None,
    capability: Annotated[
        str | None, typer.Option(help="Only tasks needing this capability.")
    ] = None,
    requester: Annotated[str | None, typer.Option(help="Only tasks posted by this DID.")] = None,
    limit: Annotated[int | None, typer.Option(help="Tasks per page, 1..200 (default 50).")] = None,
    cursor: Annotated[
        str | None, typer.Option(help="Resume after a page (its next_cursor).")
    ] = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """Tasks with their state, oldest first, a page at a time (`--json`: {tasks, next_cursor})."""
    filters: dict[str, Any] = {
        "state": state,
        "capability": capability,
        "requester": requester,
        "limit": limit,
        "cursor": cursor,
    }
    if server:
        with remote(server) as client:
            rows, next_cursor = client.task_page(**filters)
    else:
        with read_market() as market:
            page = market.list_tasks(**filters)
            rows = [_task_view(market, task) for task in page.tasks]
            next_cursor = page.next_cursor
    if as_json:
        emit({"tasks": rows, "next_cursor": next_cursor})
        return
    from rich.table import Table

    table = Table(title=plural(len(rows), "task"), title_justify="left")
    for column in ("id", "state", "title", "budget", "capabilities"):
        table.add_column(column, overflow="fold")
    for row in rows:
        spec = row["spec"]
        table.add_row(
            row["task_id"],
            row["state"],
            spec["title"],
            amount(int(spec["budget"])),
            ", ".join(spec["capabilities"]),
        )
    say(table)
    if next_cursor is not None:
        say(f"more: --cursor {next_cursor}")


@task_app.command("cancel")
def task_cancel(
    task_id: str,
    as_agent: Annotated[
        str | None, typer.Option("--as", help="The requester (default: the operator).")
    ] = None,
    key: OwnKeyOption = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """End a posted task whose escrow never opened (the requester only). With --server, your
    own signed task.cancelled (--key)."""
    if server:
        if as_agent is not None:
            fail("--as names a key the local store holds; with --server give --key FILE", 2)
        with signed_remote(server, key, "cancelling a task") as client:
            cancelled = client.request(
                "POST",
                f"/tasks/{quote(task_id, safe='')}/cancel",
                json={"entry": client.entry("task.cancelled", task_id, {"task_id": task_id})},
            )
        if as_json:
            emit(cancelled)
            return
        say(f"[green]✓[/] cancelled {task_id}: nothing was escrowed, nothing is owed")
        return
    if key is not None:
        fail("--key goes with --server URL", 2)
    require_task(task_id)
    with _market() as market:
        task = market.market.cancel(market.signer_for(as_agent), task_id)
        data = _task_json(market, task)
    if as_json:
        emit(data)
        return
    say(f"[green]✓[/] cancelled {task.task_id}: nothing was escrowed, nothing is owed")


@task_app.command("withdraw")
def task_withdraw(
    eth_key: Annotated[
        Path | None,
        typer.Option(help="Your account's key file (the one your postings deposited from)."),
    ] = None,
    rpc_url: Annotated[
        str | None, typer.Option(help="Your own JSON-RPC URL (default: GET /chain's).")
    ] = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """Take back what the escrow holds for your account (refunds of your tasks, the unpaid rest
    of a budget): TaskEscrow.withdraw, sent from --eth-key's account, which pays the gas.
    A requester holding its own keys: --server URL (the escrow's chain is GET /chain's)."""
    from accord.client import ApiError
    from accord.kit import Wallet
    from accord.ledger.errors import AccordError

    if not server:
        fail("give --server URL: the service whose escrow your tasks deposited into", 2)
    if eth_key is None or not eth_key.is_file():
        fail(f"give --eth-key FILE: the key file of the account to withdraw to ({eth_key})", 2)
    try:
        with remote(server) as client:
            wallet = Wallet.from_key_file(eth_key, client.get("/chain"), rpc_url)
        credit = wallet.credit()
        if credit == 0:
            fail(f"the escrow holds nothing for {wallet.address}: nothing to withdraw")
        sent = wallet.withdraw()
    except ApiError as exc:
        fail(str(exc), exit_code(exc.status))
    except AccordError as exc:
        fail(str(exc), 1)
    data = {"address": wallet.address, "amount": str(credit), "tx_hash": sent.tx_hash}
    if as_json:
        emit(data)
        return
    say(f"[green]✓[/] withdrew {amount(credit)} to {wallet.address} ({sent.tx_hash})")


@task_app.command("bids")
def task_bids(task_id: str, as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """Commitments while sealed; prices once revealed; each bidder by name and DID."""
    if server:
        with remote(server) as client:
            bids = client.bids(task_id)
            names = {str(a["did"]): str(a["name"]) for a in client.agents()} if bids else {}
    else:
        with read_market() as market:
            bids = [bid.to_json() for bid in market.bids(task_id)]
            names = agent_names(market.onboarding) if bids else {}
    if as_json:
        emit(bids)
        return
    from rich.table import Table

    table = Table(title=f"{plural(len(bids), 'bid')} on {task_id}", title_justify="left")
    for column in ("agent", "bidder", "commitment", "price"):
        table.add_column(column, overflow="fold")
    for bid in bids:
        price = amount(int(bid["price"])) if bid["price"] is not None else "sealed"
        agent = names.get(bid["bidder"], "-")
        table.add_row(agent, bid["bidder"], bid["commitment"][:16] + "…", price)
    say(table)


@task_app.command("award")
def task_award(
    task_id: str,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="If the reveal window is still open, wait until it closes (saying how long), "
            "then award.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Clear the auction once the windows are over (or expire the task and refund)."""
    from accord.market.auction import price_reason

    task = require_task(task_id)
    if wait and task.state == "bidding":  # escrowed and not cleared: its windows decide
        from accord.ledger.wiring import clock_of

        wait_for_reveals(task, clock_of(Settings.from_env()))
    with _market() as context:
        outcome = context.market.award(task_id)
        names = agent_names(context.onboarding)
    winner = outcome.winner
    reason = with_names(price_reason(outcome), names)
    data = {
        "task_id": task_id,
        "winner": None if winner is None else winner.bidder,
        "winner_name": None if winner is None else names.get(winner.bidder),
        "price": str(outcome.price),
        "rule": outcome.rule,
        "bids": len(outcome.ranking),
        "expired": winner is None,
        "reason": price_reason(outcome),
    }
    if as_json:
        emit(data)
    elif winner is None:
        say(f"no valid bid: {task_id} expired and its escrow was refunded")
    else:
        say(
            f"[green]✓[/] {task_id} awarded to {escape(named(winner.bidder, names))} "
            f"at {amount(outcome.price)}"
        )
        say(f"  {escape(amounts(reason))}")


# -- bids --------------------------------------------------------------------------------------


def wait_for_reveals(
    task: Task,
    clock: Callable[[], datetime] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Sleep until the task's reveal window has closed (by `clock`, default UTC now; the
    award passes the market's clock, `accord.ledger.wiring.clock_of`), first saying on stderr how
    long and until when; nothing is opened or started meanwhile. Ctrl-C ends the wait (exit
    1)."""
    from accord.ledger.wiring import utc_now, wait_until

    clock = clock or utc_now
    left = (task.reveal_ends - clock()).total_seconds()
    if left <= 0:
        return
    output.note(
        f"waiting {output.duration(left)} for the reveal window of {task.task_id} to close "
        f"(at {task.reveal_ends.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC), then awarding it"
    )
    wait_until(task.reveal_ends, clock, sleep)


def _bid_file(settings: Settings, task_id: str, agent_did: str) -> Path:
    safe = agent_did.replace(":", "_")
    return settings.home / "bids" / task_id / f"{safe}.json"


@bid_app.command("commit")
def bid_commit(
    task_id: str,
    agent: Annotated[str, typer.Option(help="The bidding agent (name or DID).")],
    price: Annotated[str, typer.Option(help="Your price: 0.1eth, 20gwei, 1000wei.")],
    as_json: JsonFlag = False,
) -> None:
    """Send a sealed commitment; the price and salt stay on this machine until the reveal.
    A price over the task's budget is refused here, before anything is sent: the commitment
    hides the price, so the market itself could only refuse it at the reveal."""
    from accord.market import sealed

    task = require_task(task_id)
    with _market() as context:
        offered: Wei = parse_amount(price)
        sealed.check_within_budget(task_id, offered, task.spec.budget)
        signer = context.signer_for(agent)
        path = _bid_file(context.settings, task_id, signer.did)
        if path.exists():
            raise BidRejected("second-bid", f"{agent} already committed to {task_id} from here")
        salt = secrets.token_bytes(32)
        index = context.market.commit(sealed.commit_bid(signer, task_id, offered, salt))
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"task_id": task_id, "price": str(offered), "salt": salt.hex()}, handle)
    if as_json:
        emit({"task_id": task_id, "bidder": signer.did, "index": index})
    else:
        say(f"[green]✓[/] sealed bid committed to {task_id} (entry {index}); reveal later")


@bid_app.command("reveal")
def bid_reveal(
    task_id: str,
    agent: Annotated[str, typer.Option(help="The bidding agent (name or DID).")],
    as_json: JsonFlag = False,
) -> None:
    """Reveal the price and salt committed from this machine."""
    from accord.market import sealed

    require_task(task_id)
    with _market() as context:
        signer = context.signer_for(agent)
        path = _bid_file(context.settings, task_id, signer.did)
        if not path.exists():
            raise BidRejected("unknown-commitment", f"no commitment by {agent} to {task_id} here")
        saved = json.loads(path.read_text())
        reveal = sealed.reveal_bid(
            signer, task_id, Wei(int(saved["price"])), bytes.fromhex(saved["salt"])
        )
        index = context.market.reveal(reveal)
    if as_json:
        emit({"task_id": task_id, "bidder": signer.did, "price": saved["price"], "index": index})
    else:
        say(f"[green]✓[/] revealed {amount(int(saved['price']))} on {task_id} (entry {index})")


@task_app.command("settle")
def task_settle(task_id: str, as_json: JsonFlag = False) -> None:
    """Pay a delivered task's team by Shapley value through the escrow (once; safe to rerun)."""
    from accord.market.settlement import settle_task

    require_task(task_id)
    with _market() as context:
        outcome = settle_task(context.market, context.onboarding, task_id)
        names = {a.did: a.name for a in context.onboarding.registry.list()}
    if as_json:
        emit(
            {
                "task_id": task_id,
                "amount": str(outcome.amount),
                "refund": str(outcome.refund),
                "payouts": {p: str(w) for p, w in outcome.payouts.items()},
                "payees": dict(outcome.payees),
                "held": {p: str(w) for p, w in outcome.held.items()},
                "shapley": dict(outcome.values),
                "tx_hash": outcome.tx_hash,
                "already_settled": outcome.already,
            }
        )
        return
    verb = "was already settled" if outcome.already else "settled on chain"
    say(f"[green]✓[/] {task_id} {verb}: {amount(outcome.amount)} to the team")
    for player, payout in sorted(outcome.payouts.items(), key=lambda kv: -kv[1]):
        share = outcome.values.get(player, "0/1")
        say(f"  {names.get(player, player):<10} {amount(payout):>16}   Shapley {share}")
    for player in sorted(outcome.held):
        say(
            f"  [yellow]![/] {names.get(player, player)} has no payout account: the escrow holds "
            "its pay until it binds one (then settle again to release it)"
        )
    say(f"  back to the requester: {amount(outcome.refund)}")


@task_app.command("result")
def task_result(
    task_id: str,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write deliverable.json, each part's output, and the sealed outputs an "
            "auditor re-runs the checks on (sealed/, for `accord audit --outputs`) here.",
        ),
    ] = None,
    key: OwnKeyOption = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """The deliverable: each part's output (where you may read it; the log holds only its
    commitment) and who made it, and each check once settled. With --server, --key (the
    requester's or a team member's did:key) signs the read: the service shows each the
    outputs it may read."""
    if server:
        with signed_remote(server, key, "reading a task's work") as client:
            data = client.deliverable(task_id)
        names: dict[str, str] = {}
    else:
        from accord.market.settlement import deliverable_view

        if key is not None:
            fail("--key goes with --server URL (locally the home's keys read the work)", 2)
        require_task(task_id)
        with _market() as context:
            data = deliverable_view(context.market, task_id)
            names = {a.did: a.name for a in context.onboarding.registry.list()}
    if out_dir is not None:
        _write_result(out_dir, data)
    if as_json:
        emit(data)
        return
    say(f"[bold]{data['task_id']}[/]  {escape(data['title'])}  ({data['state']})")
    say(f"  deliverable sha256 {data['sha256']}")
    say(f"  assembled by {names.get(data['leader'], data['leader'])}")
    for entry in data["parts"]:
        producer = names.get(entry["producer"], entry["producer"])
        say(f"  [bold]{entry['part']}[/] ({entry['capability']}) by {producer}")
        if "output" in entry:
            shown = json.dumps(entry["output"], ensure_ascii=False)
            say(f"    {escape(shown if len(shown) <= 300 else shown[:300] + '…')}")
        else:
            say(f"    sealed: not paid for, or not settled yet (sha256 {entry['output_sha256']})")
    for part in data["missing"]:
        say(f"  [red]{part}: not delivered[/]")
    if data["checks"] is None:
        say("  checks: run at settlement (`accord task settle`)")
    else:
        for check in data["checks"]:
            mark = "[green]pass[/]" if check["passed"] else "[red]fail[/]"
            say(f"  {mark} {check['id']}: {escape(check['detail'])}")
    if out_dir is not None:
        say(f"  written to {out_dir}")


def _write_result(out_dir: Path, data: Mapping[str, Any]) -> None:
    """deliverable.json, one file per part shown (`<part>.json`; a python part's source as
    `<part>.py`), and each opening as `sealed/<commitment>`. Exits 1 when the folder cannot be
    written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "deliverable.json").write_text(json.dumps(data, indent=2, sort_keys=True))
        sealed = out_dir / "sealed"
        sealed.mkdir(exist_ok=True)
        for commitment, text in dict(data.get("openings") or {}).items():
            if is_commitment(commitment):
                (sealed / commitment).write_bytes(str(text).encode())
        for entry in data["parts"]:
            if "output" not in entry:
                continue
            output = entry["output"]
            if entry["capability"] == "python" and isinstance(output, str):
                (out_dir / f"{entry['part']}.py").write_text(output)
            else:
                (out_dir / f"{entry['part']}.json").write_text(
                    json.dumps(output, indent=2, sort_keys=True, ensure_ascii=False)
                )
    except OSError as exc:
        fail(f"cannot write the result to {out_dir}: {exc.strerror}")


@task_app.command("review")
def task_review(
    task_id: str,
    check: Annotated[
        str,
        typer.Option(help="The review check's id (or an inconclusive python check's, to contest)."),
    ],
    accept: Annotated[
        bool | None, typer.Option("--accept/--reject", help="Accept or reject the work.")
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(help="Why the work is rejected (needed with --reject: it opens a dispute)."),
    ] = None,
    as_agent: Annotated[
        str | None, typer.Option("--as", help="The requester (default: the operator).")
    ] = None,
    eth_key: Annotated[
        str | None,
        typer.Option(
            help=(
                "The account that funded the escrow (hex key or key file; default "
                "ACCORD_REQUESTER_ETH_KEY, or the devnet's requester): it bonds a dispute's fee "
                "the escrow does not hold."
            )
        ),
    ] = None,
    key: OwnKeyOption = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """The requester's verdict on a review check of the delivered work (once, in the window).
    A rejection needs --reason and opens a dispute a panel of independent agents decides; its
    fee (1/20 of the price) is held from the escrow beyond the price, bonded first from the
    requester's account where the escrow holds too little, and pays the panel from the
    loser's stake. Once every review check is accepted (or the spec has none) the task settles
    at once, without waiting for the window's end. A python check the service logged
    inconclusive (checks.previewed) is contested the same way, with --reject: a panel decides
    it. With --server, your own signed review.given (--key)."""
    if accept is None:
        fail("say --accept or --reject", 2)
    verdict = "accept" if accept else "reject"
    if verdict == "reject" and not (reason or "").strip():
        fail("a rejection needs --reason TEXT: it opens a dispute an evaluator decides", 2)
    if server:
        if as_agent is not None:
            fail("--as names a key the local store holds; with --server give --key FILE", 2)
        _review_remote(server, key, eth_key, task_id, check, verdict, reason, as_json)
        return
    if key is not None:
        fail("--key goes with --server URL", 2)
    require_task(task_id)
    if eth_key is not None and Path(eth_key).is_file():
        eth_key = _eth_key_file(Path(eth_key))
    with _market() as context:
        bonding = eth_key or os.environ.get("ACCORD_REQUESTER_ETH_KEY")
        if bonding is None and context.settings.managed_devnet:
            bonding = context.default_requester_key()
        index = context.market.review(
            context.signer_for(as_agent), task_id, check, verdict, reason, bond_key=bonding
        )
    if as_json:
        emit({"task_id": task_id, "check": check, "verdict": verdict, "index": index})
    else:
        say(f"[green]✓[/] {verdict}ed {check} of {task_id} (entry {index})")


def _review_remote(
    server: str,
    key: Path | None,
    eth_key: str | None,
    task_id: str,
    check: str,
    verdict: str,
    reason: str | None,
    as_json: bool,
) -> None:
    """`task review --server`: the requester's own signed `review.given`. An acceptance needs
    only --key; a rejection goes through the kit's `Requester.review`, which names the chain's
    head block (`after_block`, the seed of its panel) and bonds the dispute fee from the
    requester's own account (--eth-key FILE) where the escrow holds too little. Exits as
    `remote` does."""
    from accord.client import ApiError
    from accord.kit import Requester, Wallet
    from accord.ledger.errors import AccordError

    body: dict[str, Any] = {"task_id": task_id, "check": check, "verdict": verdict}
    with signed_remote(server, key, "a review") as client:
        if verdict == "reject":
            if eth_key is None or not Path(eth_key).is_file():
                fail(
                    "with --server a rejection is bonded from your own account: give "
                    "--eth-key FILE (the account that funded the escrow)",
                    2,
                )
            try:
                wallet = Wallet.from_key_file(Path(eth_key), client.get("/chain"), None)
                given = Requester(client, wallet).review(task_id, check, verdict, reason)
            except ApiError:
                raise
            except AccordError as exc:
                fail(str(exc), 1)
        else:
            entry = client.entry("review.given", task_id, body)
            given = client.request(
                "POST", f"/tasks/{quote(task_id, safe='')}/reviews", json={"entry": entry}
            )
    if as_json:
        emit(given)
    else:
        say(f"[green]✓[/] {verdict}ed {check} of {task_id}")


@task_app.command("file")
def task_file(
    task_id: str,
    digest: Annotated[str, typer.Argument(help="The file's sha256, as `task show` lists it.")],
) -> None:
    """Print one of the task's input files."""
    require_task(task_id)
    with _market() as context:
        text = context.market.file_text(context.market.task(task_id), digest)
    sys.stdout.write(text)


def hosted_withdraw(agent: str, as_json: bool) -> None:
    """`accord agent withdraw AGENT` without --server: an agent whose key this home holds takes
    its credit from the escrow contract to its payout account (the devnet covers its gas)."""
    with _market() as context:
        record = context.onboarding.registry.get(agent)
        key = context.onboarding.payout_key(record)
        from accord.market.escrow import address_of

        address = address_of(key)
        credit = context.escrow.credit(address)
        if credit == 0:
            raise MarketError(f"{agent} has no credit to withdraw at {address}")
        context.fund_gas(address, Wei(10**16))
        receipt = context.escrow.withdraw(key)
    if as_json:
        emit(
            {
                "agent": record.did,
                "address": address,
                "amount": str(credit),
                "tx_hash": receipt.tx_hash,
            }
        )
    else:
        say(f"[green]✓[/] {agent} withdrew {amount(credit)} to {address}")
