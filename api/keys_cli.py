"""`accord key new` and `accord devnet fund`: what a party holding its own keys needs before
its first request, with no accord home (neither command makes one).

    accord key new me.json --eth          # me.json (did:key) and me.eth.json (an account)
    accord devnet fund 0xABC… 1eth --server https://accord.example
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accord.api.output import JsonFlag, emit, fail, say

key_app = typer.Typer(help="Key files a party holds itself.", no_args_is_help=True)

ETH_SUFFIX = ".eth.json"
"""A did:key file `KEY`'s account key file is `KEY` with this suffix, as the kit's payout
account (`accord agent run`'s default `--eth-key`)."""


@key_app.command("new")
def key_new(
    path: Annotated[Path, typer.Argument(help="The did:key file to make (mode 0600).")],
    eth: Annotated[
        bool,
        typer.Option(
            "--eth",
            help=f"Also make an Ethereum account's key file beside it (PATH with {ETH_SUFFIX}): "
            "the account a requester deposits from, or an agent's payout account.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Make a did:key file (and with --eth an Ethereum key file) that only you hold: give it
    as --key (and --eth-key) to `accord task post --server`, `accord agent run`, … Never
    overwrites a file: an existing one is refused (exit 2) and nothing is made."""
    from accord.kit.wallet import WalletError, write_key_file
    from accord.ledger.signing import Ed25519Signer, write_keyfile

    eth_path = path.with_suffix(ETH_SUFFIX) if eth else None
    for target in (path, eth_path):
        if target is not None and target.exists():
            fail(f"{target} exists: a key file is never overwritten (choose another path)", 2)
    signer = Ed25519Signer.generate()
    try:
        write_keyfile(path, signer)
    except OSError as exc:
        fail(f"cannot make the key file {path}: {exc.strerror or exc}")
    data: dict[str, str | None] = {"did": signer.did, "key_file": str(path)}
    if eth_path is not None:
        try:
            data |= {"address": write_key_file(eth_path), "eth_key_file": str(eth_path)}
        except WalletError as exc:
            fail(str(exc))
    if as_json:
        emit(data)
        return
    say(f"[green]✓[/] {signer.did} in {path}")
    if eth_path is not None:
        say(f"  account {data['address']} in {eth_path}")


def devnet_fund(
    address: Annotated[str, typer.Argument(help="The account to fund (0x…).")],
    amount_text: Annotated[str, typer.Argument(metavar="AMOUNT", help="How much: 1eth, 5gwei.")],
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="ACCORD_SERVER",
            help="The service whose devnet to fund on (its GET /chain's RPC URL).",
        ),
    ] = None,
    rpc_url: Annotated[str | None, typer.Option(help="The devnet's JSON-RPC URL.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Add AMOUNT to an account's ether on a devnet (anvil_setBalance): the devnet of the
    service at --server, the node at --rpc-url, or this home's managed devnet. On any other
    chain (no anvil) it refuses (exit 1): fund the account from one of your own."""
    from eth_utils.address import is_address, to_checksum_address

    from accord.ledger.devnet import rpc_call
    from accord.market.errors import MarketError
    from accord.market.money import format_eth, parse_amount

    if not is_address(address):
        fail(f"{address!r} is not an Ethereum address (0x and 40 hex digits)", 2)
    account = to_checksum_address(address)
    try:
        wei = parse_amount(amount_text)
    except MarketError as exc:
        fail(str(exc), 2)
    url = rpc_url or _devnet_url(server)
    try:
        balance = int(str(rpc_call(url, "eth_getBalance", params=[account, "latest"])), 16)
    except (OSError, ValueError) as exc:
        fail(f"no chain answers at {url}: {exc}")
    try:
        rpc_call(url, "anvil_setBalance", params=[account, hex(balance + wei)])
    except (OSError, ValueError) as exc:
        fail(
            f"the node at {url} is not a devnet that mints ether (anvil_setBalance: {exc}): "
            f"send {format_eth(wei)} to {account} from an account of your own"
        )
    data = {"address": account, "funded": str(wei), "balance": str(balance + wei), "rpc_url": url}
    if as_json:
        emit(data)
        return
    say(f"[green]✓[/] {account} +{format_eth(wei)}: {format_eth(balance + wei)} on {url}")


def _devnet_url(server: str | None) -> str:
    """The RPC URL of the service's advertised chain, or of this home's managed devnet (no
    home is made). Exits 2 when there is none to fund on."""
    if server:
        from accord.client import AccordClient, ApiError

        try:
            with AccordClient(server) as client:
                chain = client.get("/chain")
        except ApiError as exc:
            fail(str(exc), 2 if exc.status is None or exc.status < 500 else 1)
        if not chain.get("rpc_url"):
            fail(
                f"{server} advertises no RPC URL for chain {chain.get('chain_id')}: give --rpc-url"
            )
        return str(chain["rpc_url"])
    from accord.ledger.settings import Settings
    from accord.ledger.wiring import devnet_for

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), 2)
    if not settings.managed_devnet:
        fail("ACCORD_RPC_URL names a chain accord does not manage: give --rpc-url of a devnet", 2)
    return devnet_for(settings).rpc_url
