"""`accord serve`: the HTTP service under uvicorn (loopback unless told otherwise)."""

from __future__ import annotations

from typing import Annotated

import typer

from ledger.settings import Settings


def serve(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8600,
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 exposes the service to the network.")
    ] = "127.0.0.1",
) -> None:
    """Serve the accord API (the market is opened on the first request)."""
    import uvicorn

    from api.app import create_app
    from ledger.errors import HomeError
    from ledger.runtime import prepare_home

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        prepare_home(settings)
    except HomeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")
