"""Wiring at the edge: settings in, a working `Ledger` (store, operator key, chain) out.

This is the only module of the ledger that reads files, starts processes or opens sockets on
the caller's behalf; the CLI and the API go through it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ledger.anchoring import Anchorer
from ledger.chain import DEVNET_OPERATOR_KEY, AnchorChain, Web3AnchorChain, ensure_registry
from ledger.devnet import Devnet
from ledger.errors import ChainError, DevnetError
from ledger.service import Ledger
from ledger.settings import Settings
from ledger.signing import Ed25519Signer, load_or_create_keyfile
from ledger.store import LogStore, make_engine

OPERATOR_KEYFILE = "operator.json"


def utc_now() -> datetime:
    return datetime.now(UTC)


def operator_signer(settings: Settings) -> Ed25519Signer:
    """The network operator's Ed25519 key, created on first use under `keys/`."""
    settings.home.mkdir(parents=True, exist_ok=True)
    return load_or_create_keyfile(settings.keys_dir / OPERATOR_KEYFILE)


def open_store(settings: Settings) -> LogStore:
    """The log database named by the settings (raises StoreError when it cannot be opened)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    return LogStore(make_engine(settings.db_url), settings.log_id)


def devnet_for(settings: Settings) -> Devnet:
    return Devnet(settings.devnet_dir, settings.devnet_port)


def connect_chain(settings: Settings, *, start_devnet: bool = True) -> AnchorChain:
    """The anchor registry on the configured chain, deployed once and checked by code hash.

    With no ACCORD_RPC_URL the managed devnet is used (started when `start_devnet`).
    Raises ChainUnavailableError, DeploymentError, DevnetError.
    """
    if settings.rpc_url is not None:
        if settings.operator_eth_key is None:
            raise ChainError(
                "ACCORD_RPC_URL is set but ACCORD_OPERATOR_ETH_KEY is not: "
                "give the hex private key of the account that pays for anchors"
            )
        rpc_url, key = settings.rpc_url, settings.operator_eth_key
    else:
        devnet = devnet_for(settings)
        if start_devnet:
            devnet.up()
        elif not devnet.status().running:
            raise DevnetError("the devnet is not running; start it with `accord devnet up`")
        rpc_url, key = devnet.rpc_url, DEVNET_OPERATOR_KEY
    deployment = ensure_registry(rpc_url, key, settings.deployment_file)
    return Web3AnchorChain(rpc_url, key, deployment.address)


def open_ledger(settings: Settings, chain: AnchorChain | None = None) -> Ledger:
    """A ledger over the configured store, anchoring through `chain` when one is given."""
    store = open_store(settings)
    operator = operator_signer(settings)
    anchorer = None
    if chain is not None:
        anchorer = Anchorer(
            store,
            chain,
            operator,
            utc_now,
            every_entries=settings.anchor_every_entries,
            every_seconds=settings.anchor_every_seconds,
            confirmations=settings.confirmations,
        )
    return Ledger(store, operator, utc_now, anchorer)
