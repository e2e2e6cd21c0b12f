"""Where accord keeps its state and which chain it talks to, read once from the environment.

Nothing here does I/O at import; `Settings.from_env()` reads variables, it creates no files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from urllib.parse import urlsplit

from accord.ledger.fees import DEFAULT_MAX_FEE_GWEI, WEI_PER_GWEI, FeePolicy

DEFAULT_HOME = ".accord"
DEFAULT_LOG_ID = "accord-main"
DEFAULT_DEVNET_PORT = 8545
DEFAULT_ANCHOR_EVERY_ENTRIES = 1000
DEFAULT_ANCHOR_EVERY_SECONDS = 60.0
#: Set to 1 to let agents be reached at loopback, link-local and private addresses.
ALLOW_PRIVATE_AGENTS = "ACCORD_ALLOW_PRIVATE_AGENTS"
TEST_CLOCK = "ACCORD_TEST_CLOCK"
#: Set to 1 beside ACCORD_TEST_CLOCK to say "this is a test" (tests/conftest.py sets it): alone,
#: a test clock is refused, so a stray variable never moves a real service's market clock.
ALLOW_TEST_CLOCK = "ACCORD_ALLOW_TEST_CLOCK"
DEFAULT_CONFIRMATIONS = 0
DEFAULT_REPLACE_AFTER_SECONDS = 120.0
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8600"


@dataclass(frozen=True)
class Settings:
    """Resolved configuration.

    home: the folder for the SQLite database, keys, devnet state and deployment record.
    db_url: SQLAlchemy URL of the log database (SQLite under `home` unless ACCORD_DB_URL).
    rpc_url: an external EVM chain; None means accord manages a local anvil devnet.
    operator_eth_key: hex private key that pays for anchors on an external chain.
    allow_private_agents: agents may be registered and reached at loopback, link-local and
    private addresses (ACCORD_ALLOW_PRIVATE_AGENTS=1: a local demo, tests); otherwise only
    at public ones.
    confirmations: blocks on top of a transaction's own before accord counts it confirmed.
    max_fee_wei: the highest maxFeePerGas accord signs (ACCORD_MAX_FEE_GWEI, default 500).
    priority_fee_wei: the tip (ACCORD_PRIORITY_FEE_GWEI); None: the node's
    eth_maxPriorityFeePerGas.
    replace_after_seconds: a transaction unmined this long with fees under the market is
    replaced at its nonce with bumped fees (ACCORD_REPLACE_AFTER, default 120).
    public_url: the base URL at which others reach this service (ACCORD_PUBLIC_URL, no
    trailing slash); the URLs it puts in credentials, such as the status list's, start with it.
    public_rpc_url: the JSON-RPC URL the service tells requesters' wallets to send their
    deposits to (ACCORD_PUBLIC_RPC_URL; `GET /chain`). None: the managed devnet's own URL, and
    on an external chain none at all (ACCORD_RPC_URL may carry the operator's provider key).
    test_clock_file: for tests only (ACCORD_TEST_CLOCK, refused unless ACCORD_ALLOW_TEST_CLOCK=1
    says this is a test): a file holding how many seconds the market's clock runs ahead of the
    real time, which a test moves on instead of waiting for a window to close
    (`accord.ledger.wiring.clock_of`); None: the real time.
    """

    home: Path
    db_url: str
    rpc_url: str | None
    operator_eth_key: str | None
    log_id: str
    devnet_port: int
    anchor_every_entries: int
    anchor_every_seconds: float
    allow_private_agents: bool = False
    confirmations: int = DEFAULT_CONFIRMATIONS
    max_fee_wei: int = DEFAULT_MAX_FEE_GWEI * WEI_PER_GWEI
    priority_fee_wei: int | None = None
    replace_after_seconds: float = DEFAULT_REPLACE_AFTER_SECONDS
    public_url: str = DEFAULT_PUBLIC_URL
    devnet_port_set: bool = False
    """Whether ACCORD_DEVNET_PORT was set; if not, the port `devnet up` recorded is used."""
    test_clock_file: Path | None = None
    public_rpc_url: str | None = None

    @property
    def keys_dir(self) -> Path:
        return self.home / "keys"

    @property
    def devnet_dir(self) -> Path:
        return self.home / "devnet"

    @property
    def devnet_record_file(self) -> Path:
        return self.home / "devnet.json"

    @property
    def deployment_file(self) -> Path:
        return self.home / "deployment.json"

    @property
    def managed_devnet(self) -> bool:
        return self.rpc_url is None

    @property
    def fee_policy(self) -> FeePolicy:
        """The fee ceiling and tip every transaction accord signs follows."""
        return FeePolicy(ceiling=self.max_fee_wei, default_tip=self.priority_fee_wei)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ACCORD_* variables; raises ValueError naming the variable that does not parse."""
        env = os.environ if environ is None else environ
        max_fee = _gwei(env, "ACCORD_MAX_FEE_GWEI", minimum_wei=1)
        tip = _gwei(env, "ACCORD_PRIORITY_FEE_GWEI", minimum_wei=0)
        ceiling = DEFAULT_MAX_FEE_GWEI * WEI_PER_GWEI if max_fee is None else max_fee
        if tip is not None and tip > ceiling:
            raise ValueError(
                f"ACCORD_PRIORITY_FEE_GWEI ({env['ACCORD_PRIORITY_FEE_GWEI']}) must not be above "
                f"ACCORD_MAX_FEE_GWEI ({ceiling / WEI_PER_GWEI:g})"
            )
        home = Path(env.get("ACCORD_HOME", DEFAULT_HOME)).expanduser().absolute()
        db_url = env.get("ACCORD_DB_URL") or f"sqlite:///{home / 'accord.db'}"
        return cls(
            home=home,
            db_url=db_url,
            rpc_url=_url(env, "ACCORD_RPC_URL"),
            operator_eth_key=env.get("ACCORD_OPERATOR_ETH_KEY") or None,
            log_id=env.get("ACCORD_LOG_ID", DEFAULT_LOG_ID),
            devnet_port=_int(env, "ACCORD_DEVNET_PORT", DEFAULT_DEVNET_PORT),
            anchor_every_entries=_int(env, "ACCORD_ANCHOR_EVERY", DEFAULT_ANCHOR_EVERY_ENTRIES),
            anchor_every_seconds=_float(
                env, "ACCORD_ANCHOR_INTERVAL", DEFAULT_ANCHOR_EVERY_SECONDS
            ),
            allow_private_agents=env_flag(env, ALLOW_PRIVATE_AGENTS),
            confirmations=_int(env, "ACCORD_CONFIRMATIONS", DEFAULT_CONFIRMATIONS, minimum=0),
            max_fee_wei=ceiling,
            priority_fee_wei=tip,
            replace_after_seconds=_float(
                env, "ACCORD_REPLACE_AFTER", DEFAULT_REPLACE_AFTER_SECONDS, minimum=0.0
            ),
            public_url=_public_url(env, "ACCORD_PUBLIC_URL"),
            devnet_port_set=bool(env.get("ACCORD_DEVNET_PORT")),
            test_clock_file=_test_clock(env),
            public_rpc_url=_url(env, "ACCORD_PUBLIC_RPC_URL"),
        )


def _test_clock(env: Mapping[str, str]) -> Path | None:
    """The test clock's file (ACCORD_TEST_CLOCK), only where ACCORD_ALLOW_TEST_CLOCK=1 says
    this is a test. Raises ValueError otherwise: a market clock moved on by a file would let
    whoever writes it close bidding or reviews early, or expire a task."""
    raw = env.get(TEST_CLOCK)
    if not raw:
        return None
    if not env_flag(env, ALLOW_TEST_CLOCK):
        raise ValueError(
            f"{TEST_CLOCK} moves the market's clock and is for tests only: unset it, or set "
            f"{ALLOW_TEST_CLOCK}=1 beside it in a test"
        )
    return Path(raw).absolute()


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """Whether the variable `name` is set to 1 (or true, yes, on); unset or empty is False.

    Raises ValueError naming the variable for a value that is neither on nor off.
    """
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name} must be 1 or 0, got {env.get(name)!r}")


_URL_SCHEMES = ("http://", "https://", "ws://", "wss://")


def _url(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name) or None
    if raw is None:
        return None
    scheme, _, rest = raw.partition("://")
    if not raw.lower().startswith(_URL_SCHEMES) or not rest.split("/", 1)[0]:
        raise ValueError(
            f"{name} must be an http(s) or ws(s) URL of a JSON-RPC endpoint, like "
            f"http://127.0.0.1:8545, not {raw!r}"
        )
    del scheme
    return raw


def _public_url(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name) or DEFAULT_PUBLIC_URL
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(
            f"{name} must be the http(s) base URL of this service, like {DEFAULT_PUBLIC_URL}, "
            f"not {raw!r}"
        )
    return raw.rstrip("/")


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        qualifier = "positive" if minimum == 1 else f"at least {minimum}"
        raise ValueError(f"{name} must be {qualifier}, got {value}")
    return value


def _float(
    env: Mapping[str, str], name: str, default: float, *, minimum: float | None = None
) -> float:
    """A number of seconds: positive, or at least `minimum` when one is given."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be a finite number of seconds, got {raw!r}")
    if minimum is None and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum:g}, got {value}")
    return value


_MAX_FEE_WEI = 2**128  # far above any real fee, far inside uint256


def _gwei(env: Mapping[str, str], name: str, *, minimum_wei: int) -> int | None:
    """An amount of gwei per gas (decimals allowed, read exactly) as integer wei; None when
    unset. Raises ValueError naming the variable."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        amount = Decimal(raw.strip())
    except InvalidOperation:
        raise ValueError(f"{name} must be a number of gwei, like 50 or 1.5, got {raw!r}") from None
    if not amount.is_finite():
        raise ValueError(f"{name} must be a finite number of gwei, got {raw!r}")
    wei = amount * WEI_PER_GWEI
    if wei != wei.to_integral_value():
        raise ValueError(f"{name} has more than 9 decimals (below one wei): {raw!r}")
    if wei < minimum_wei:
        qualifier = "positive" if minimum_wei else "0 or more"
        raise ValueError(f"{name} must be {qualifier}, got {raw!r}")
    if wei > _MAX_FEE_WEI:
        raise ValueError(f"{name} is beyond any fee a chain charges: {raw!r}")
    return int(wei)
