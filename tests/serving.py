"""An ASGI app served for real by uvicorn on 127.0.0.1, in a thread, for the length of a block.

    with serve(create_app(settings, context=context)) as url:
        httpx.get(f"{url}/health")

Tests that need the port before the app exists (a public URL naming it) pass `port`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from accord.ledger.devnet import find_free_port

START_TIMEOUT = 20.0
"""Seconds uvicorn may take to start listening (a loaded machine runs three test workers)."""


@contextmanager
def serve(app: Any, port: int | None = None, **config: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1:`port` (a free one by default) until the block ends; yields
    its base URL. `config` goes to `uvicorn.Config` (lifespan is off unless given).

    Fails the test when uvicorn stops or has not started within START_TIMEOUT seconds.
    """
    port = find_free_port() if port is None else port
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "off", **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
