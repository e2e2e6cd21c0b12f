"""`make demo`: the accord story so far, on embedded defaults (SQLite, a managed anvil devnet,
the built-in reference agents).

1. start (or reuse) the devnet and deploy the anchor registry once;
2. issue credentials: reference agents register by DID-auth, sit capability exams and receive
   verifiable credentials; an agent answering at random fails and gets none;
3. post the requester's own work (scripts/demo_work/task.json: an invoice to check, four
   parts and five checks) with its budget escrowed on chain; credentialed agents send sealed
   bids (cost plus margin), the uncredentialed one is refused; reveal; the auction awards it;
4. the winner leads a team conversation (sync and async assignments, a nested sub-team) that
   does the parts; the requester gets the deliverable: each part's output and its producer;
5. the checks run, the team is paid by Shapley value on chain (the leader's plan and assembly
   earn it a share), and everyone withdraws;
6. the log is anchored, the collaboration audited from the log and the chain;
7. a copy in which a part's output is changed (every entry re-signed, the log re-anchored)
   fails the audit at the settlement step: the checks re-run;
8. the whole log is verified as a numbered checklist, chain included.

Runs in $ACCORD_HOME (default ./.accord); run it again and it appends to the same log.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

from accord.api import output
from accord.api.audit_cli import print_report
from accord.api.coordinator_cli import describe
from accord.audit.checks import audit_task
from accord.audit.forgery import change_output, forge_copy
from accord.audit.html import render_html
from accord.coordinator.conversation import Conversation, Message
from accord.coordinator.errors import CoordinatorError
from accord.coordinator.service import agent_names, run_awarded_task
from accord.identity.agents import AgentRecord
from accord.identity.errors import IdentityError, KeyStoreError, RateLimitedError, RegistryError
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.database import make_engine
from accord.ledger.errors import LedgerError
from accord.ledger.sealing import seal
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer, load_or_create_keyfile
from accord.ledger.store import LogStore
from accord.ledger.verify import verify_log
from accord.ledger.wiring import connect_chain, devnet_for, open_ledger
from accord.market.errors import BidRejected, MarketError
from accord.market.escrow import address_of
from accord.market.money import Wei, format_eth, parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import deliverable_view, settle_task
from accord.market.strategies import cost_plus_margin
from accord.market.wiring import MarketContext, open_market
from accord.market.work import attach_files

console = output.out()
"""stdout as every `accord` command prints it: wrapped at a terminal's width, never in a file or
a pipe, so a DID, a credential id or a transaction hash stays on one line."""


def heading(title: str) -> None:
    """A bold title over a rule as wide as the title (a rule as wide as an unwrapped console
    would be 100,000 characters long)."""
    console.print(f"[bold]{title}[/]")
    console.print("─" * len(title))


#: (name, runtime, capabilities): reference agents do the work; mallory answers at random.
DEMO_AGENTS = (
    ("ada", "reference", ("arithmetic", "extraction")),
    ("linus", "reference", ("arithmetic", "extraction")),
    ("grace", "reference", ("extraction", "python")),
    ("hopper", "reference", ("arithmetic",)),
    ("mallory", "random", ("arithmetic",)),
)
DEMO_ITEMS = 5
#: What each agent's work costs it; reference agents bid cost plus a 20% margin.
DEMO_COSTS = {"ada": "0.12eth", "linus": "0.10eth", "mallory": "0.01eth"}
DEMO_MARGIN = Fraction(1, 5)
DEMO_SPEC = Path(__file__).resolve().parent / "demo_work" / "task.json"


def _tamper_copy_and_audit(
    settings: Settings, ledger: Ledger, task_id: str, context: MarketContext
) -> int | None:
    """A copy of the log in which the `lines-sum` part's output is changed (a new output
    sealed, its commitment put everywhere the old one was named), every changed entry
    re-signed by its own actor's key and the copy anchored anew: signatures and anchors hold,
    and the audit, given the sealed outputs, still fails at the settlement step."""
    forged = seal("2585.00")

    def outputs(commitment: str) -> bytes | None:
        if commitment == forged.commitment:
            return forged.data
        return context.market.sealed_bytes(commitment)

    keys: dict[str, Signer] = {ledger.operator.did: ledger.operator}
    for agent in context.onboarding.registry.list():
        with contextlib.suppress(RegistryError, KeyStoreError):
            keys[agent.did] = context.onboarding.registry.signer(agent)
    posted = ledger.store.find(kind="task.posted", subject=task_id, limit=1)[0].index
    with tempfile.TemporaryDirectory() as scratch:
        copy = LogStore(make_engine(f"sqlite:///{Path(scratch) / 'copy.db'}"), ledger.log_id)
        anchors = forge_copy(
            ledger.store,
            copy,
            keys,
            lambda _, event: change_output(event.body, "lines-sum", forged.commitment),
            ledger.operator,
            ledger.clock,
            start=posted,
        )
        report = audit_task(
            copy, task_id, anchors=anchors, escrow=context.escrow.chain, outputs=outputs
        )
        copy.engine.dispose()
    failure = report.first_failure
    console.print(
        "  in a copy, lines-sum's output 2585.50 becomes 2585.00 (sealed anew; its commitment "
        "replaces the old one in every entry that names it);"
    )
    console.print("  each changed entry is re-signed by its own key and the copy anchored anew")
    if failure is None:
        console.print("  [bold red]the tampered copy passed the audit: this is a bug[/]")
        return None
    console.print(
        f"  [green]✓[/] the audit of the copy fails at step {failure.number}, "
        f"entry {failure.entry}: {failure.detail}"
    )
    return failure.number


def _sleep_until(moment: datetime) -> None:
    delay = (moment - datetime.now(UTC)).total_seconds()
    if delay > 0:
        time.sleep(delay + 0.05)


def _agent(onboarding: Onboarding, name: str, runtime: str) -> AgentRecord:
    try:
        return onboarding.registry.get(name)
    except RegistryError:
        return onboarding.registry.new_agent(name, now=onboarding.ledger.clock(), runtime=runtime)


def main() -> int:
    settings = Settings.from_env()
    heading("accord demo: credentials, a paid task, a log anchored on chain")
    console.print(f"home: {settings.home}")

    started_devnet = False
    if settings.managed_devnet:
        info = devnet_for(settings).up()
        started_devnet = not info.reused
        verb = "reusing the running" if info.reused else "started an"
        console.print(f"[green]✓[/] {verb} anvil devnet at {info.rpc_url}")
    try:
        return _story(settings)
    finally:
        if started_devnet:
            devnet_for(settings).down()
            console.print(f"\nstopped the devnet; its state stays in {settings.devnet_dir}")


def _story(settings: Settings) -> int:
    chain = connect_chain(settings)
    console.print(f"[green]✓[/] AnchorRegistry at {chain.registry_address()}")

    ledger = open_ledger(settings, chain)
    onboarding = open_onboarding(settings, ledger)
    console.print(f"operator (credential issuer) {ledger.operator.did}")

    console.print("\n[bold]1. Issue credentials to new agents[/]")
    for name, runtime, capabilities in DEMO_AGENTS:
        agent = _agent(onboarding, name, runtime)
        held = {
            c["capability"] for c in onboarding.credentials_of(agent.did) if c["revoked_at"] is None
        }
        todo = [c for c in capabilities if c not in held]
        console.print(f"  {name:<8} {agent.did}  ({runtime} agent)")
        if not todo:
            console.print(f"           already holds {', '.join(capabilities)}")
            continue
        try:
            outcomes = onboarding.onboard(agent, todo, item_count=DEMO_ITEMS)
        except RateLimitedError as exc:
            console.print(
                f"           exam attempts rate-limited: retry in {exc.retry_after:.0f} s"
            )
            continue
        for outcome in outcomes:
            exam = outcome.exam
            if outcome.credential_id is not None:
                console.print(
                    f"           [green]✓[/] {exam.capability}: {exam.earned}/{exam.possible} "
                    f"→ credential {outcome.credential_id}"
                )
            else:
                console.print(
                    f"           [red]✗[/] {exam.capability}: {exam.earned}/{exam.possible} "
                    "→ below the threshold, no credential"
                )

    console.print("\n[bold]2. Post a paid task and collect sealed bids[/]")
    context = open_market(settings, ledger, onboarding)
    market = context.market
    requester = load_or_create_keyfile(settings.keys_dir / "demo-requester.json")
    request = json.loads(DEMO_SPEC.read_text())
    request["parts"], files = attach_files(
        request["parts"], lambda name: (DEMO_SPEC.parent / name).read_bytes()
    )
    for name, data in files.items():
        console.print(f"  stored {name}: sha256 {market.upload_file(requester.did, data).sha256}")
    spec = market.spec_from_request(request, requester=requester.did)
    task = market.post(requester, spec, requester_key=context.default_requester_key())
    deposit = context.escrow.deposit_of(task.task_id)
    console.print(
        f"  {task.task_id}: {spec.title!r}, budget {format_eth(spec.budget)} "
        f"escrowed on chain ({format_eth(deposit[0]) if deposit else 'missing!'})"
    )
    for part in spec.parts:
        console.print(f"    part  {part.part_id:<15} {part.capability}")
    for check in spec.requester_checks:
        console.print(
            f"    check {check.check_id:<15} {check.kind:<7} weight {check.weight} "
            f"on {', '.join(check.reads)}"
        )
    salts: dict[str, tuple[Wei, bytes]] = {}
    for name, cost in DEMO_COSTS.items():
        agent = onboarding.registry.get(name)
        signer = onboarding.registry.signer(agent)
        price = cost_plus_margin(parse_amount(cost), DEMO_MARGIN, spec.budget)
        if price is None:
            continue
        salt = secrets.token_bytes(32)
        try:
            market.commit(commit_bid(signer, task.task_id, price, salt))
        except BidRejected as exc:
            console.print(f"  [red]✗[/] {name:<8} refused: {exc.reason} (lacks a credential)")
            continue
        salts[name] = (price, salt)
        console.print(f"  [green]✓[/] {name:<8} sealed bid committed (price hidden)")
    _sleep_until(task.bidding_ends)
    for name, (price, salt) in salts.items():
        signer = onboarding.registry.signer(onboarding.registry.get(name))
        market.reveal(reveal_bid(signer, task.task_id, price, salt))
        console.print(f"  {name:<8} reveals {format_eth(price)}")
    _sleep_until(task.reveal_ends)
    outcome = market.award(task.task_id)
    if outcome.winner is not None:
        winner = onboarding.registry.get(outcome.winner.bidder).name
        console.print(
            f"  [green]✓[/] awarded to {winner} at {format_eth(outcome.price)} "
            f"({outcome.rule} rule: the price at which its score ties the runner-up)"
        )

        console.print(f"\n[bold]3. {winner} leads a team through the work[/]")
        names = agent_names(context)

        def show(conversation: Conversation, message: Message) -> None:
            indent = "  " * (conversation.depth + 1)
            console.print(
                f"{indent}[dim]t{conversation.turn:02d}[/] {describe(message, names)}"
                f" [dim]→ {conversation.state}[/]"
            )

        run_awarded_task(context, task.task_id, observer=show)
        result = deliverable_view(market, task.task_id)
        console.print(
            f"  [green]✓[/] the deliverable (sha256 {result['sha256']}; the log holds only its "
            "commitments, and the requester reads it once the settlement is computed):"
        )
        for entry in result["parts"]:
            output = json.dumps(entry.get("output"), ensure_ascii=False)
            console.print(
                f"    {entry['part']:<15} by {names.get(entry['producer'], '?'):<7} {output}"
            )

        console.print("\n[bold]4. Run the checks, settle by Shapley value, on chain[/]")
        settled = settle_task(market, onboarding, task.task_id)
        for check in deliverable_view(market, task.task_id)["checks"] or []:
            mark = "[green]✓[/]" if check["passed"] else "[red]✗[/]"
            console.print(f"  {mark} {check['id']:<30} {check['share']:>6} of v  {check['detail']}")
        for player, payout in sorted(settled.payouts.items(), key=lambda kv: -kv[1]):
            role = " (leader: plan and assembly)" if player == outcome.winner.bidder else ""
            console.print(
                f"  {names.get(player, player):<8} {format_eth(payout):>24}  "
                f"(Shapley value {settled.values.get(player)}){role}"
            )
        console.print(f"  back to the requester: {format_eth(settled.refund)}")
        for player, payout in settled.payouts.items():
            if payout == 0:
                continue
            record = onboarding.registry.get(player)
            key = onboarding.payout_key(record)
            context.fund_gas(address_of(key), Wei(10**16))
            context.escrow.withdraw(key)
        console.print("  [green]✓[/] every payee withdrew its credit from the escrow")

    console.print("\n[bold]5. Checkpoint and anchor the log on chain[/]")
    assert ledger.anchorer is not None
    outcome = ledger.anchorer.anchor_latest()
    size = ledger.store.size()
    console.print(f"  checkpoint: {size} entries, root {ledger.store.root(size).hex()}")
    console.print(
        f"  anchor: {outcome.status}"
        + (f" in block {outcome.block_number}" if outcome.block_number is not None else "")
    )

    console.print("\n[bold]6. Audit the collaboration from the log and the chain[/]")
    outsider = audit_task(ledger.store, task.task_id, anchors=chain, escrow=context.escrow.chain)
    held = outsider.facts.get("outputs", {}).get("checks_held_to_log", [])
    console.print(
        f"  an outsider with the log and the chain only: {outsider.verdict}, with "
        f"{len(held)} checks held to the operator's signed verdicts (the outputs are sealed)"
    )
    console.print("  the requester (or anyone it hands the sealed outputs to) re-runs them all:")
    audited = audit_task(
        ledger.store,
        task.task_id,
        anchors=chain,
        escrow=context.escrow.chain,
        outputs=market.sealed_bytes,
    )
    print_report(audited, console)
    html_path = settings.home / f"audit-{task.task_id}.html"
    html_path.write_text(render_html(audited, ledger.store))
    console.print(f"  readable report: {html_path}")

    console.print("\n[bold]7. Tampering is caught[/]")
    _tamper_copy_and_audit(settings, ledger, task.task_id, context)

    console.print("\n[bold]8. Verify the whole log[/]")
    report = verify_log(ledger.store, ledger.operator.did, chain)
    for step in report.steps:
        mark = "[green]✓[/]" if step.status == "pass" else "[red]✗[/]"
        console.print(f"  {mark} ({step.number}) {step.title}: {step.detail}")
    console.print("[bold green]PASS[/]" if report.ok else "[bold red]FAIL[/]")
    console.print(
        "\nTry: .venv/bin/accord devnet up · ledger show · ledger proof 0 · "
        "ledger verify --json · devnet down"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (LedgerError, IdentityError, MarketError, CoordinatorError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        sys.exit(1)
