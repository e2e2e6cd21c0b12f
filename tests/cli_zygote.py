"""A zygote for the `accord` command in tests: one process that has imported accord and its
dependencies once, and forks a child per command line.

Started as `python -m tests.cli_zygote SOCKET`, it serves one request at a time on the Unix
socket SOCKET. A request is one JSON line: {"argv", "env", "cwd", "stdout", "stderr",
"timeout"}. The zygote forks; the child takes the environment, folder and argv, points file
descriptors 0/1/2 at /dev/null and the two output files, and runs `accord.api.cli` as
`python -m accord.api.cli` does, then exits with its code. The zygote answers one JSON line:
{"returncode": N} or {"timeout": true} (the child was killed).

Why: importing web3, FastAPI and SQLAlchemy costs an `accord` process 2 to 3 s of CPU before the
command starts, and the CLI tests run a few hundred commands. Each child is still a process of
its own (its own environment, folder, exit code and output; it starts from the zygote's state
right after the imports, before any command ran), so a test sees what a person running
`accord` sees. The console script itself is exercised unforked by scripts/check_wheel.sh and
the tests that start `accord serve` / `accord agent run`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import runpy
import signal
import socket
import sys
import threading
import time
import traceback

_POLL_S = 0.005
_PARENT_CHECK_S = 2.0


def _preload() -> None:
    """Import every accord module (the commands import some of them lazily)."""
    import accord

    for module in pkgutil.walk_packages(accord.__path__, "accord."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)


def _child(request: dict[str, object], sockets: tuple[socket.socket, ...]) -> None:
    """Run one `accord` command line in this (forked) process, without the zygote's
    `sockets`; never returns."""
    code = 1
    try:
        for held in sockets:
            held.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        for fd, path, mode in (
            (0, os.devnull, os.O_RDONLY),
            (1, str(request["stdout"]), os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
            (2, str(request["stderr"]), os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
        ):
            opened = os.open(path, mode, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = ["accord", *(str(a) for a in argv)]
        try:
            # as `python -m accord.api.cli`: __main__ and argv[0] are that module's, which is
            # what click names in its usage lines (and, as there, not also in sys.modules under
            # its own name, or runpy warns)
            sys.modules.pop("accord.api.cli", None)
            runpy.run_module("accord.api.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
    except BaseException:  # what an uncaught exception does to `python -m`: a traceback, 1
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the process ends either way
                stream.flush()
        os._exit(code)


def _serve_one(server: socket.socket, connection: socket.socket) -> None:
    with connection, connection.makefile("rwb") as stream:
        request = json.loads(stream.readline())
        if threading.active_count() != 1:  # a fork copies one thread; never fork beside others
            raise RuntimeError("the zygote has threads; forking it would copy half a process")
        pid = os.fork()
        if pid == 0:
            _child(request, (server, connection))
        deadline = time.monotonic() + float(request["timeout"])
        answer: dict[str, object]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                answer = {"returncode": os.waitstatus_to_exitcode(status)}
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                answer = {"timeout": True}
                break
            time.sleep(_POLL_S)
        stream.write(json.dumps(answer).encode() + b"\n")
        stream.flush()


def main(path: str) -> None:
    _preload()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(_PARENT_CHECK_S)
    parent = os.getppid()
    print("ready", flush=True)
    while os.getppid() == parent:  # the test process that started it is gone: stop
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        _serve_one(server, connection)


if __name__ == "__main__":
    main(sys.argv[1])
