"""`accord task …` and `accord bid …`: the market from the command line.

Posting escrows the budget on chain (the managed devnet unless ACCORD_RPC_URL); bids are sealed
by commit-reveal, the salt kept in `$ACCORD_HOME/bids/` (mode 0600) between the two steps.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from api.client import SERVER_ENV, AccordClient, ApiError
from identity.errors import IdentityError
from identity.onboarding import open_onboarding
from ledger.errors import ChainError, LedgerError, MalformedError
from ledger.runtime import open_store, operator_signer, utc_now
from ledger.service import Ledger
from ledger.settings import Settings
from market import sealed
from market.auction import PAYMENT_RULES
from market.errors import BidRejected, LimitError, MarketError, TaskError
from market.money import Wei, format_eth, parse_amount
from market.runtime import MarketContext, open_market
from market.service import Market
from market.tasks import MAX_WINDOW, TaskSpec

task_app = typer.Typer(help="Paid tasks: post, show, list, bids, award.", no_args_is_help=True)
bid_app = typer.Typer(help="Sealed bids by hand: commit, then reveal.", no_args_is_help=True)

out = Console(emoji=False, highlight=False)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print data as JSON.")]
ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar=SERVER_ENV,
        help="Read from the accord service at this URL instead of the local store.",
    ),
]
_DURATION = re.compile(r"^\s*([0-9]+)\s*(s|m|h|d)?\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MAX_DURATION_TEXT = 40


def parse_duration(text: str, limit: timedelta = MAX_WINDOW) -> timedelta:
    """`30s`, `5m`, `2h`, `1d` or bare seconds, at most `limit` (a task's longest window).

    Raises TaskError for anything else, LimitError beyond `limit`.
    """
    match = _DURATION.match(text[: _MAX_DURATION_TEXT + 1])
    if match is None or len(text) > _MAX_DURATION_TEXT:
        raise TaskError(
            f"{text[:_MAX_DURATION_TEXT]!r} is not a duration: write e.g. 30s, 5m, 2h or 1d"
        )
    seconds = int(match.group(1)) * _SECONDS[match.group(2) or "s"]
    if seconds > limit.total_seconds():
        raise LimitError(
            f"{text.strip()} is longer than the {_days(limit)} a window may last",
            int(limit.total_seconds()),
        )
    return timedelta(seconds=seconds)


def _days(span: timedelta) -> str:
    return (
        f"{span.days} days" if span.days and not span.seconds else f"{int(span.total_seconds())} s"
    )


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextmanager
def _market() -> Iterator[MarketContext]:
    """The market over the configured ledger and chain; expected failures become one line."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        _fail(str(exc), code=2)
    try:
        yield open_market(settings)
    except BidRejected as exc:
        _fail(f"bid rejected ({exc.reason}): {str(exc).split(': ', 1)[-1]}")
    except MalformedError as exc:
        _fail(str(exc), code=2)
    except MarketError as exc:
        _fail(str(exc), code=2 if type(exc).__name__ in _INPUT_ERRORS else 1)
    except (LedgerError, IdentityError) as exc:
        _fail(str(exc))


_INPUT_ERRORS = {"AmountError", "TaskError", "LimitError"}


class _ReadOnlyEscrow:
    """The escrow side of a market opened to read: read commands never start or reach a chain,
    so any escrow action refuses (with ChainError) instead of sending anything."""

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise ChainError("this command only reads the log: it does not reach the chain")

    open = refund_to_requester = requester_address = deposit_of = settle = chain_id = _refuse


@contextmanager
def _read_market() -> Iterator[Market]:
    """The market over the configured log, to read: it creates no home, starts no devnet and
    reaches no chain. Expected failures become one line (an unknown task is exit 2)."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        _fail(str(exc), code=2)
    try:
        store = open_store(settings, create=False)
        ledger = Ledger(store, operator_signer(settings), utc_now)
        yield Market(ledger, open_onboarding(settings, ledger), _ReadOnlyEscrow())
    except MalformedError as exc:
        _fail(str(exc), code=2)
    except MarketError as exc:
        _fail(str(exc), code=2 if type(exc).__name__ in _INPUT_ERRORS else 1)
    except (LedgerError, IdentityError) as exc:
        _fail(str(exc))


def _task_view(market: Market, task: Any) -> dict[str, Any]:
    data: dict[str, Any] = task.to_json()
    data["state"] = market.state(task)
    return data


@contextmanager
def remote(server: str) -> Iterator[AccordClient]:
    """A client of the service at `server`; its failures become one line (exit 2 when the
    request was at fault: an unknown object or bad input, else 1)."""
    try:
        with AccordClient(server) as client:
            yield client
    except ApiError as exc:
        bad_url = not server.startswith(("http://", "https://"))
        code = 2 if bad_url or exc.status in (400, 404, 422) else 1
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(code) from None


# -- tasks -------------------------------------------------------------------------------------


@task_app.command("post")
def task_post(
    title: Annotated[str, typer.Option(help="What the task is.")],
    budget: Annotated[str, typer.Option(help="The most it pays: 0.5eth, 20gwei, 1000wei.")],
    capability: Annotated[
        list[str], typer.Option(help="A capability every bidder must hold (repeat).")
    ],
    description: Annotated[str, typer.Option(help="What the deliverable must contain.")] = "",
    bidding: Annotated[str, typer.Option(help="How long sealed bids are taken.")] = "30s",
    reveal: Annotated[str, typer.Option(help="How long bids are revealed after that.")] = "30s",
    delivery: Annotated[str, typer.Option(help="Time to deliver after the award.")] = "10m",
    rule: Annotated[str, typer.Option(help="second-score or first-score.")] = "second-score",
    as_agent: Annotated[
        str | None, typer.Option("--as", help="Post as this agent (default: the operator).")
    ] = None,
    eth_key: Annotated[
        str | None,
        typer.Option(
            help="Hex private key of the account paying the escrow "
            "(default: ACCORD_REQUESTER_ETH_KEY, or a funded devnet account)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Post a paid task; its budget is escrowed on chain in the same step."""
    if rule not in PAYMENT_RULES:
        _fail(f"--rule must be one of {', '.join(PAYMENT_RULES)}", code=2)
    with _market() as market:
        spec = TaskSpec(
            title=title,
            description=description,
            capabilities=tuple(capability),
            budget=parse_amount(budget),
            bidding=parse_duration(bidding),
            reveal=parse_duration(reveal),
            delivery=parse_duration(delivery),
            rule=rule,  # checked against PAYMENT_RULES above
        )
        requester = market.signer_for(as_agent)
        key = (
            eth_key or os.environ.get("ACCORD_REQUESTER_ETH_KEY") or market.default_requester_key()
        )
        task = market.market.post(requester, spec, requester_key=key)
        data = _task_json(market, task)
    if as_json:
        _emit(data)
        return
    out.print(f"[green]✓[/] posted {task.task_id}: {title!r}, {format_eth(spec.budget)} escrowed")
    out.print(
        f"  bids until {task.bidding_ends:%H:%M:%S}, reveals until {task.reveal_ends:%H:%M:%S}"
    )


def _task_json(context: MarketContext, task: Any) -> dict[str, Any]:
    data: dict[str, Any] = task.to_json()
    data["state"] = context.market.state(task)
    return data


@task_app.command("show")
def task_show(task_id: str, as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """One task: its spec, windows, state, and the winner once awarded."""
    if server:
        with remote(server) as client:
            data = client.task(task_id)
    else:
        with _read_market() as market:
            data = _task_view(market, market.task(task_id))
    if as_json:
        _emit(data)
        return
    spec = data["spec"]
    out.print(f"[bold]{data['id']}[/]  {escape(spec['title'])}  ({data['state']})")
    out.print(f"  requester   {data['requester']}")
    out.print(
        f"  budget      {format_eth(int(spec['budget']))} "
        f"({'escrowed' if data['escrowed'] else 'not escrowed'})"
    )
    out.print(f"  needs       {', '.join(spec['capabilities'])}")
    out.print(f"  rule        {spec['rule']}")
    out.print(f"  bidding     until {data['bidding_ends']}")
    out.print(f"  revealing   until {data['reveal_ends']}")
    if data.get("winner") is not None and data.get("price") is not None:
        out.print(f"  winner      {data['winner']} at {format_eth(int(data['price']))}")


@task_app.command("list")
def task_list(as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """Every task with its state."""
    if server:
        with remote(server) as client:
            rows = client.tasks()
    else:
        with _read_market() as market:
            rows = [_task_view(market, task) for task in market.tasks()]
    if as_json:
        _emit(rows)
        return
    table = Table(title=f"{len(rows)} tasks", title_justify="left")
    for column in ("id", "state", "title", "budget", "capabilities"):
        table.add_column(column, overflow="fold")
    for row in rows:
        spec = row["spec"]
        table.add_row(
            row["id"],
            row["state"],
            spec["title"],
            format_eth(int(spec["budget"])),
            ", ".join(spec["capabilities"]),
        )
    out.print(table)


@task_app.command("cancel")
def task_cancel(
    task_id: str,
    as_agent: Annotated[
        str | None, typer.Option("--as", help="The requester (default: the operator).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """End a posted task whose escrow never opened (the requester only)."""
    with _market() as market:
        task = market.market.cancel(market.signer_for(as_agent), task_id)
        data = _task_json(market, task)
    if as_json:
        _emit(data)
        return
    out.print(f"[green]✓[/] cancelled {task.task_id}: nothing was escrowed, nothing is owed")


@task_app.command("bids")
def task_bids(task_id: str, as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """Commitments while sealed; prices once revealed."""
    if server:
        with remote(server) as client:
            bids = client.bids(task_id)
    else:
        with _read_market() as market:
            bids = [bid.to_json() for bid in market.bids(task_id)]
    if as_json:
        _emit(bids)
        return
    table = Table(title=f"{len(bids)} bids on {task_id}", title_justify="left")
    for column in ("bidder", "commitment", "price"):
        table.add_column(column, overflow="fold")
    for bid in bids:
        price = format_eth(int(bid["price"])) if bid["price"] is not None else "sealed"
        table.add_row(bid["bidder"], bid["commitment"][:16] + "…", price)
    out.print(table)


@task_app.command("award")
def task_award(task_id: str, as_json: JsonFlag = False) -> None:
    """Clear the auction once the windows are over (or expire the task and refund)."""
    with _market() as context:
        outcome = context.market.award(task_id)
    winner = outcome.winner
    data = {
        "task": task_id,
        "winner": None if winner is None else winner.bidder,
        "price": str(outcome.price),
        "rule": outcome.rule,
        "bids": len(outcome.ranking),
        "expired": winner is None,
    }
    if as_json:
        _emit(data)
    elif winner is None:
        out.print(f"no valid bid: {task_id} expired and its escrow was refunded")
    else:
        out.print(
            f"[green]✓[/] {task_id} awarded to {winner.bidder} at {format_eth(outcome.price)}"
        )


# -- bids --------------------------------------------------------------------------------------


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
    """Send a sealed commitment; the price and salt stay on this machine until the reveal."""
    with _market() as context:
        amount: Wei = parse_amount(price)
        signer = context.signer_for(agent)
        path = _bid_file(context.settings, task_id, signer.did)
        if path.exists():
            raise BidRejected("second-bid", f"{agent} already committed to {task_id} from here")
        salt = secrets.token_bytes(32)
        index = context.market.commit(sealed.commit_bid(signer, task_id, amount, salt))
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"task": task_id, "price": str(amount), "salt": salt.hex()}, handle)
    if as_json:
        _emit({"task": task_id, "bidder": signer.did, "index": index})
    else:
        out.print(f"[green]✓[/] sealed bid committed to {task_id} (entry {index}); reveal later")


@bid_app.command("reveal")
def bid_reveal(
    task_id: str,
    agent: Annotated[str, typer.Option(help="The bidding agent (name or DID).")],
    as_json: JsonFlag = False,
) -> None:
    """Reveal the price and salt committed from this machine."""
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
        _emit({"task": task_id, "bidder": signer.did, "price": saved["price"], "index": index})
    else:
        out.print(
            f"[green]✓[/] revealed {format_eth(int(saved['price']))} on {task_id} (entry {index})"
        )


@task_app.command("settle")
def task_settle(task_id: str, as_json: JsonFlag = False) -> None:
    """Pay a delivered task's team by Shapley value through the escrow (once; safe to rerun)."""
    from market.settlement import settle_task

    with _market() as context:
        outcome = settle_task(context.market, context.onboarding, task_id)
        names = {a.did: a.name for a in context.onboarding.registry.list()}
    if as_json:
        _emit(
            {
                "task": task_id,
                "amount": str(outcome.amount),
                "refund": str(outcome.refund),
                "payouts": {p: str(w) for p, w in outcome.payouts.items()},
                "payees": dict(outcome.payees),
                "shapley": dict(outcome.values),
                "tx_hash": outcome.tx_hash,
                "already_settled": outcome.already,
            }
        )
        return
    verb = "was already settled" if outcome.already else "settled on chain"
    out.print(f"[green]✓[/] {task_id} {verb}: {format_eth(outcome.amount)} to the team")
    for player, payout in sorted(outcome.payouts.items(), key=lambda kv: -kv[1]):
        share = outcome.values.get(player, "0/1")
        out.print(f"  {names.get(player, player):<10} {format_eth(payout):>24}   Shapley {share}")
    out.print(f"  back to the requester: {format_eth(outcome.refund)}")


def agent_withdraw(
    agent: Annotated[str, typer.Argument(help="The agent (name or DID) whose credit to take.")],
    as_json: JsonFlag = False,
) -> None:
    """Withdraw an agent's credit from the escrow contract to its payout account."""
    with _market() as context:
        record = context.onboarding.registry.get(agent)
        key = context.onboarding.payout_key(record)
        from market.escrow import address_of

        address = address_of(key)
        credit = context.escrow.credit(address)
        if credit == 0:
            raise MarketError(f"{agent} has no credit to withdraw at {address}")
        context.fund_gas(address, Wei(10**16))
        receipt = context.escrow.withdraw(key)
    if as_json:
        _emit(
            {
                "agent": record.did,
                "address": address,
                "amount": str(credit),
                "tx_hash": receipt.tx_hash,
            }
        )
    else:
        out.print(f"[green]✓[/] {agent} withdrew {format_eth(credit)} to {address}")
