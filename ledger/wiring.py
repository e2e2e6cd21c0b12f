"""Wiring at the edge: settings in, a working `Ledger` (store, operator key, chain) out.

This is the only module of the ledger that reads files, starts processes or opens sockets on
the caller's behalf; the CLI and the API go through it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from accord.ledger.database import make_engine
from accord.ledger.devnet import (
    Devnet,
    DevnetInfo,
    DevnetRecord,
    check_record,
    observe,
    read_record,
    write_record,
)
from accord.ledger.errors import ChainError, DevnetError, HomeError
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, load_or_create_keyfile
from accord.ledger.store import LogStore

if TYPE_CHECKING:
    from accord.ledger.chain import AnchorChain
    from accord.ledger.service import Ledger

OPERATOR_KEYFILE = "operator.json"


def utc_now() -> datetime:
    return datetime.now(UTC)


class OffsetClock:
    """The real time moved on by the seconds a file holds (ACCORD_TEST_CLOCK, for tests): a
    test advances it past a window instead of sleeping through it, so a slow machine never
    makes a bid late. Read on every call; it never goes back (a smaller offset than one read
    before is ignored), and a file that is missing or does not parse counts as no offset yet.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0.0

    def __call__(self) -> datetime:
        try:
            offset = float(self.path.read_text().strip() or 0)
        except (OSError, ValueError):
            offset = 0.0
        if offset == offset and offset != float("inf"):  # neither NaN nor infinite
            self._offset = max(self._offset, offset)
        return datetime.now(UTC) + timedelta(seconds=self._offset)


def clock_of(settings: Settings) -> Callable[[], datetime]:
    """The clock the ledger and the market read: the real time, or the test clock
    ACCORD_TEST_CLOCK names (`OffsetClock`)."""
    if settings.test_clock_file is None:
        return utc_now
    return OffsetClock(settings.test_clock_file)


WAKE_MARGIN_S = 0.05
"""`wait_until` sleeps this much past the moment, so the clock reads it on waking."""


def wait_until(
    moment: datetime,
    clock: Callable[[], datetime] = utc_now,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Sleep until `clock()` reads `moment` or later; returns the seconds slept (0 when it
    already does). Each sleep lasts the whole time left (never a busy loop); a wake-up before
    `moment` (the clock was set back meanwhile) sleeps again for what is then left."""
    slept = 0.0
    while (left := (moment - clock()).total_seconds()) > 0:
        sleep(left + WAKE_MARGIN_S)
        slept += left + WAKE_MARGIN_S
    return slept


HOME_MODE = 0o700
FILE_MODE = 0o600
_SQLITE_PREFIX = "sqlite:///"


def prepare_home(settings: Settings, *, create: bool = True) -> Path:
    """ACCORD_HOME as a private folder: created 0700 (under umask 077) when missing, an
    existing one of this user's tightened to 0700, and the SQLite database of the settings
    (with its -wal and -shm files, which SQLite creates with the database's mode) 0600.

    With `create` False (read commands) nothing is created: a missing home, or a missing
    database in it, raises HomeError with `missing` set. Raises HomeError when the path is a
    file, cannot be created, belongs to another user or cannot be written.
    """
    home = settings.home
    if not home.exists():
        if not create and sqlite_path(settings) is None:
            return home  # a read of another database needs no home
        if not create:
            raise HomeError(
                str(home),
                f"there is no accord home at {home} yet (set ACCORD_HOME, or create one with "
                "`accord agent new` or `accord ledger append`)",
                missing=True,
            )
        previous = os.umask(0o077)
        try:
            home.mkdir(parents=True, exist_ok=True, mode=HOME_MODE)
        except OSError as exc:
            raise HomeError(
                str(home), f"cannot create ACCORD_HOME {home}: {exc.strerror or exc}"
            ) from exc
        finally:
            os.umask(previous)
    if not home.is_dir():
        raise HomeError(str(home), f"ACCORD_HOME {home} is not a folder")
    try:
        status = home.stat()
        if status.st_uid != os.getuid():
            raise HomeError(
                str(home),
                f"ACCORD_HOME {home} belongs to another user (uid {status.st_uid}): "
                "use a folder of your own",
            )
        if not os.access(home, os.W_OK | os.X_OK):
            raise HomeError(str(home), f"ACCORD_HOME {home} is not writable by this user")
        if stat.S_IMODE(status.st_mode) & 0o077:
            home.chmod(HOME_MODE)
    except OSError as exc:
        raise HomeError(str(home), f"cannot use ACCORD_HOME {home}: {exc.strerror or exc}") from exc
    database = sqlite_path(settings)
    if database is not None:
        _private_database(database, create=create, home=home)
    return home


def sqlite_path(settings: Settings) -> Path | None:
    """The SQLite file the settings name, or None for another database."""
    if not settings.db_url.startswith(_SQLITE_PREFIX):
        return None
    name = settings.db_url.removeprefix(_SQLITE_PREFIX).split("?", 1)[0]
    return None if name in ("", ":memory:") else Path(name)


def _private_database(database: Path, *, create: bool, home: Path) -> None:
    """The database file made 0600 before SQLite opens it (so -wal and -shm follow), and
    existing ones tightened. Raises HomeError."""
    try:
        if not database.exists():
            if not create:
                raise HomeError(
                    str(home),
                    f"there is no accord database at {database} yet: nothing has been logged",
                    missing=True,
                )
            if not database.parent.is_dir():
                return  # SQLite reports the missing folder when it opens the URL
            descriptor = os.open(database, os.O_CREAT | os.O_WRONLY, FILE_MODE)
            os.close(descriptor)
        for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            if path.exists() and stat.S_IMODE(path.stat().st_mode) != FILE_MODE:
                path.chmod(FILE_MODE)
    except OSError as exc:
        raise HomeError(
            str(home), f"cannot make the database {database} private: {exc.strerror or exc}"
        ) from exc


def operator_signer(settings: Settings) -> Ed25519Signer:
    """The network operator's Ed25519 key, created on first use under `keys/`.

    Raises HomeError when ACCORD_HOME cannot be used (see `prepare_home`).
    """
    prepare_home(settings)
    return load_or_create_keyfile(settings.keys_dir / OPERATOR_KEYFILE)


def open_store(settings: Settings, *, create: bool = True) -> LogStore:
    """The log database named by the settings.

    With `create` False (read commands) no home or database is created. Raises HomeError
    (see `prepare_home`) and StoreError when the database cannot be opened.
    """
    prepare_home(settings, create=create)
    return LogStore(make_engine(settings.db_url), settings.log_id)


def devnet_for(settings: Settings) -> Devnet:
    """The managed devnet: on ACCORD_DEVNET_PORT when it is set, else on the port
    `accord devnet up` recorded in ACCORD_HOME, else on the default port.

    Raises DevnetError for a record that does not parse.
    """
    port = settings.devnet_port
    if not settings.devnet_port_set:
        record = read_record(settings.devnet_record_file)
        if record is not None:
            port = record.port
    return Devnet(settings.devnet_dir, port)


def record_devnet(settings: Settings, registry: str | None) -> DevnetRecord:
    """Record the running devnet (port, RPC URL, chain id, head block, the registry's code
    hash) in ACCORD_HOME, for later commands. Raises DevnetError."""
    devnet = devnet_for(settings)
    record = observe(devnet.rpc_url, devnet.port, registry)
    write_record(settings.devnet_record_file, record)
    return record


def check_recorded_devnet(settings: Settings) -> DevnetRecord | None:
    """Check that the managed devnet is the chain `accord devnet up` recorded (its chain id,
    history and registry code); None when accord manages no devnet, nothing is recorded, or
    the devnet is not running (`connect_chain` then says so).

    Raises ChainMismatchError naming what differs, DevnetError when it does not answer.
    """
    if settings.rpc_url is not None:
        return None
    record = read_record(settings.devnet_record_file)
    if record is None:
        return None
    devnet = devnet_for(settings)
    if not devnet.status().running:
        return None
    check_record(record, devnet.rpc_url)
    return record


@contextlib.contextmanager
def _stopped_on_failure(devnet: Devnet, info: DevnetInfo) -> Iterator[None]:
    """Stop the devnet when the block fails, if this `up()` started it (a reused one was
    running before and keeps running): a failed start leaves nothing behind."""
    try:
        yield
    except BaseException:
        if not info.reused:
            with contextlib.suppress(DevnetError):
                devnet.down()
        raise


@dataclass(frozen=True)
class DevnetStart:
    """What `start_devnet` did: the devnet, the registry on it, and what was recorded."""

    info: DevnetInfo
    chain: AnchorChain
    record: DevnetRecord


def start_devnet(settings: Settings) -> DevnetStart:
    """`accord devnet up`: start (or reuse) the managed devnet, check it is the recorded
    chain, deploy the registry once, and record the devnet in ACCORD_HOME.

    A devnet this call started is stopped again when any later step fails, so a failed start
    leaves no anvil running. Raises ChainMismatchError when the chain is not the recorded one
    (nothing is deployed on it), DevnetError, ChainUnavailableError, DeploymentError.
    """
    devnet = devnet_for(settings)
    info = devnet.up()
    with _stopped_on_failure(devnet, info):
        check_recorded_devnet(settings)
        chain = connect_chain(settings, start_devnet=False)
        devnet.dump_state()  # the recorded head is on disk before it is recorded
        record = record_devnet(settings, chain.registry_address())
    return DevnetStart(info, chain, record)


def connect_chain(
    settings: Settings,
    *,
    start_devnet: bool = True,
    started: Callable[[DevnetInfo], None] | None = None,
) -> AnchorChain:
    """The anchor registry on the configured chain, deployed once and checked by code hash.

    With no ACCORD_RPC_URL the managed devnet is used (started when `start_devnet`; stopped
    again if this call started it and the registry then fails). `started` is told of a
    devnet this call started (not of one it found running), once the registry is there.
    Raises ChainUnavailableError, DeploymentError, DevnetError.
    """
    from accord.ledger.chain import DEVNET_OPERATOR_KEY, Web3AnchorChain, ensure_registry

    if settings.rpc_url is not None:
        if settings.operator_eth_key is None:
            raise ChainError(
                "ACCORD_RPC_URL is set but ACCORD_OPERATOR_ETH_KEY is not: "
                "give the hex private key of the account that pays for anchors"
            )
        deployment = ensure_registry(
            settings.rpc_url,
            settings.operator_eth_key,
            settings.deployment_file,
            fee_policy=settings.fee_policy,
        )
        return Web3AnchorChain(
            settings.rpc_url,
            settings.operator_eth_key,
            deployment.address,
            fee_policy=settings.fee_policy,
        )
    devnet = devnet_for(settings)
    if not start_devnet:
        if not devnet.status().running:
            raise DevnetError("the devnet is not running; start it with `accord devnet up`")
        deployment = ensure_registry(
            devnet.rpc_url,
            DEVNET_OPERATOR_KEY,
            settings.deployment_file,
            fee_policy=settings.fee_policy,
        )
        return Web3AnchorChain(
            devnet.rpc_url, DEVNET_OPERATOR_KEY, deployment.address, fee_policy=settings.fee_policy
        )
    info = devnet.up()
    with _stopped_on_failure(devnet, info):
        deployment = ensure_registry(
            devnet.rpc_url,
            DEVNET_OPERATOR_KEY,
            settings.deployment_file,
            fee_policy=settings.fee_policy,
        )
        chain = Web3AnchorChain(
            devnet.rpc_url, DEVNET_OPERATOR_KEY, deployment.address, fee_policy=settings.fee_policy
        )
    if started is not None and not info.reused:
        started(info)
    return chain


def open_ledger(settings: Settings, chain: AnchorChain | None = None) -> Ledger:
    """A ledger over the configured store, anchoring through `chain` when one is given."""
    # imported here: a read command opens the store alone and never loads the service
    from accord.ledger.service import Ledger

    store = open_store(settings)
    operator = operator_signer(settings)
    clock = clock_of(settings)
    anchorer = None
    if chain is not None:
        # the chain client (web3, eth_account: over a second to import): only with a chain
        from accord.ledger.anchoring import Anchorer

        anchorer = Anchorer(
            store,
            chain,
            operator,
            clock,
            every_entries=settings.anchor_every_entries,
            every_seconds=settings.anchor_every_seconds,
            confirmations=settings.confirmations,
            replace_after_s=settings.replace_after_seconds,
        )
    return Ledger(store, operator, clock, anchorer)
