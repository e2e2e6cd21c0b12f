"""`accord serve`: the HTTP service under uvicorn (loopback unless told otherwise)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Annotated

import typer

from accord.ledger.settings import Settings

SERVE_LIFECYCLE_INTERVAL = 5.0


def serve(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8600,
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 exposes the service to the network.")
    ] = "127.0.0.1",
    public_url: Annotated[
        str | None,
        typer.Option(
            envvar="ACCORD_PUBLIC_URL",
            help="scheme://host[:port] clients address the service by, behind a proxy: "
            "request signatures must be made for it (otherwise, for the request's Host).",
        ),
    ] = None,
) -> None:
    """Serve the accord API (the market is opened on the first request). Every few seconds
    it awards, expires, refunds and settles the tasks whose windows closed
    (ACCORD_LIFECYCLE_INTERVAL seconds, default 5; 0 turns it off), and anchors the log's
    tail once ACCORD_ANCHOR_INTERVAL has passed, even when nothing is appended."""
    import uvicorn

    from accord.api.app import create_app
    from accord.api.routes.deps import ApiConfig
    from accord.ledger.errors import HomeError
    from accord.ledger.service import anchor_tick
    from accord.ledger.wiring import prepare_home

    try:
        settings = Settings.from_env()
        config = ApiConfig.from_env(public_url=public_url or None)
        if "ACCORD_LIFECYCLE_INTERVAL" not in os.environ:
            config = replace(config, lifecycle_interval=SERVE_LIFECYCLE_INTERVAL)
        config = replace(config, anchor_tick=anchor_tick(settings.anchor_every_seconds))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        prepare_home(settings)
    except HomeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    uvicorn.run(create_app(settings, config=config), host=host, port=port, log_level="info")
