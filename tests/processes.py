"""The JSON lines a process prints on stdout (an agent, a requester), read in a thread, for
tests that drive other processes and wait for their steps.

    lines = JsonLines(process, "kai")
    lines.wait_for("committed", task=task_id)   # the next such line; earlier ones are kept
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from typing import Any

STEP_TIMEOUT = 120.0
"""Seconds a process may take to reach its next line (a loaded machine runs three workers)."""


class JsonLines:
    """Each JSON line of `process`'s stdout, in order; other lines are passed over."""

    def __init__(self, process: subprocess.Popen[str], name: str = "the process") -> None:
        self.name = name
        self.process = process
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        assert process.stdout is not None
        stream = process.stdout

        def pump() -> None:
            for line in stream:
                try:
                    self.queue.put(json.loads(line))
                except json.JSONDecodeError:
                    continue

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, event: str, timeout: float = STEP_TIMEOUT, **fields: Any) -> dict[str, Any]:
        """The first line of `event` with `fields` not taken yet: lines passed over while
        waiting are kept in `seen` for a later wait. Fails the test (AssertionError, with
        every line seen) when none comes within `timeout` seconds or the process ends."""

        def wanted(line: dict[str, Any]) -> bool:
            return line.get("event") == event and all(line.get(k) == v for k, v in fields.items())

        for line in self.seen:
            if wanted(line):
                self.seen.remove(line)
                return line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None and self.queue.empty():
                    break
                continue
            if wanted(line):
                return line
            self.seen.append(line)
        raise AssertionError(
            f"no {event!r} {fields} from {self.name} (exit {self.process.poll()}); saw {self.seen}"
        )


def stop_process(process: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """End `process` as a person would (SIGTERM), killing it when it does not stop within
    `timeout` seconds, and close the pipes it was given."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
