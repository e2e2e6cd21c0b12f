"""The managed local chain: one anvil process per accord home, its state persisted on disk.

Layout under the devnet folder (`<ACCORD_HOME>/devnet/`):

    state.json   chain state; anvil loads it at start and dumps it every second; `down()`
                 also takes a dump over RPC (written atomically) before it stops anvil, so a
                 clean stop never loses a block. A crash (SIGKILL) loses at most the last
                 second: accord reconciles what the chain forgot (see ledger.anchoring).
    anvil.log    anvil's stdout and stderr
    anvil.pid    the pid of the running anvil (absent when stopped)

anvil runs detached (its own session) so it outlives the command that started it; a later
`up()` for the same home reuses it. It listens on 127.0.0.1 only, with chain id 31337 and the
well-known test mnemonic, so account 0 (the operator) is always the same.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from accord.ledger.errors import DevnetError

DEVNET_CHAIN_ID = 31337
DEVNET_HOST = "127.0.0.1"
DEVNET_MNEMONIC = "test test test test test test test test test test test junk"
STATE_DUMP_INTERVAL_S = 1
STATE_DUMP_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_POLL_INTERVAL_S = 0.05
_RPC_PROBE_TIMEOUT_S = 1.0
_LOG_TAIL_LINES = 20

ANVIL_PACKAGE = "@foundry-rs/anvil"
ANVIL_VERSION = "1.7.1"
"""The anvil accord is tested with: the version package.json pins (a test holds them equal)."""
ANVIL_VARIABLE = "ACCORD_ANVIL"
"""Names the anvil executable to use, overriding every other place."""
INSTALL_COMMAND = "accord devnet install"
INSTALL_TIMEOUT_S = 600.0

CHECKOUT_ROOT = Path(__file__).resolve().parent.parent
"""The repository, when accord runs from a checkout (an installed wheel has none: its parent
is site-packages, which holds no `package.json`)."""


def checkout_node_modules(root: Path | None = None) -> Path | None:
    """The repository's `node_modules` (where `npm ci` puts anvil), or None when accord does
    not run from a checkout. `root` defaults to `CHECKOUT_ROOT`."""
    root = CHECKOUT_ROOT if root is None else root
    return root / "node_modules" if (root / "package.json").is_file() else None


def anvil_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where `accord devnet install` puts anvil: `$XDG_CACHE_HOME/accord/anvil`, else
    `~/.cache/accord/anvil` (pure but for the home folder)."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "accord" / "anvil"


@dataclass(frozen=True)
class DevnetInfo:
    """A running devnet. `reused` is True when `up()` found it already running."""

    pid: int
    port: int
    rpc_url: str
    chain_id: int
    reused: bool
    state_file: Path
    log_file: Path


@dataclass(frozen=True)
class RunningElsewhere:
    """The home's anvil runs, as `pid`, but listens on `port`: not the port asked about."""

    pid: int
    port: int


@dataclass(frozen=True)
class DevnetStatus:
    """What `status()` sees on its port: `pid` and `block_number` are None when not running
    there; `elsewhere` names the home's anvil when it runs on another port."""

    running: bool
    pid: int | None
    port: int
    rpc_url: str
    block_number: int | None
    elsewhere: RunningElsewhere | None = None


#: Ports handed out for devnets and test servers: below Linux's ephemeral range (32768+), so
#: an outgoing connection of another process cannot take one between a `down()` and an `up()`.
FREE_PORT_RANGE = range(20000, 32000)


def find_free_port(host: str = DEVNET_HOST) -> int:
    """A TCP port on `host` that nothing listens on right now (for tests and benchmarks).

    Raises DevnetError when none of a few hundred random tries is free.
    """
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.choice(FREE_PORT_RANGE)
        if _port_is_free(port, host):
            return port
    raise DevnetError(f"no free port in {FREE_PORT_RANGE} on {host}")


def platform_package_name(system: str, machine: str) -> str | None:
    """The `@foundry-rs/anvil-*` package holding the binary for this platform (pure)."""
    systems = {"linux": "linux", "darwin": "darwin", "windows": "win32"}
    machines = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    os_part = systems.get(system.lower())
    arch_part = machines.get(machine.lower())
    if os_part is None or arch_part is None:
        return None
    return f"@foundry-rs/anvil-{os_part}-{arch_part}"


def _node_modules_candidates(node_modules: Path) -> list[Path]:
    """Where an npm install of @foundry-rs/anvil leaves a runnable anvil: the platform
    package's native binary first, then the package's node launcher."""
    exe = "anvil.exe" if sys.platform == "win32" else "anvil"
    candidates: list[Path] = []
    package = platform_package_name(platform.system(), platform.machine())
    if package is not None:
        candidates.append(node_modules / package / "bin" / exe)
    candidates.append(node_modules / ".bin" / "anvil")
    return candidates


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_anvil(
    env: Mapping[str, str] | None = None,
    node_modules: Path | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """The anvil executable, looked for in order:

    (0) `$ACCORD_ANVIL`, when set (it must then be runnable);
    (1) `anvil` on PATH;
    (2) the repository's `node_modules` (`npm ci`), when accord runs from a checkout;
    (3) the user cache where `accord devnet install` puts it (`anvil_cache_dir`).

    `node_modules` and `cache_dir` override (2) and (3); `env` the process environment.
    Raises DevnetError naming every place looked at and how to install it when none has one,
    or when `$ACCORD_ANVIL` is set to something that is not a runnable file.
    """
    env = os.environ if env is None else env
    chosen = env.get(ANVIL_VARIABLE, "")
    if chosen:
        if _runnable(Path(chosen)):
            return Path(chosen)
        raise DevnetError(f"{ANVIL_VARIABLE}={chosen} is not a runnable file")
    on_path = shutil.which("anvil", path=env.get("PATH", os.defpath))
    if on_path is not None:
        return Path(on_path)
    checkout = node_modules if node_modules is not None else checkout_node_modules()
    cache = cache_dir if cache_dir is not None else anvil_cache_dir(env)
    places = [] if checkout is None else _node_modules_candidates(checkout)
    places += _node_modules_candidates(cache / "node_modules")
    for candidate in places:
        if _runnable(candidate):
            return candidate
    repository = (
        f"not in the repository's {checkout}"
        if checkout is not None
        else "not in a repository's node_modules (accord does not run from a checkout)"
    )
    raise DevnetError(
        f"anvil not found: not on PATH, {repository}, not in the user cache {cache}; "
        f"install it with `{INSTALL_COMMAND}`"
        + (" (or `npm ci` in the repository)" if checkout is not None else "")
        + f", or name one with {ANVIL_VARIABLE}"
    )


def install_anvil(
    cache_dir: Path | None = None,
    *,
    npm: str | None = None,
    version: str = ANVIL_VERSION,
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> Path:
    """`npm install` the pinned `@foundry-rs/anvil@version` into `cache_dir` (default
    `anvil_cache_dir()`), and return the anvil it installed.

    `npm` is the npm executable (default: `npm` on PATH). Raises DevnetError when there is no
    npm, npm fails or times out (the message carries the tail of its output), or the install
    left no runnable anvil.
    """
    cache = cache_dir if cache_dir is not None else anvil_cache_dir()
    npm = npm or shutil.which("npm")
    if npm is None:
        raise DevnetError(
            "npm not found: installing anvil needs Node.js and npm (e.g. `apt-get install npm`)"
        )
    try:
        cache.mkdir(parents=True, exist_ok=True)
        manifest = cache / "package.json"
        if not manifest.exists():
            manifest.write_text(
                '{"name": "accord-anvil", "private": true, "description": '
                '"anvil for accord, installed by `accord devnet install`"}\n',
                encoding="utf-8",
            )
    except OSError as exc:
        raise DevnetError(f"cannot prepare {cache}: {exc}") from exc
    argv = [
        npm,
        "install",
        "--prefix",
        str(cache),
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        f"{ANVIL_PACKAGE}@{version}",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DevnetError(f"npm did not finish installing anvil within {timeout_s:.0f} s") from exc
    except OSError as exc:
        raise DevnetError(f"cannot run {npm}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-_LOG_TAIL_LINES:])
        raise DevnetError(f"npm install of {ANVIL_PACKAGE}@{version} failed:\n{tail}")
    for candidate in _node_modules_candidates(cache / "node_modules"):
        if _runnable(candidate):
            return candidate
    raise DevnetError(
        f"npm installed {ANVIL_PACKAGE}@{version} into {cache} but left no runnable anvil "
        f"(is {platform.system()} {platform.machine()} a platform it is built for?)"
    )


def anvil_command(anvil: Path, port: int, state_file: Path) -> list[str]:
    """The argv that starts the devnet (pure)."""
    return [
        str(anvil),
        "--host",
        DEVNET_HOST,
        "--port",
        str(port),
        "--chain-id",
        str(DEVNET_CHAIN_ID),
        "--mnemonic",
        DEVNET_MNEMONIC,
        # --state = --load-state + --dump-state: load if present, dump on SIGTERM/SIGINT.
        "--state",
        str(state_file),
        # Also dump periodically, so a crash or SIGKILL loses at most a second.
        "--state-interval",
        str(STATE_DUMP_INTERVAL_S),
    ]


def rpc_call(
    rpc_url: str,
    method: str,
    timeout_s: float = _RPC_PROBE_TIMEOUT_S,
    params: list[object] | None = None,
) -> object:
    """One JSON-RPC call; returns `result`.

    Raises OSError (connection refused, timeout...) or ValueError (not a JSON-RPC answer).
    """
    call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    body = json.dumps(call).encode()
    request = urllib.request.Request(
        rpc_url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.loads(response.read())
    if not isinstance(answer, dict) or "result" not in answer:
        raise ValueError(f"{method} got no result from {rpc_url}: {answer!r}")
    return answer["result"]


def _rpc_int(rpc_url: str, method: str) -> int | None:
    """`method`'s hex quantity answer as an int, or None if the node does not answer."""
    try:
        result = rpc_call(rpc_url, method)
    except (OSError, ValueError):
        return None
    if not isinstance(result, str):
        return None
    try:
        return int(result, 16)
    except ValueError:
        return None


def _reaped_or_gone(pid: int) -> bool:
    """True when `pid` no longer runs (reaping it if it is our exited child)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return True
    except ChildProcessError:
        pass  # not our child: fall through to a signal-0 probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) S ...": the state letter follows the last ')'.
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "Z"


def _looks_like_anvil(pid: int) -> bool:
    """Guard against a recycled pid: the command line mentions anvil (True if unknowable)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return b"anvil" in cmdline


def port_of_command(argv: list[str]) -> int | None:
    """The port an anvil command line listens on (the value of `--port`), or None (pure)."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--port" and value.isdigit():
            return int(value)
    return None


def _listening_port(pid: int) -> int | None:
    """The port anvil `pid` was started on, from its command line; None when unknowable."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return port_of_command(cmdline.decode(errors="replace").split("\0"))


def _port_is_free(port: int, host: str = DEVNET_HOST) -> bool:
    """True unless something listens on the port (TIME_WAIT leftovers do not count: anvil
    binds with SO_REUSEADDR too, and a restart right after `down()` must work)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


PORT_RELEASE_S = 5.0
"""How long `up` waits for a port still held by a devnet that is shutting down."""


def _something_listens(port: int, host: str = DEVNET_HOST) -> bool:
    """True when a server accepts connections on the port. (A bind test would also refuse
    the port while connections to a devnet that just stopped are still closing.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


class Devnet:
    """A managed anvil for one accord home.

    `home_devnet_dir` is `<ACCORD_HOME>/devnet`; `anvil_path` overrides `find_anvil()`.
    """

    def __init__(self, home_devnet_dir: Path, port: int, anvil_path: Path | None = None) -> None:
        self.dir = home_devnet_dir
        self.port = port
        self._anvil_path = anvil_path

    @property
    def rpc_url(self) -> str:
        return f"http://{DEVNET_HOST}:{self.port}"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def log_file(self) -> Path:
        return self.dir / "anvil.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "anvil.pid"

    def up(self, timeout_s: float = START_TIMEOUT_S) -> DevnetInfo:
        """Start anvil, or reuse the one already running for this home.

        Raises DevnetError when anvil cannot be found, the port is taken by something else,
        the running one listens on another port or does not answer on this one, or anvil does
        not answer `eth_chainId` within `timeout_s` (the message carries the tail of anvil.log).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        running = self._running_pid()
        if running is not None:
            port = _listening_port(running)
            if port is not None and port != self.port:
                raise DevnetError(
                    f"the devnet of {self.dir} runs as pid {running} on port {port}, not "
                    f"{self.port}: use that port, or stop it with `accord devnet down` first"
                )
            chain_id = self._answer_of_running(running, timeout_s)
            if chain_id is None:
                raise DevnetError(
                    f"the devnet of {self.dir} runs as pid {running} but does not answer on "
                    f"{self.rpc_url}; stop it with `accord devnet down` and start it again"
                )
            return self._info(running, chain_id, reused=True)
        deadline = time.monotonic() + PORT_RELEASE_S
        while _something_listens(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)  # a devnet stopped a moment ago may still be closing its listener
        if _something_listens(self.port):
            raise DevnetError(
                f"port {self.port} on {DEVNET_HOST} is already in use by another process; "
                "choose another with ACCORD_DEVNET_PORT"
            )
        anvil = self._anvil_path or find_anvil()
        pid = self._spawn(anvil_command(anvil, self.port, self.state_file))
        self.pid_file.write_text(f"{pid}\n")
        chain_id = self._wait_until_answering(pid, timeout_s)
        return self._info(pid, chain_id, reused=False)

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop the devnet: dump its state over RPC (atomically), then SIGTERM (anvil dumps
        it again), SIGKILL after `timeout_s`.

        Returns False when nothing was running. Removes the pid file either way.
        Raises DevnetError if the process survives SIGKILL or cannot be signalled.
        """
        pid = self._running_pid()
        if pid is None:
            return False
        self.dump_state()
        try:
            self._signal(pid, signal.SIGTERM)
            if not self._wait_gone(pid, timeout_s):
                self._signal(pid, signal.SIGKILL)
                if not self._wait_gone(pid, STOP_TIMEOUT_S):
                    raise DevnetError(f"anvil (pid {pid}) survived SIGKILL")
        finally:
            if _reaped_or_gone(pid):
                self.pid_file.unlink(missing_ok=True)
        return True

    def dump_state(self) -> bool:
        """Write the running devnet's whole state to `state.json` now (temp file + rename),
        from `anvil_dumpState`. Returns False, leaving the file as it was, when the devnet
        does not answer or answers with something that is not a state."""
        try:
            answer = rpc_call(self.rpc_url, "anvil_dumpState", timeout_s=STATE_DUMP_TIMEOUT_S)
            if not isinstance(answer, str):
                return False
            state = gzip.decompress(bytes.fromhex(answer.removeprefix("0x")))
            json.loads(state)
        except (OSError, ValueError, EOFError, gzip.BadGzipFile):
            return False
        temporary = self.state_file.with_name(self.state_file.name + ".tmp")
        try:
            temporary.write_bytes(state)
            os.replace(temporary, self.state_file)
        except OSError:
            temporary.unlink(missing_ok=True)
            return False
        return True

    def status(self) -> DevnetStatus:
        """Whether this home's anvil runs on this port, its pid, and the block number it
        answers with. An anvil of this home started on another port (ACCORD_DEVNET_PORT
        changed since) is not running here: it is named in `elsewhere`."""
        pid = self._running_pid()
        port = None if pid is None else _listening_port(pid)
        if pid is not None and port is not None and port != self.port:
            return DevnetStatus(
                running=False,
                pid=None,
                port=self.port,
                rpc_url=self.rpc_url,
                block_number=None,
                elsewhere=RunningElsewhere(pid, port),
            )
        block = _rpc_int(self.rpc_url, "eth_blockNumber") if pid is not None else None
        return DevnetStatus(
            running=pid is not None,
            pid=pid,
            port=self.port,
            rpc_url=self.rpc_url,
            block_number=block,
        )

    # -- internals ---------------------------------------------------------------------

    def _info(self, pid: int, chain_id: int, *, reused: bool) -> DevnetInfo:
        return DevnetInfo(
            pid=pid,
            port=self.port,
            rpc_url=self.rpc_url,
            chain_id=chain_id,
            reused=reused,
            state_file=self.state_file,
            log_file=self.log_file,
        )

    def _running_pid(self) -> int | None:
        """The pid in the pid file if that process still runs anvil; clears a stale file."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            self.pid_file.unlink(missing_ok=True)
            return None
        if _reaped_or_gone(pid) or not _looks_like_anvil(pid):
            self.pid_file.unlink(missing_ok=True)
            return None
        return pid

    def _spawn(self, argv: list[str]) -> int:
        """Start `argv` in its own session, output appended to anvil.log; returns the pid.

        os.posix_spawn rather than subprocess.Popen: the devnet must outlive this process,
        and an abandoned Popen object warns (ResourceWarning) when it is collected.
        """
        with self.log_file.open("a") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n")
        try:
            return os.posix_spawn(
                argv[0],
                argv,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (
                        os.POSIX_SPAWN_OPEN,
                        1,
                        str(self.log_file),
                        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                        0o644,
                    ),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGXFSZ),
            )
        except OSError as exc:
            raise DevnetError(f"cannot start {argv[0]}: {exc}") from exc

    def _answer_of_running(self, pid: int, timeout_s: float) -> int | None:
        """The chain id the running devnet answers with, asked again until `timeout_s`: a
        devnet busy on a loaded machine (or writing its state) may miss one short probe. None
        when it never answers, or stops meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            chain_id = _rpc_int(self.rpc_url, "eth_chainId")
            if chain_id is not None or _reaped_or_gone(pid) or time.monotonic() >= deadline:
                return chain_id
            time.sleep(_POLL_INTERVAL_S)

    def _wait_until_answering(self, pid: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _reaped_or_gone(pid):
                self.pid_file.unlink(missing_ok=True)
                raise DevnetError(
                    f"anvil exited during start-up; last lines of {self.log_file}:\n"
                    + self._log_tail()
                )
            chain_id = _rpc_int(self.rpc_url, "eth_chainId")
            if chain_id is not None:
                return chain_id
            time.sleep(_POLL_INTERVAL_S)
        with contextlib.suppress(DevnetError):
            self.down()
        raise DevnetError(
            f"anvil did not answer on {self.rpc_url} within {timeout_s:.0f} s; "
            f"last lines of {self.log_file}:\n" + self._log_tail()
        )

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    @staticmethod
    def _signal(pid: int, signum: signal.Signals) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        except PermissionError as exc:
            raise DevnetError(f"not allowed to signal anvil (pid {pid}): {exc}") from exc

    @staticmethod
    def _wait_gone(pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _reaped_or_gone(pid):
                return True
            time.sleep(_POLL_INTERVAL_S)
        return _reaped_or_gone(pid)


# -- the record: which devnet this home uses ---------------------------------------------------

RECORD_FILE = "devnet.json"
"""`<ACCORD_HOME>/devnet.json`: the port, RPC URL and identity of the devnet `devnet up` ran."""


class ChainMismatchError(DevnetError):
    """The chain at the recorded RPC URL is not the chain recorded: another chain id, another
    history (a block the record names has another hash, or is missing), or other code at the
    registry's address. `what` is "chain id", "history" or "registry code"."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(message)
        self.what = what


@dataclass(frozen=True)
class DevnetRecord:
    """What `accord devnet up` saw: where the devnet listens and which chain it was.

    `block_number` and `block_hash` name one block of its history (the head at recording);
    `registry` and `registry_code_hash` (hex keccak256 of its deployed code) the anchor registry.
    """

    port: int
    rpc_url: str
    chain_id: int
    block_number: int
    block_hash: str
    registry: str | None = None
    registry_code_hash: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "port": self.port,
            "rpc_url": self.rpc_url,
            "chain_id": self.chain_id,
            "block_number": self.block_number,
            "block_hash": self.block_hash,
            "registry": self.registry,
            "registry_code_hash": self.registry_code_hash,
        }

    @classmethod
    def from_json(cls, value: object, where: str = RECORD_FILE) -> DevnetRecord:
        """Raises DevnetError when `value` is not a record."""
        try:
            if not isinstance(value, dict):
                raise TypeError("not an object")
            port, chain_id, number = value["port"], value["chain_id"], value["block_number"]
            if not all(type(n) is int and n >= 0 for n in (port, chain_id, number)):
                raise TypeError("port, chain_id and block_number are whole numbers")
            texts = [value["rpc_url"], value["block_hash"]]
            optional = [value.get("registry"), value.get("registry_code_hash")]
            if not all(isinstance(t, str) for t in texts) or not all(
                t is None or isinstance(t, str) for t in optional
            ):
                raise TypeError("rpc_url, block_hash, registry and its code hash are strings")
        except (KeyError, TypeError) as exc:
            raise DevnetError(f"the devnet record {where} is malformed: {exc}") from exc
        return cls(port, texts[0], chain_id, number, texts[1], optional[0], optional[1])


def read_record(path: Path) -> DevnetRecord | None:
    """The record at `path`, None when there is none. Raises DevnetError for one that does
    not parse."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DevnetError(f"cannot read the devnet record {path}: {exc}") from exc
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise DevnetError(f"the devnet record {path} is not JSON: {exc}") from exc
    return DevnetRecord.from_json(value, str(path))


def write_record(path: Path, record: DevnetRecord) -> None:
    """Write `record` to `path` atomically (mode 0600). Raises DevnetError."""
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        descriptor = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise DevnetError(f"cannot write the devnet record {path}: {exc}") from exc


def observe(rpc_url: str, port: int, registry: str | None) -> DevnetRecord:
    """A record of the chain answering at `rpc_url` now: its chain id, its head block, and
    the code hash at `registry`. Raises DevnetError when it does not answer."""
    try:
        chain_id = _hex_int(rpc_call(rpc_url, "eth_chainId"))
        head = rpc_call(rpc_url, "eth_getBlockByNumber", params=["latest", False])
        if not isinstance(head, dict):
            raise ValueError("no head block")
        code_hash = None if registry is None else _code_hash(rpc_url, registry)
        return DevnetRecord(
            port,
            rpc_url,
            chain_id,
            _hex_int(head["number"]),
            str(head["hash"]),
            registry,
            code_hash,
        )
    except (OSError, ValueError, KeyError) as exc:
        raise DevnetError(f"the devnet at {rpc_url} does not answer: {exc}") from exc


def check_record(record: DevnetRecord, rpc_url: str) -> None:
    """Check that the chain at `rpc_url` is the one `record` describes, in order: (1) its
    chain id, (2) its history (the recorded block has the recorded hash), (3) the registry's
    code hash.

    Raises ChainMismatchError naming the first that differs, DevnetError when the chain does
    not answer.
    """
    try:
        chain_id = _hex_int(rpc_call(rpc_url, "eth_chainId"))
        # (1) chain id
        if chain_id != record.chain_id:
            raise ChainMismatchError(
                "chain id",
                f"the chain at {rpc_url} has chain id {chain_id}, not the recorded "
                f"{record.chain_id}: it is another chain",
            )
        # (2) history
        block = rpc_call(rpc_url, "eth_getBlockByNumber", params=[hex(record.block_number), False])
        found = block.get("hash") if isinstance(block, dict) else None
        if found != record.block_hash:
            seen = "has no such block" if found is None else f"has {found} there"
            raise ChainMismatchError(
                "history",
                f"the chain at {rpc_url} has another history: the record names block "
                f"{record.block_number} {record.block_hash}, the chain {seen} (a devnet "
                "started afresh, or another one on this port)",
            )
        # (3) registry code
        if record.registry is not None and record.registry_code_hash is not None:
            code_hash = _code_hash(rpc_url, record.registry)
            if code_hash != record.registry_code_hash:
                raise ChainMismatchError(
                    "registry code",
                    f"the chain at {rpc_url} holds other code at the recorded registry "
                    f"{record.registry} (keccak256 {code_hash}, recorded "
                    f"{record.registry_code_hash})",
                )
    except (OSError, ValueError) as exc:
        raise DevnetError(f"the devnet at {rpc_url} does not answer: {exc}") from exc


def _code_hash(rpc_url: str, address: str) -> str:
    code = rpc_call(rpc_url, "eth_getCode", params=[address, "latest"])
    if not isinstance(code, str):
        raise ValueError(f"eth_getCode answered {code!r}")
    return _keccak_hex(code)


def _keccak_hex(code: str) -> str:
    from eth_utils.crypto import keccak

    return "0x" + keccak(bytes.fromhex(code.removeprefix("0x"))).hex()


def _hex_int(value: object) -> int:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a hex quantity")
    return int(value, 16)
