"""`make demo`: the accord story so far, on embedded defaults (SQLite, a managed anvil devnet,
the built-in reference agents).

1. start (or reuse) the devnet and deploy the anchor registry once;
2. issue credentials: reference agents register by DID-auth, sit capability exams and receive
   verifiable credentials; an agent answering at random fails and gets none;
3. the log is checkpointed and anchored on chain;
4. an exam is re-graded from the log alone, and one entry's inclusion proof is checked against
   the on-chain root;
5. the whole log is verified as a numbered checklist, chain included.

Runs in $ACCORD_HOME (default ./.accord); run it again and it appends to the same log.
"""

from __future__ import annotations

import sys

from rich.console import Console

from identity.agents import AgentRecord
from identity.errors import IdentityError, RateLimitedError, RegistryError
from identity.exams import regrade_from_ledger
from identity.onboarding import Onboarding, open_onboarding
from ledger import merkle
from ledger.errors import LedgerError
from ledger.events import Entry
from ledger.runtime import connect_chain, devnet_for, open_ledger
from ledger.settings import Settings
from ledger.verify import verify_log

console = Console(emoji=False, highlight=False)

#: (name, runtime, capabilities): reference agents do the work; mallory answers at random.
DEMO_AGENTS = (
    ("ada", "reference", ("arithmetic", "retrieval")),
    ("grace", "reference", ("extraction", "python")),
    ("linus", "reference", ("arithmetic", "python")),
    ("mallory", "random", ("arithmetic",)),
)
DEMO_ITEMS = 5


def _agent(onboarding: Onboarding, name: str, runtime: str) -> AgentRecord:
    try:
        return onboarding.registry.get(name)
    except RegistryError:
        return onboarding.registry.new_agent(name, now=onboarding.ledger.clock(), runtime=runtime)


def main() -> int:
    settings = Settings.from_env()
    console.rule("[bold]accord demo: credentials, a signed log, anchors on a local chain")
    console.print(f"home: {settings.home}")

    started_devnet = False
    if settings.managed_devnet:
        info = devnet_for(settings).up()
        started_devnet = not info.reused
        verb = "reusing the running" if info.reused else "started an"
        console.print(f"[green]✓[/] {verb} anvil devnet at {info.rpc_url}")
    chain = connect_chain(settings)
    console.print(f"[green]✓[/] AnchorRegistry at {chain.registry_address()}")

    ledger = open_ledger(settings, chain)
    onboarding = open_onboarding(settings, ledger)
    console.print(f"operator (credential issuer) {ledger.operator.did}")

    console.print("\n[bold]1. Issue credentials to new agents[/]")
    last_exam_index = None
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
            last_exam_index = exam.graded_index
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
    proven_index = ledger.store.size() - 1

    console.print("\n[bold]2. Checkpoint and anchor the log on chain[/]")
    assert ledger.anchorer is not None
    outcome = ledger.anchorer.anchor_latest()
    size = ledger.store.size()
    on_chain_root = chain.root_at(ledger.log_id, size)
    console.print(f"  checkpoint: {size} entries, root {ledger.store.root(size).hex()}")
    console.print(
        f"  anchor: {outcome.status}"
        + (f" in block {outcome.block_number}" if outcome.block_number is not None else "")
    )

    console.print("\n[bold]3. Audit from the log alone[/]")
    if last_exam_index is not None:
        graded = Entry.from_bytes(ledger.store.entry(last_exam_index).data)
        exam_id = graded.event.subject
        earned, possible = regrade_from_ledger(ledger.store, exam_id, ledger.operator.did)
        console.print(
            f"  [green]✓[/] exam {exam_id} re-graded from its logged seed and signed answers: "
            f"{earned}/{possible}, as logged"
        )
    proof = ledger.store.inclusion_proof(proven_index, size)
    assert on_chain_root is not None
    merkle.verify_inclusion(
        ledger.store.entry(proven_index).leaf_hash, proven_index, size, proof, on_chain_root
    )
    console.print(
        f"  [green]✓[/] entry {proven_index} is in the anchored tree ({len(proof)} hashes)"
    )

    console.print("\n[bold]4. Verify everything[/]")
    report = verify_log(ledger.store, ledger.operator.did, chain)
    for step in report.steps:
        mark = "[green]✓[/]" if step.status == "pass" else "[red]✗[/]"
        console.print(f"  {mark} ({step.number}) {step.title}: {step.detail}")
    console.print("[bold green]PASS[/]" if report.ok else "[bold red]FAIL[/]")
    if started_devnet:
        devnet_for(settings).down()
        console.print(f"\nstopped the devnet; its state stays in {settings.devnet_dir}")
    console.print(
        "\nTry: .venv/bin/accord devnet up · ledger show · ledger proof 0 · "
        "ledger verify --json · devnet down"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (LedgerError, IdentityError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        sys.exit(1)
