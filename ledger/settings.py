"""Where accord keeps its state and which chain it talks to, read once from the environment.

Nothing here does I/O at import; `Settings.from_env()` reads variables, it creates no files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOME = ".accord"
DEFAULT_LOG_ID = "accord-main"
DEFAULT_DEVNET_PORT = 8545
DEFAULT_ANCHOR_EVERY_ENTRIES = 1000
DEFAULT_ANCHOR_EVERY_SECONDS = 60.0
#: Set to 1 to let agents be reached at loopback, link-local and private addresses.
ALLOW_PRIVATE_AGENTS = "ACCORD_ALLOW_PRIVATE_AGENTS"
DEFAULT_CONFIRMATIONS = 0
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
    public_url: the base URL at which others reach this service (ACCORD_PUBLIC_URL, no
    trailing slash); the URLs it puts in credentials, such as the status list's, start with it.
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
    public_url: str = DEFAULT_PUBLIC_URL
    devnet_port_set: bool = False
    """Whether ACCORD_DEVNET_PORT was set; if not, the port `devnet up` recorded is used."""

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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ACCORD_* variables; raises ValueError naming the variable that does not parse."""
        env = os.environ if environ is None else environ
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
            public_url=_public_url(env, "ACCORD_PUBLIC_URL"),
            devnet_port_set=bool(env.get("ACCORD_DEVNET_PORT")),
        )


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


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value
