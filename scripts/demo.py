"""`make demo`: the ledger story on embedded defaults (SQLite, a managed anvil devnet).

1. start (or reuse) the devnet and deploy the anchor registry once;
2. three agents and the operator sign events into the Merkle log;
3. the log is checkpointed and anchored on chain;
4. one entry's inclusion proof is checked against the on-chain root;
5. the whole log is verified as a numbered checklist, chain included.

Runs in $ACCORD_HOME (default ./.accord); run it again and it appends to the same log.
"""

from __future__ import annotations

import sys

from rich.console import Console

from ledger import merkle
from ledger.errors import LedgerError
from ledger.runtime import connect_chain, devnet_for, open_ledger
from ledger.settings import Settings
from ledger.signing import load_or_create_keyfile
from ledger.verify import verify_log

console = Console(emoji=False, highlight=False)


def main() -> int:
    settings = Settings.from_env()
    console.rule("[bold]accord demo: a signed Merkle log anchored on a local chain")
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
    agents = {
        name: load_or_create_keyfile(settings.keys_dir / f"demo-{name}.json")
        for name in ("ada", "grace", "linus")
    }
    console.print(f"\noperator {ledger.operator.did}")
    for name, agent in agents.items():
        console.print(f"agent {name:<6} {agent.did}")

    console.print("\n[bold]Signed events go into the log[/]")
    ledger.append(ledger.operator, "network.opened", subject=ledger.log_id, body={"demo": True})
    for name, agent in agents.items():
        index, entry = ledger.append(agent, "agent.joined", subject=agent.did, body={"name": name})
        console.print(f"  #{index:<4} agent.joined  by {name:<6} seq {entry.event.seq}")
    index, entry = ledger.append(
        agents["ada"], "note.added", subject="demo", body={"text": "hello, network"}
    )
    console.print(f"  #{index:<4} note.added    by ada    seq {entry.event.seq}")
    proven_index = index

    console.print("\n[bold]Checkpoint and anchor[/]")
    assert ledger.anchorer is not None
    outcome = ledger.anchorer.anchor_latest()
    size = ledger.store.size()
    on_chain_root = chain.root_at(ledger.log_id, size)
    console.print(f"  checkpoint: {size} entries, root {ledger.store.root(size).hex()}")
    console.print(
        f"  anchor: {outcome.status}"
        + (f" in block {outcome.block_number}" if outcome.block_number is not None else "")
    )

    console.print("\n[bold]Inclusion proof of the last note against the on-chain root[/]")
    proof = ledger.store.inclusion_proof(proven_index, size)
    assert on_chain_root is not None
    merkle.verify_inclusion(
        ledger.store.entry(proven_index).leaf_hash, proven_index, size, proof, on_chain_root
    )
    console.print(
        f"  [green]✓[/] entry {proven_index} is in the anchored tree ({len(proof)} hashes)"
    )

    console.print("\n[bold]Verify everything[/]")
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
    except LedgerError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        sys.exit(1)
