"""The `accord` command line: a thin shell over the same services the API uses.

Every command that shows data takes `--json`; exit status 0 means success, 1 a failure the
message explains (a verification that fails, a chain that is down), 2 bad usage or input.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from accord._process import prepare_process
from accord.api import output
from accord.api.audit_cli import audit
from accord.api.coordinator_cli import conversation_app
from accord.api.identity_cli import agent_app, capability_app, credential_app
from accord.api.keys_cli import devnet_fund, key_app
from accord.api.market_cli import bid_app, task_app
from accord.api.output import JsonFlag, emit, fail, plural, say
from accord.api.serve_cli import serve
from accord.api.skill_cli import skill_app
from accord.ledger.errors import (
    CanonicalizationError,
    ChainError,
    DevnetError,
    LedgerError,
    MalformedError,
)
from accord.ledger.settings import Settings

if TYPE_CHECKING:
    from accord.ledger.anchoring import AnchorOutcome
    from accord.ledger.chain import AnchorChain
    from accord.ledger.events import Entry
    from accord.ledger.verify import VerificationReport

app = typer.Typer(
    name="accord",
    help="accord: trust and money for an Internet of Agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
devnet_app = typer.Typer(help="The managed local anvil devnet.", no_args_is_help=True)
ledger_app = typer.Typer(help="The signed Merkle log and its anchors.", no_args_is_help=True)
app.add_typer(devnet_app, name="devnet")
devnet_app.command("fund")(devnet_fund)
app.add_typer(key_app, name="key")
app.add_typer(ledger_app, name="ledger")
app.add_typer(capability_app, name="capability")
app.add_typer(skill_app, name="skill")
app.add_typer(agent_app, name="agent")
app.add_typer(credential_app, name="credential")
app.add_typer(task_app, name="task")
app.add_typer(bid_app, name="bid")
app.add_typer(conversation_app, name="conversation")
app.command("audit")(audit)
app.command("serve")(serve)


MAX_INDEX = 2**63 - 1
"""No log index is larger (the stores keep them as 64-bit integers)."""


def installed_version() -> str:
    """The installed distribution's version ("unknown" when accord runs from a checkout that
    was never installed)."""
    from importlib import metadata

    try:
        return metadata.version("accord")
    except metadata.PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"accord {installed_version()}\n")
        raise typer.Exit(0)


@app.callback()
def accord_root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version."
        ),
    ] = False,
) -> None:
    """accord: trust and money for an Internet of Agents."""
    del version
    output.reset()


def main() -> None:
    """The `accord` entry point. With `--json` on the command line, input the parser refuses
    (exit 2) is reported as JSON on stdout like every other error. An operating-system failure
    no command expected (a folder that vanished, a full disk) still ends in one line (or one
    JSON object) and exit 1, never a traceback."""
    from typer._click.exceptions import ClickException
    from typer.exceptions import Abort

    prepare_process()
    wants_json = "--json" in sys.argv[1:]
    try:
        if not wants_json:
            app()
            return
        code = app(standalone_mode=False)
        raise SystemExit(code if isinstance(code, int) else 0)
    except ClickException as exc:
        output.use_json_errors()
        output.report_error(exc.format_message(), exc.exit_code)
        raise SystemExit(exc.exit_code) from None
    except Abort:
        output.report_error("aborted", 1)
        raise SystemExit(1) from None
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        output.report_error(f"{exc.strerror or exc}{where}", 1)
        raise SystemExit(1) from None


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn expected failures into one clear line and an exit status."""
    try:
        yield
    except (MalformedError, CanonicalizationError) as exc:
        fail(str(exc), code=2)
    except LedgerError as exc:
        fail(str(exc))


# -- devnet ------------------------------------------------------------------------------------


@devnet_app.command("up")
def devnet_up(as_json: JsonFlag = False) -> None:
    """Start the devnet (or reuse the running one) and deploy the registry once."""
    from accord.ledger.devnet import ChainMismatchError
    from accord.ledger.wiring import prepare_home, start_devnet

    settings = _settings()
    with _errors():
        if settings.rpc_url is not None:
            fail("ACCORD_RPC_URL is set: accord uses that chain and manages no devnet", code=2)
        prepare_home(settings)
        try:
            started = start_devnet(settings)  # a failed start stops the anvil it started
        except ChainMismatchError as exc:
            fail(
                f"{exc}. The log's anchors are on the recorded chain; nothing was deployed on "
                f"this one. To start over on it, remove {settings.devnet_record_file}"
            )
        info, chain, record = started.info, started.chain, started.record
        data = {
            "running": True,
            "reused": info.reused,
            "pid": info.pid,
            "port": info.port,
            "rpc_url": info.rpc_url,
            "chain_id": chain.chain_id(),
            "registry": chain.registry_address(),
            "record": str(settings.devnet_record_file),
            "block_number": record.block_number,
            "block_hash": record.block_hash,
        }
    if as_json:
        emit(data)
        return
    verb = "reused the running" if info.reused else "started a"
    say(f"[green]✓[/] {verb} devnet at {info.rpc_url} (pid {info.pid})")
    say(f"  AnchorRegistry at {data['registry']} on chain {data['chain_id']}")


@devnet_app.command("install")
def devnet_install(as_json: JsonFlag = False) -> None:
    """Install the pinned anvil with npm into the user cache, where `devnet up` finds it."""
    from accord.ledger.devnet import ANVIL_VERSION, install_anvil

    with _errors():
        anvil = install_anvil()
    if as_json:
        emit({"anvil": str(anvil), "version": ANVIL_VERSION})
    else:
        say(f"[green]✓[/] anvil {ANVIL_VERSION} installed: {anvil}")


@devnet_app.command("down")
def devnet_down(as_json: JsonFlag = False) -> None:
    """Stop the devnet; its state is kept for the next `up`."""
    from accord.ledger.wiring import devnet_for

    settings = _settings()
    with _errors():
        stopped = devnet_for(settings).down()
    if as_json:
        emit({"stopped": stopped})
    else:
        shown = "[green]✓[/] devnet stopped" if stopped else "the devnet was not running"
        say(shown)


def _external_chain_status(rpc_url: str, as_json: bool) -> None:
    """`devnet status` where ACCORD_RPC_URL names a chain accord does not manage: that chain's
    id and head, its URL shown as scheme, host and port only (a path or query may hold a
    provider's key)."""
    from urllib.parse import urlsplit

    from accord.ledger.devnet import rpc_call

    where = urlsplit(rpc_url)
    shown = f"{where.scheme}://{where.hostname}" + (f":{where.port}" if where.port else "")
    answers: dict[str, int | None] = {}
    for name, method in (("chain_id", "eth_chainId"), ("block_number", "eth_blockNumber")):
        try:
            answers[name] = int(str(rpc_call(rpc_url, method)), 16)
        except (OSError, ValueError):
            answers[name] = None
    data = {"managed": False, "rpc_url": shown, "answering": answers["block_number"] is not None}
    if as_json:
        emit({**data, **answers})
    elif data["answering"]:
        say(
            f"accord manages no devnet here: ACCORD_RPC_URL names the chain at {shown} "
            f"(chain id {answers['chain_id']}), block {answers['block_number']}"
        )
    else:
        say(
            f"accord manages no devnet here: ACCORD_RPC_URL names the chain at {shown}, which "
            "does not answer; check the URL and the node"
        )


@devnet_app.command("status")
def devnet_status(as_json: JsonFlag = False) -> None:
    """Whether the devnet runs, where, and at which block."""
    from accord.ledger.devnet import read_record
    from accord.ledger.wiring import devnet_for

    settings = _settings()
    if settings.rpc_url is not None:
        _external_chain_status(settings.rpc_url, as_json)
        return
    with _errors():
        status = devnet_for(settings).status()
        record = read_record(settings.devnet_record_file)
    elsewhere = status.elsewhere
    data = {
        "managed": True,
        "running": status.running,
        "pid": status.pid,
        "port": status.port,
        "rpc_url": status.rpc_url,
        "block_number": status.block_number,
        "recorded": None if record is None else record.to_json(),
        "elsewhere": None if elsewhere is None else {"pid": elsewhere.pid, "port": elsewhere.port},
    }
    if as_json:
        emit(data)
    elif status.running:
        say(f"running at {status.rpc_url} (pid {status.pid}), block {status.block_number}")
    elif elsewhere is not None:
        say(
            f"not running at {status.rpc_url}: this home's devnet runs on port "
            f"{elsewhere.port} (pid {elsewhere.pid}). Use that port (unset ACCORD_DEVNET_PORT "
            "to follow the record), or stop it with `accord devnet down` and start it here"
        )
    else:
        say(f"not running (would listen at {status.rpc_url}); start it: accord devnet up")


# -- ledger ------------------------------------------------------------------------------------


def _optional_chain(settings: Settings) -> tuple[AnchorChain | None, str | None]:
    """The chain if it is up; appends never wait for it."""
    from accord.ledger.wiring import connect_chain

    try:
        return connect_chain(settings, start_devnet=False), None
    except (ChainError, DevnetError) as exc:
        return None, str(exc)


def _entry_json(index: int, entry: Entry) -> dict[str, Any]:
    return {"index": index, **entry.to_json()}


@ledger_app.command("append")
def ledger_append(
    kind: Annotated[str, typer.Option(help="Event kind, dotted lower-case: 'note.added'.")],
    body: Annotated[str, typer.Option(help="Event body, a JSON object.")] = "{}",
    subject: Annotated[str, typer.Option(help="What the event is about.")] = "",
    as_key: Annotated[
        Path | None, typer.Option("--as", help="Sign with this key file, not the operator's.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sign an event and append it to the log."""
    from accord.ledger.signing import read_keyfile
    from accord.ledger.wiring import open_ledger, operator_signer

    settings = _settings()
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError as exc:
        fail(f"--body is not JSON: {exc}", code=2)
    if not isinstance(parsed, dict):
        fail('--body must be a JSON object, like \'{"note": "hello"}\'', code=2)
    with _errors():
        signer = read_keyfile(as_key) if as_key is not None else operator_signer(settings)
        chain, chain_problem = _optional_chain(settings)
        ledger = open_ledger(settings, chain)
        index, entry = ledger.append(signer, kind, subject=subject, body=parsed)
    problem = chain_problem or (str(ledger.last_anchor_error) if ledger.last_anchor_error else None)
    if as_json:
        emit({**_entry_json(index, entry), "anchor_pending_reason": problem})
        return
    say(
        f"[green]✓[/] appended entry {index}: {kind} by {entry.event.actor} (seq "
        f"{entry.event.seq})",
        highlight=False,
    )
    if problem:
        output.err().print(f"[yellow]note:[/] not anchored yet: {problem}", highlight=False)


@ledger_app.command("show")
def ledger_show(
    start: Annotated[int, typer.Option("--from", min=0, help="First index.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="At most this many.")] = 20,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List entries of the log (a read: it creates nothing)."""
    from rich.table import Table

    from accord.ledger.events import Entry
    from accord.ledger.wiring import open_store

    settings = _settings()
    if start > MAX_INDEX:
        fail(f"--from must be a log index, at most {MAX_INDEX}", code=2)
    with _errors():
        store = open_store(settings, create=False)
        size = store.size()
        found = store.find(kind=kind, limit=limit, after=start - 1)
        entries = [(stored.index, Entry.from_bytes(stored.data)) for stored in found]
        latest = store.latest_checkpoint()
    if as_json:
        emit(
            {
                "log_id": store.log_id,
                "size": size,
                "root": store.root(size).hex(),
                "entries": [_entry_json(index, entry) for index, entry in entries],
            }
        )
        return
    table = Table(
        title=f"log {store.log_id}: {plural(size, 'entry', 'entries')}", title_justify="left"
    )
    for column in ("#", "kind", "actor", "seq", "at", "subject"):
        table.add_column(column, overflow="fold")
    for index, entry in entries:
        event = entry.event
        actor = event.actor if len(event.actor) < 24 else event.actor[:16] + "…" + event.actor[-6:]
        table.add_row(str(index), event.kind, actor, str(event.seq), event.at, event.subject)
    say(table)
    say(f"root {store.root(size).hex()}")
    if latest is not None:
        say(f"latest checkpoint: size {latest.size}, signed at {latest.at}")


@ledger_app.command("proof")
def ledger_proof(
    index: Annotated[int, typer.Argument(min=0, help="Log index of the entry.")],
    size: Annotated[int | None, typer.Option(min=1, help="Tree size (default: now).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The RFC 9162 inclusion proof of one entry, checked before it is printed."""
    from accord.ledger import merkle
    from accord.ledger.wiring import open_store

    settings = _settings()
    if max(index, size or 0) > MAX_INDEX:
        fail(f"the index and --size must be at most {MAX_INDEX}", code=2)
    with _errors():
        store = open_store(settings, create=False)
        tree_size = store.size() if size is None else size
        if not 0 <= index < tree_size:
            fail(f"entry {index} is not in a tree of {plural(tree_size, 'entry', 'entries')}", 2)
        try:
            proof = store.inclusion_proof(index, tree_size)
        except ValueError as exc:
            fail(str(exc), code=2)
        root = store.root(tree_size)
        leaf = store.entry(index).leaf_hash
        merkle.verify_inclusion(leaf, index, tree_size, proof, root)
    data = {
        "index": index,
        "tree_size": tree_size,
        "leaf_hash": leaf.hex(),
        "root": root.hex(),
        "proof": [element.hex() for element in proof],
    }
    if as_json:
        emit(data)
        return
    say(f"entry {index} in a tree of {tree_size}: leaf {leaf.hex()}")
    say(f"root {root.hex()}")
    for position, element in enumerate(proof):
        say(f"  {position:2d}  {element.hex()}")
    say("[green]✓[/] the proof verifies")


@ledger_app.command("checkpoints")
def ledger_checkpoints(as_json: JsonFlag = False) -> None:
    """Every signed checkpoint (size, root, time) and its anchor: status, chain, registry,
    transaction and block. A read: it starts no devnet and reads no chain."""
    from rich.table import Table

    from accord.ledger.anchor_journal import AnchorJournal
    from accord.ledger.checkpoint import SignedCheckpoint
    from accord.ledger.wiring import open_store

    settings = _settings()
    with _errors():
        store = open_store(settings, create=False)
        anchors = {anchor.size: anchor for anchor in AnchorJournal(store.engine).records()}
        rows: list[dict[str, Any]] = []
        for stored in store.checkpoints():
            signed = SignedCheckpoint.from_bytes(stored.data)
            anchor = anchors.get(stored.size)
            rows.append(
                {
                    "size": stored.size,
                    "root": stored.root.hex(),
                    "at": stored.at,
                    "signer": signed.signer_did,
                    "anchor": None
                    if anchor is None
                    else {
                        "status": anchor.status,
                        "chain_id": anchor.chain_id,
                        "registry": anchor.registry_address,
                        "tx_hash": "0x" + anchor.tx_hash.hex(),
                        "block_number": anchor.block_number,
                    },
                }
            )
    if as_json:
        emit({"log_id": store.log_id, "checkpoints": rows})
        return
    table = Table(
        title=f"{plural(len(rows), 'checkpoint')} of {store.log_id}", title_justify="left"
    )
    for column in ("size", "at", "root", "anchor", "block", "transaction"):
        table.add_column(column, overflow="fold")
    for row in rows:
        anchored = row["anchor"]
        table.add_row(
            str(row["size"]),
            str(row["at"]),
            str(row["root"]),
            "-" if anchored is None else str(anchored["status"]),
            "-" if anchored is None else str(anchored["block_number"] or "-"),
            "-" if anchored is None else str(anchored["tx_hash"]),
        )
    say(table)


@ledger_app.command("reindex")
def ledger_reindex(as_json: JsonFlag = False) -> None:
    """Rebuild every read view (tasks, credentials) from the log alone, in one transaction
    (appends wait meanwhile). The views answer lists and filters; the audit never reads them."""
    import time

    from accord.ledger.wiring import open_store, operator_signer
    from accord.market.projections import read_views

    settings = _settings()
    with _errors():
        store = open_store(settings, create=False)
        for projection in read_views(operator_signer(settings).did):
            store.attach(projection)
        started = time.monotonic()
        applied = store.reindex()
        seconds = time.monotonic() - started
    if as_json:
        emit({"log_id": store.log_id, "views": applied, "seconds": round(seconds, 3)})
        return
    for name, size in applied.items():
        say(f"{name}: rebuilt from {plural(size, 'entry', 'entries')}")
    say(f"in {seconds:.2f} s")


def _outcome_json(outcome: AnchorOutcome) -> dict[str, Any]:
    return {
        "status": outcome.status,
        "size": outcome.size,
        "root": None if outcome.root is None else outcome.root.hex(),
        "tx_hash": None if outcome.tx_hash is None else "0x" + outcome.tx_hash.hex(),
        "block_number": outcome.block_number,
    }


@ledger_app.command("migrate")
def ledger_migrate(
    at: Annotated[
        list[int] | None,
        typer.Option("--at", help="Also prove the root at this size (repeatable)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Convert a log an earlier accord stored as tree-node rows to C2SP tiles, in one
    transaction (appends wait): every tile is hashed from the entries, the tiles' root is
    proved equal to the node rows' and to each checkpoint's at every checkpoint's size, the
    current size and sizes spread over the log, and only then are the node rows dropped. A
    root that differs changes nothing. A log already on tiles is left as it is."""
    from accord.ledger.database import make_engine
    from accord.ledger.tile_migration import migrate_to_tiles
    from accord.ledger.wiring import prepare_home

    settings = _settings()
    with _errors():
        prepare_home(settings, create=False)
        engine = make_engine(settings.db_url)
        started = time.monotonic()
        try:
            done = migrate_to_tiles(engine, settings.log_id, sizes=at or ())
        except ValueError as exc:
            fail(str(exc), 2)
        finally:
            engine.dispose()
        seconds = time.monotonic() - started
    if as_json:
        emit(
            {
                "log_id": done.log_id,
                "size": done.size,
                "already_on_tiles": done.already,
                "tile_rows": done.tile_rows,
                "node_rows_dropped": done.node_rows,
                "roots": {str(size): root.hex() for size, root in sorted(done.roots.items())},
                "seconds": round(seconds, 3),
            }
        )
        return
    if done.already:
        say(f"{done.log_id}: already stored as tiles ({plural(done.size, 'entry', 'entries')})")
        return
    say(
        f"{done.log_id}: {plural(done.size, 'entry', 'entries')} now stored as "
        f"{plural(done.tile_rows, 'tile row')}; {plural(done.node_rows, 'node row')} dropped"
    )
    for size, root in sorted(done.roots.items()):
        say(f"  root at {size}: {root.hex()} (tiles = node rows = checkpoint where stored)")
    say(f"in {seconds:.2f} s")


@ledger_app.command("anchor")
def ledger_anchor(
    watch: Annotated[
        bool, typer.Option(help="Keep anchoring every ACCORD_ANCHOR_INTERVAL seconds.")
    ] = False,
    rounds: Annotated[
        int | None, typer.Option(min=1, help="With --watch, stop after this many rounds.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Checkpoint the log and anchor it on the chain (reconciling pending anchors first)."""
    from accord.ledger.wiring import connect_chain, open_ledger

    settings = _settings()
    with _errors():
        chain = connect_chain(settings, started=output.devnet_started)
        ledger = open_ledger(settings, chain)
        assert ledger.anchorer is not None
        anchorer = ledger.anchorer
        done = 0
        while True:
            outcome = anchorer.anchor_latest()
            _report_outcome(outcome, as_json)
            done += 1
            if not watch or (rounds is not None and done >= rounds):
                break
            time.sleep(settings.anchor_every_seconds)


def _report_outcome(outcome: AnchorOutcome, as_json: bool) -> None:
    if as_json:
        emit(_outcome_json(outcome))
        return
    match outcome.status:
        case "confirmed":
            say(
                f"[green]✓[/] anchored size {outcome.size} in block {outcome.block_number} "
                f"(tx 0x{outcome.tx_hash.hex() if outcome.tx_hash else ''})"
            )
        case "already-anchored":
            say(f"size {outcome.size} is already anchored")
        case "empty":
            say("the log is empty: nothing to anchor")
        case "pending":
            say(
                f"[yellow]…[/] anchor of size {outcome.size} sent but not mined yet; "
                "run `accord ledger anchor` again to reconcile it"
            )


@ledger_app.command("verify")
def ledger_verify(
    offline: Annotated[
        bool, typer.Option(help="Skip the chain steps (5 and 6); verify the log alone.")
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            help="Verify the log the accord service at this URL publishes, in this process, "
            "with no home (held in memory); its checkpoints are held to their signer."
        ),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="With --server: the JSON-RPC URL to read the anchors through."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Verify the log as a numbered checklist; exit 1 naming the first failing step."""
    from accord.ledger.verify import verify_log

    if rpc_url is not None and server is None:
        fail("--rpc-url reads the chain of a service: give --server URL too", 2)
    if server is not None:
        _verify_published(server, rpc_url, offline=offline, as_json=as_json)
        return
    from accord.ledger.wiring import (
        check_recorded_devnet,
        connect_chain,
        open_store,
        operator_signer,
    )

    settings = _settings()
    with _errors():
        store = open_store(settings, create=False)
        operator = operator_signer(settings)
        chain: AnchorChain | None = None
        if not offline:
            check_recorded_devnet(settings)  # another chain is named, not read as no anchors
            chain = connect_chain(settings, start_devnet=False)
        report = _with_progress(
            as_json, lambda progress: verify_log(store, operator.did, chain, progress)
        )
    if as_json:
        emit(report.to_json())
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _verify_published(server: str, rpc_url: str | None, *, offline: bool, as_json: bool) -> None:
    """`accord ledger verify --server URL`: the checklist over the log the service publishes
    (`accord.audit.remote`), its operator the signer of its checkpoints."""
    from accord.audit.remote import published_chains, published_log, refused_verification
    from accord.ledger.verify import verify_log

    with _errors(), published_log(server) as published:
        if published.refusal is not None:
            report = refused_verification(published, published.refusal)
        elif published.operator is None:
            fail(f"{server} has published no signed checkpoint: nothing names its operator")
        else:
            chain = None if offline else published_chains(published, rpc_url)[0]
            operator = published.operator
            report = _with_progress(
                as_json, lambda progress: verify_log(published.store, operator, chain, progress)
            )
    if as_json:
        emit(report.to_json())
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _with_progress(
    quiet: bool, run: Callable[[Callable[[int, int], None] | None], VerificationReport]
) -> VerificationReport:
    if quiet or not output.err().is_terminal:
        return run(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("reading the log"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=output.err(),
        transient=True,
    ) as progress:
        task = progress.add_task("verify", total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return run(update)


def _print_report(report: VerificationReport) -> None:
    marks = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "skipped": "[dim]-[/]", "not-run": " "}
    say(f"verifying log {report.log_id} ({plural(report.size, 'entry', 'entries')})")
    for step in report.steps:
        where = f" [entry {step.entry}]" if step.entry is not None else ""
        say(
            f" {marks[step.status]} ({step.number}) {step.title}: {step.detail}{where}",
            highlight=False,
        )
    failure = report.first_failure
    if failure is None:
        say("[bold green]PASS[/]")
    else:
        where = f", entry {failure.entry}" if failure.entry is not None else ""
        say(f"[bold red]FAIL[/] at step {failure.number}{where}: {failure.detail}", highlight=False)


if __name__ == "__main__":
    main()
