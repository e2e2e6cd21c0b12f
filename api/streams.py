"""Server-sent event streams are capped: per caller and in all, in one service process.

A stream holds a slot from before it opens until it ends, however it ends (the task is
terminal, the horizon has passed, the client went away, the server stops):

    slot = state.streams.take(f"did {caller}")      # ProblemError 429 over a cap
    try:
        ...                                          # what may fail before the stream opens
    except BaseException:
        slot.release()
        raise
    return SlotStream(slot, events(), media_type=SSE_MEDIA_TYPE)

`SlotStream` releases its slot when the response is done being sent, whether the body ran
out, the client disconnected or the send failed; releasing twice is harmless. Every open
stream polls the market, so without caps a few callers with free keys could hold enough
streams to slow every other request.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable, Mapping
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from accord.api.problems import ProblemError


class StreamSlot:
    """One open stream's place; `release` gives it back (once, whatever is called after)."""

    def __init__(self, slots: StreamSlots, key: str) -> None:
        self._slots = slots
        self.key = key
        self._released = False

    def release(self) -> None:
        with self._slots.lock:
            if self._released:
                return
            self._released = True
            self._slots.give_back(self.key)


class StreamSlots:
    """At most `per_caller` open streams per caller key and `total` in all (this process)."""

    def __init__(self, per_caller: int, total: int) -> None:
        self.per_caller = per_caller
        self.total = total
        self.lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._count = 0

    def take(self, key: str) -> StreamSlot:
        """A slot for `key` (`did …` or `address …`). Raises ProblemError 429 when `key` holds
        `per_caller` streams already, or the process serves `total`."""
        with self.lock:
            held = self._open.get(key, 0)
            if held >= self.per_caller:
                raise ProblemError(
                    429,
                    f"{key} has {held} event streams open here, the most one caller may: "
                    "close one (a stream ends when you disconnect) or poll instead "
                    "(GetTask, GET /tasks/{id}), then try again",
                    kind="too-many-streams",
                    reason="streams-per-caller",
                )
            if self._count >= self.total:
                raise ProblemError(
                    429,
                    f"the service has {self._count} event streams open, the most it serves at "
                    "once: try again when some have closed, or poll instead (GetTask, "
                    "GET /tasks/{id})",
                    kind="too-many-streams",
                    reason="streams-total",
                )
            self._open[key] = held + 1
            self._count += 1
            return StreamSlot(self, key)

    def give_back(self, key: str) -> None:
        """Called by `StreamSlot.release` with the lock held."""
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)
        self._count -= 1

    def open(self, key: str | None = None) -> int:
        """How many streams are open: `key`'s, or all of them."""
        with self.lock:
            return self._count if key is None else self._open.get(key, 0)


class SlotStream(StreamingResponse):
    """A streaming response that releases its stream slot once it is over, however it ends."""

    def __init__(
        self,
        slot: StreamSlot,
        content: AsyncIterable[str],
        *,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()
