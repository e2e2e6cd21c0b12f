"""`accord capability|agent|credential …`: identity commands over `accord.identity.onboarding`.

None of them needs the chain: the ledger is opened without one (anchoring catches up later
through `accord ledger anchor`). Exit status 0 success, 1 a failure the message explains
(a credential that does not verify, a rate limit), 2 bad input (nothing is changed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from accord.api import output
from accord.api.output import JsonFlag, emit, fail, say
from accord.identity.errors import (
    CredentialError,
    ExamError,
    IdentityError,
    ProofFormatError,
    RateLimitedError,
    RegistryError,
    SkillError,
)
from accord.ledger.errors import LedgerError, MalformedError
from accord.ledger.settings import Settings

if TYPE_CHECKING:
    from accord.identity.onboarding import Onboarding

capability_app = typer.Typer(help="Capabilities with exams.", no_args_is_help=True)
agent_app = typer.Typer(help="Agents: keys, runtimes, onboarding.", no_args_is_help=True)
credential_app = typer.Typer(help="Capability credentials.", no_args_is_help=True)


@contextmanager
def _errors() -> Iterator[None]:
    """Bad input exits 2, every other expected failure 1, each with one clear line."""
    try:
        yield
    except (RegistryError, ProofFormatError, MalformedError) as exc:
        fail(str(exc), code=2)
    except RateLimitedError as exc:
        fail(str(exc))
    except (IdentityError, LedgerError) as exc:
        fail(str(exc))


def _onboarding(*, read: bool = False) -> Onboarding:
    """The home's onboarding; for a `read`, only over a home that exists (a command that only
    reads never creates one, nor an operator key in it: exit 1 naming the missing home)."""
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)
    from accord.identity.onboarding import open_onboarding

    with _errors():
        if read:
            from accord.ledger.wiring import prepare_home

            prepare_home(settings, create=False)
        return open_onboarding(settings)


# -- capability --------------------------------------------------------------------------------


@capability_app.command("list")
def capability_list(as_json: JsonFlag = False) -> None:
    """The capabilities with exams, their item counts and pass thresholds."""
    from accord.identity.challenges import REGISTRY

    rows = [
        {
            "name": c.name,
            "description": c.description,
            "items": c.item_count,
            "threshold": str(c.threshold),
            "version": c.version,
        }
        for c in REGISTRY.values()
    ]
    if as_json:
        emit(
            [
                {**row, "input_schema": c.input_schema, "output_schema": c.output_schema}
                for row, c in zip(rows, REGISTRY.values(), strict=True)
            ]
        )
        return
    from rich.table import Table

    table = Table(title="capabilities", title_justify="left")
    for column in ("name", "items", "threshold", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row["name"]), str(row["items"]), str(row["threshold"]), str(row["description"])
        )
    say(table)


@capability_app.command("show")
def capability_show(
    name: Annotated[str, typer.Argument(help="The capability, e.g. arithmetic.")],
    as_json: JsonFlag = False,
) -> None:
    """A capability as a skill: its input and output schemas and an example of each."""
    from accord.identity.challenges import get_capability

    try:
        skill = get_capability(name)
    except ExamError as exc:
        fail(str(exc), code=2)
    example_input, example_output = skill.example()
    shown = {
        "name": skill.name,
        "description": skill.description,
        "version": skill.version,
        "input_schema": skill.input_schema,
        "output_schema": skill.output_schema,
        "example": {"input": example_input, "output": example_output},
    }
    if as_json:
        emit(shown)
        return
    say(f"[bold]{skill.name}[/] (version {skill.version})")
    say(skill.description, markup=False)
    for title, value in (
        ("input schema", skill.input_schema),
        ("output schema", skill.output_schema),
        ("example input", example_input),
        ("example output", example_output),
    ):
        say(f"\n[bold]{title}[/]")
        say(json.dumps(value, indent=2, ensure_ascii=False), markup=False, soft_wrap=True)


# -- agent -------------------------------------------------------------------------------------


@agent_app.command("new")
def agent_new(
    name: Annotated[str, typer.Argument(help="A unique name: lower-case letters, digits, -, _.")],
    runtime: Annotated[
        str,
        typer.Option(
            help="What answers for it: reference (built in), random, command, http (an agent "
            "service), openai (an OpenAI-compatible model) or a2a (an A2A agent, by its card)."
        ),
    ] = "reference",
    command: Annotated[
        str | None, typer.Option(help="For --runtime command: item JSON on stdin, answer out.")
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help='For --runtime http: the URL items are POSTed to as {"item": …}, answered '
            'with {"answer": …}. For --runtime openai: the base URL (default OPENAI_BASE_URL).'
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="For --runtime openai: the model (key from OPENAI_API_KEY)."),
    ] = None,
    card: Annotated[
        str | None,
        typer.Option(
            help="For --runtime a2a: the URL of the agent's A2A card (its "
            "/.well-known/agent-card.json when the URL has no path); its signature must verify."
        ),
    ] = None,
    unsigned_card: Annotated[
        bool,
        typer.Option(
            "--unsigned-card",
            help="For --runtime a2a: accept a card that carries no signature at all "
            "(a card whose signature does not verify is refused regardless).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create an agent: a did:key under keys/agents/NAME.json (mode 0600) and a registry row."""
    if unsigned_card and runtime != "a2a":
        fail("--unsigned-card is only for the 'a2a' runtime", code=2)
    onboarding = _onboarding()
    with _errors():
        record = onboarding.registry.new_agent(
            name,
            now=onboarding.ledger.clock(),
            runtime=runtime,
            command=command,
            endpoint=endpoint,
            model=model,
            card=card,
            allow_unsigned_card=unsigned_card,
        )
    if as_json:
        emit(record.to_json())
        return
    say(f"[green]✓[/] agent {record.name}: {record.did} (runtime {record.runtime})")


@agent_app.command("list")
def agent_list(as_json: JsonFlag = False) -> None:
    """Every registered agent."""
    onboarding = _onboarding(read=True)
    with _errors():
        records = onboarding.registry.list()
    if as_json:
        emit([record.to_json() for record in records])
        return
    from rich.table import Table

    table = Table(title=output.plural(len(records), "agent"), title_justify="left")
    for column in ("name", "did", "runtime", "created"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(record.name, record.did, record.runtime, record.created_at)
    say(table)


@agent_app.command("show")
def agent_show(
    agent: Annotated[str, typer.Argument(help="The agent's name or DID.")],
    as_json: JsonFlag = False,
) -> None:
    """One agent and its credentials (a built-in's with its skill id beside its name)."""
    from accord.identity.manifests import skill_id_of

    onboarding = _onboarding(read=True)
    with _errors():
        record = onboarding.registry.get(agent)
        credentials = onboarding.credentials_of(record.did)
        custody = onboarding.registration.custody(record)
    summary = [
        {
            **{key: row[key] for key in ("id", "capability", "issued_at", "revoked_at")},
            "skill_id": skill_id_of(row["capability"]),
        }
        for row in credentials
    ]
    if as_json:
        emit({**record.to_json(), "custody": custody, "credentials": summary})
        return
    say(f"{record.name}  {record.did}")
    say(f"  runtime {record.runtime}" + (f": {record.command}" if record.command else ""))
    custody_text = {
        "self": "self: it keeps its own key",
        "hosted": "hosted: its key is in this home, and the operator signs for it",
        None: "not declared yet: it has not registered",
    }
    say(f"  custody {custody_text[custody]}")
    for row in summary:
        state = f"revoked {row['revoked_at']}" if row["revoked_at"] else "valid"
        skill = row["skill_id"]
        named = (
            row["capability"] if skill == row["capability"] else f"{row['capability']} [{skill}]"
        )
        say(f"  {named}: {row['id']} ({state})")
    if not summary:
        say("  no credentials yet: accord agent onboard " + record.name + " --capability …")


@agent_app.command("onboard")
def agent_onboard(
    agent: Annotated[str, typer.Argument(help="The agent's name or DID.")],
    capability: Annotated[
        list[str], typer.Option("--capability", "-c", help="A capability to be examined in.")
    ],
    items: Annotated[
        int | None, typer.Option(min=1, max=1000, help="Items per exam (default: per capability).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Exam the agent in each capability and issue a credential for each one it passes."""
    from accord.identity.challenges import get_capability

    onboarding = _onboarding()
    with _errors():
        record = onboarding.registry.get(agent)
        for name in capability:
            try:
                get_capability(name)
            except ExamError as exc:
                fail(str(exc), code=2)
        if as_json:
            outcomes = onboarding.onboard(record, capability, item_count=items)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=output.err(),
            ) as progress:
                tasks: dict[str, Any] = {}

                def update(name: str, done: int, total: int) -> None:
                    if name not in tasks:
                        tasks[name] = progress.add_task(f"exam {name}", total=total)
                    progress.update(tasks[name], completed=done)

                outcomes = onboarding.onboard(record, capability, update, item_count=items)
    if as_json:
        emit({"agent": record.to_json(), "results": [o.to_json() for o in outcomes]})
    for outcome in [] if as_json else outcomes:
        exam = outcome.exam
        score = f"{exam.earned}/{exam.possible}"
        if outcome.credential_id:
            say(f"[green]✓[/] {exam.capability}: passed {score}, credential")
            say(f"  {outcome.credential_id}")
            say(f"  {outcome.credential_path}")
        else:
            say(f"[red]✗[/] {exam.capability}: failed {score}, no credential")
    if not all(outcome.exam.passed for outcome in outcomes):
        raise typer.Exit(1)


@agent_app.command("run")
def agent_run(
    server: Annotated[
        str,
        typer.Option("--server", envvar="ACCORD_SERVER", help="The accord service's base URL."),
    ],
    key: Annotated[
        Path,
        typer.Option(help="The agent's did:key file (made, mode 0600, on first use)."),
    ],
    name: Annotated[str, typer.Option(help="The agent's name on the service.")],
    capability: Annotated[
        list[str],
        typer.Option(
            "--capability",
            "-c",
            help="A capability to sit an exam in: a built-in one or a shipped skill by name, "
            "a declared skill by its id.",
        ),
    ],
    handler: Annotated[
        str,
        typer.Option(
            help="What does the work: reference, python:MODULE:FUNCTION, command:PROGRAM ..., "
            "http:URL, openai:MODEL[@BASE_URL] or a2a:CARD_URL."
        ),
    ] = "reference",
    price: Annotated[
        str | None,
        typer.Option(help="Bid this price (0.3eth, 20gwei, wei) on every task it can do."),
    ] = None,
    eth_key: Annotated[
        Path | None,
        typer.Option(help="Its payout account file (default: KEY with .eth.json; made if absent)."),
    ] = None,
    host: Annotated[str, typer.Option(help="The address its own service listens on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="Its port (0: any free one).")] = 0,
    url: Annotated[
        str | None,
        typer.Option(help="The base URL others reach it at (default http://HOST:PORT)."),
    ] = None,
    items: Annotated[
        int | None, typer.Option(min=1, max=1000, help="Items per exam (default: per capability).")
    ] = None,
    reexam: Annotated[
        bool,
        typer.Option(
            help="Sit each exam again, though it holds a valid credential (default: a "
            "capability it holds one for is not examined again)."
        ),
    ] = False,
    poll: Annotated[float, typer.Option(min=0.05, help="Seconds between looks at the market.")] = (
        1.0
    ),
    allow_private: Annotated[
        bool,
        typer.Option(help="Reach team members at loopback or private addresses (local tests)."),
    ] = False,
    policy: Annotated[
        str, typer.Option(help="How it leads the teams of the tasks it wins: rule or llm.")
    ] = "rule",
    model: Annotated[
        str | None, typer.Option(help="The llm policy's model (else ACCORD_LLM_MODEL).")
    ] = None,
    model_endpoint: Annotated[
        str | None,
        typer.Option(help="The llm policy's OpenAI-compatible base URL (else OPENAI_BASE_URL)."),
    ] = None,
    withdraw: Annotated[
        bool,
        typer.Option(
            help="Withdraw its pay to its payout account as soon as it is credited (the "
            "account pays the gas)."
        ),
    ] = False,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="The chain's RPC URL for --withdraw (default: the service's)."),
    ] = None,
    panel: Annotated[
        bool,
        typer.Option(
            help=(
                "Sit on disputes' panels it is drawn for: evaluate the disputed parts by doing "
                "them again with its handler, commit to its vote, then reveal it."
            )
        ),
    ] = True,
) -> None:
    """Run a self-custody agent: its keys stay in KEY's files; it registers, sits an exam in
    each capability it holds no valid credential for, binds its payout account, then bids,
    leads the teams of the tasks it wins and sits on the dispute panels it is drawn for, until
    it is stopped (SIGTERM or Ctrl-C, exit 0). One JSON line on stdout per step."""
    import signal
    import threading

    from accord.client import AccordClient, ApiError
    from accord.coordinator.errors import PolicyError
    from accord.coordinator.llm_policy import leader_policy
    from accord.kit.agent import KitAgent, fixed_price, load_eth_key, load_key
    from accord.kit.handlers import HandlerError, handler_from_spec
    from accord.kit.panel import attach_panel
    from accord.kit.practice import PreflightError
    from accord.kit.wallet import Wallet, WalletError, read_key_file
    from accord.market.errors import AmountError
    from accord.market.money import parse_amount

    def line(event: str, **fields: Any) -> None:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()

    account_file = eth_key or key.with_suffix(".eth.json")
    try:
        signer = load_key(key)
        payout = load_eth_key(account_file)
        runtime = handler_from_spec(handler, allow_private=allow_private, agent_did=signer.did)
        leading = leader_policy(
            policy, model=model, endpoint=model_endpoint, allow_private=allow_private
        )
        strategy = None if price is None else fixed_price(parse_amount(price))
    except (
        HandlerError,
        PolicyError,
        AmountError,
        MalformedError,
        WalletError,
        OSError,
        ValueError,
    ) as exc:
        fail(str(exc), code=2)
    client = AccordClient(server, signer=signer)
    wallet = None
    if withdraw:
        try:
            wallet = Wallet.connect(read_key_file(account_file), client.get("/chain"), rpc_url)
        except ApiError as exc:
            fail(str(exc), code=2 if exc.status is not None and 400 <= exc.status < 500 else 1)
        except WalletError as exc:
            fail(str(exc), code=2)
    agent = KitAgent(
        client,
        signer,
        payout,
        runtime,
        name=name,
        capabilities=capability,
        strategy=strategy,
        policy=leading,
        allow_private=allow_private,
        exam_items=items,
        reexam=reexam,
        wallet=wallet,
        say=line,
    )
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()
        agent.wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        base = agent.start(host, port, url)
        if panel:
            attach_panel(agent)
        agent.join(base)
    except ApiError as exc:
        agent.stop()
        message = str(exc)
        if "ACCORD_ALLOW_PRIVATE_AGENTS" in message:  # the service's setting, not the kit's
            message += (
                f"; this agent registers {url or f'http://{host}:{port}'}: give --url at an "
                "address the service reaches "
                "(--allow-private is for the team members this agent calls)"
            )
        fail(message, code=2 if exc.status is not None and 400 <= exc.status < 500 else 1)
    except PreflightError as exc:
        agent.stop()
        line("preflight-failed", capability=exc.capability, reason=exc.reason[:300])
        fail(str(exc))
    except SkillError as exc:  # a skill the service sent that is not the one its id names
        agent.stop()
        fail(str(exc))
    except OSError as exc:
        agent.stop()
        fail(f"cannot listen on {host}:{port}: {exc}")
    line("ready", did=signer.did, endpoint=base.rstrip("/") + "/run", operator=agent.operator)
    try:
        agent.run_until(stopping, poll_seconds=poll)
    finally:
        agent.stop()


@agent_app.command("answer")
def agent_answer(
    task_id: Annotated[str, typer.Argument(help="The task whose part the requester rejected.")],
    check: Annotated[str, typer.Argument(help="The rejected review check to answer.")],
    amount: Annotated[
        str,
        typer.Option(help="The bond (0.01eth, 20gwei, wei): at least the dispute's fee."),
    ],
    server: Annotated[
        str,
        typer.Option("--server", envvar="ACCORD_SERVER", help="The accord service's base URL."),
    ],
    key: Annotated[Path, typer.Option(help="The agent's did:key file (as `agent run` took).")],
    eth_key: Annotated[
        Path | None,
        typer.Option(help="The account the bond comes from (default: KEY with .eth.json)."),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="The chain's RPC URL (default: the one the service advertises)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Answer the requester's rejection of CHECK with a bond of the team's own, as a member of
    TASK_ID's team (its leader or a producer): TaskEscrow.answer from the account of --eth-key
    (one the agent bound, as `agent run` binds its payout account; it pays the gas), then the
    agent's signed dispute.answered, before the panel's commit window closes. Losing, the
    answer pays the panel's coherent seats and the rest comes back to the account; winning,
    it comes back whole. Run again after a lost reply, it sends and logs nothing twice. Exit 2,
    with nothing sent, when the log shows the service would refuse it (not on the team, no
    such rejection, under its fee, an account the agent did not bind); exit 2 too when the
    service refuses it (the panel's commit window closed) or the contract does (the
    requester's account)."""
    from accord.client import AccordClient, ApiError
    from accord.kit.leader import AnswerError, answer_dispute
    from accord.kit.wallet import Wallet, WalletError, read_key_file
    from accord.ledger.errors import ChainError
    from accord.ledger.signing import read_keyfile
    from accord.market.errors import AmountError, EscrowError, LimitError
    from accord.market.escrow import EscrowRefusedError
    from accord.market.money import format_eth, parse_amount

    account_file = eth_key or key.with_suffix(".eth.json")
    try:
        wei = parse_amount(amount)
        signer = read_keyfile(key)
        key_hex = read_key_file(account_file)
    except (AmountError, LimitError, MalformedError, WalletError) as exc:
        fail(str(exc), code=2)
    try:
        with AccordClient(server, signer=signer) as client:
            wallet = Wallet.connect(key_hex, client.get("/chain"), rpc_url)
            answered = answer_dispute(client, wallet, task_id, check, wei)
    except ApiError as exc:
        fail(str(exc), code=2 if exc.status is not None and 400 <= exc.status < 500 else 1)
    except (AnswerError, EscrowRefusedError) as exc:
        fail(str(exc), code=2)
    except (WalletError, EscrowError, ChainError) as exc:
        fail(str(exc))
    if as_json:
        emit(answered)
    else:
        told = "answered already" if answered["already"] else "answered"
        say(
            f"{told} the rejection of {check} of {task_id} with "
            f"{format_eth(int(str(answered['amount'])))} from {answered['account']} "
            f"(entry {answered['index']})"
        )


@agent_app.command("withdraw")
def agent_withdraw(
    agent: Annotated[
        str | None,
        typer.Argument(help="Without --server: the agent (name or DID) whose key this home holds."),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option("--server", envvar="ACCORD_SERVER", help="The accord service's base URL."),
    ] = None,
    key: Annotated[
        Path | None, typer.Option(help="The agent's did:key file (as `agent run` took).")
    ] = None,
    eth_key: Annotated[
        Path | None,
        typer.Option(help="Its payout account file (default: KEY with .eth.json)."),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="The chain's RPC URL (default: the one the service advertises)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Pull an agent's pay from the escrow to its payout account. A self-custody agent:
    --server URL --key KEY, signed with its payout account's key (KEY.eth.json or --eth-key),
    which pays the gas (covered on the devnet the service manages). An agent whose key this
    home holds (`accord agent new`): AGENT, without --server. Exit 1 when there is nothing to
    withdraw."""
    from accord.client import AccordClient, ApiError
    from accord.kit.wallet import Wallet, WalletError, read_key_file
    from accord.ledger.errors import ChainError
    from accord.market.errors import EscrowError
    from accord.market.money import format_eth

    if server is None:
        if agent is None:
            fail("give --server URL --key KEY (your own keys), or AGENT (one this home holds)", 2)
        if key is not None or eth_key is not None or rpc_url is not None:
            fail("--key, --eth-key and --rpc-url go with --server URL", 2)
        from accord.api.market_cli import hosted_withdraw

        hosted_withdraw(agent, as_json)
        return
    if agent is not None:
        fail(
            f"with --server the agent is the one --key holds: drop {agent!r} "
            "(AGENT names an agent this home holds, without --server)",
            2,
        )
    if key is None:
        fail("with --server give --key KEY: the agent's did:key file (as `agent run` took)", 2)
    account_file = eth_key or key.with_suffix(".eth.json")
    try:
        key_hex = read_key_file(account_file)
    except (WalletError, OSError) as exc:
        fail(f"{account_file}: {exc}", code=2)
    try:
        with AccordClient(server) as client:
            chain = client.get("/chain")
        wallet = Wallet.connect(key_hex, chain, rpc_url)
        credit = wallet.credit()
        if credit == 0:
            fail(f"nothing to withdraw for {wallet.address}")
        sent = wallet.withdraw()
    except ApiError as exc:
        fail(str(exc), code=2 if exc.status is not None and 400 <= exc.status < 500 else 1)
    except (WalletError, EscrowError, ChainError) as exc:
        fail(str(exc))
    result = {
        "address": wallet.address,
        "amount": str(credit),
        "tx_hash": sent.tx_hash,
        "block_number": sent.block_number,
    }
    if as_json:
        emit(result)
    else:
        say(f"withdrew {format_eth(credit)} to {wallet.address} (tx {sent.tx_hash})")


# -- credential --------------------------------------------------------------------------------


@credential_app.command("show")
def credential_show(
    credential_id: Annotated[str, typer.Argument(help="urn:uuid:… (or the bare uuid).")],
    as_json: JsonFlag = False,
) -> None:
    """One issued credential, with its revocation state."""
    onboarding = _onboarding(read=True)
    with _errors():
        row = onboarding.credential(credential_id)
    if as_json:
        emit(row)
        return
    say(json.dumps(row["document"], indent=2, sort_keys=True), markup=False)
    state = f"revoked {row['revoked_at']}: {row['revocation_reason']}" if row["revoked_at"] else ""
    say(state or "not revoked", markup=False)


@credential_app.command("verify")
def credential_verify(
    source: Annotated[
        str,
        typer.Argument(
            help="A credential JSON file, or the URL of one (a service's GET /credentials/ID)."
        ),
    ],
    holder: Annotated[str | None, typer.Option(help="Require this subject DID.")] = None,
    capability: Annotated[str | None, typer.Option(help="Require this capability.")] = None,
    issuer: Annotated[
        str | None,
        typer.Option(
            help="Trust this issuer DID. Without it: this home's operator, or, with no home "
            "and a credential fetched from a service's URL, that service's operator (its "
            "signed card says which DID) when the credential's status list is there too."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the verification checklist; exit 1 naming the first step that fails. Its status
    list is read where the credential names it. A read: with --issuer, or with no home, it
    needs no home and creates none."""
    from accord.api.credential_check import (
        FetchError,
        TrustedIssuer,
        credential_document,
        fetch_json,
        published_issuer,
        verify_outside,
    )

    try:
        if source.startswith(("http://", "https://")):
            document = credential_document(fetch_json(source))
        else:
            document = credential_document(json.loads(Path(source).read_text()))
    except FetchError as exc:
        fail(f"cannot read a JSON credential from {source}: {exc}", code=2)
    except (OSError, ValueError) as exc:
        fail(f"cannot read a JSON credential from {source}: {exc}", code=2)
    trusted: TrustedIssuer | None = None
    try:
        if issuer is not None:
            trusted = TrustedIssuer(issuer, "named with --issuer")
        elif not _has_home():
            fetched_from = source if source.startswith(("http://", "https://")) else None
            trusted = published_issuer(document, fetched_from)
        if trusted is None:
            verified = _onboarding(read=True).verify(
                document, holder_did=holder, capability=capability
            )
        else:
            verified = verify_outside(document, trusted, holder=holder, capability=capability)
    except (FetchError, RegistryError) as exc:
        fail(f"cannot tell whom to trust: {exc}")
    except CredentialError as exc:
        if as_json:
            emit({"valid": False, "step": exc.step, "reason": exc.reason})
            raise typer.Exit(1) from None
        fail(f"not valid at step {exc.step}: {exc.reason}")
    data = {
        "valid": True,
        "id": verified.id,
        "issuer": verified.issuer,
        "subject": verified.subject,
        "capability": verified.capability,
        "score": {"earned": verified.earned, "possible": verified.possible},
        "valid_until": verified.document["validUntil"],
    }
    if trusted is not None:
        data["trusted_because"] = trusted.because
    if as_json:
        emit(data)
        return
    say(f"[green]✓[/] valid: {verified.capability} for {verified.subject}")
    if trusted is not None:
        say(f"  issued by {verified.issuer}, {trusted.because}", markup=False)


def _has_home() -> bool:
    """Whether this command runs with an accord home (its database there), found without
    creating one."""
    from accord.ledger.errors import HomeError
    from accord.ledger.wiring import prepare_home

    try:
        prepare_home(Settings.from_env(), create=False)
    except ValueError as exc:
        fail(str(exc), code=2)
    except HomeError as exc:
        if exc.missing:
            return False
        fail(str(exc))
    return True


@credential_app.command("revoke")
def credential_revoke(
    credential_id: Annotated[str, typer.Argument(help="urn:uuid:… (or the bare uuid).")],
    reason: Annotated[str, typer.Option(help="Why it is revoked (logged).")],
    as_json: JsonFlag = False,
) -> None:
    """Revoke: flip its status bit, re-sign the status list, log `credential.revoked`."""
    onboarding = _onboarding()
    with _errors():
        index = onboarding.revoke(credential_id, reason)
        row = onboarding.credential(credential_id)
    if as_json:
        emit({"credential_id": row["id"], "revoked_at": row["revoked_at"], "index": index})
        return
    say(f"[green]✓[/] revoked {row['id']} (log entry {index})")
