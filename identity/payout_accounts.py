"""Agents' payout accounts: the secp256k1 key each one is paid to, and its binding on the log.

`accord.identity.payout` makes and checks a binding (signed by the agent's DID key and by its payout
account); this module keeps the account keys (`<keys>/agents/<name>.eth.json`, mode 0600) and
logs the bindings as `payout.bound` events, the agent's own (`bind_payout_signed`, for a remote
agent that holds its keys) or made here (`bind_payout`).
"""

from __future__ import annotations

import json
import os
import secrets

from accord.identity.agents import AgentRecord, AgentRegistry
from accord.identity.errors import BindingError, KeyStoreError
from accord.identity.exams import check_agent_entry
from accord.identity.payout import bind_payout_address, verify_binding
from accord.ledger.events import Entry
from accord.ledger.service import Ledger

PAYOUT_BOUND_KIND = "payout.bound"


class PayoutAccounts:
    """Payout addresses of the agents in `registry`, bound on `ledger`."""

    def __init__(self, ledger: Ledger, registry: AgentRegistry) -> None:
        self.ledger = ledger
        self.registry = registry

    def payout_address(self, did: str, chain_id: int) -> str | None:
        """The address `did` bound for payouts on `chain_id` (its latest valid binding)."""
        found = self.ledger.store.find(kind=PAYOUT_BOUND_KIND, actor=did, limit=1000)
        for stored in reversed(found):
            binding = Entry.from_bytes(stored.data).event.body.get("binding")
            try:
                bound_did, address = verify_binding(binding or {}, chain_id=chain_id)
            except BindingError:
                continue
            if bound_did == did:
                return address
        return None

    def bind_payout(self, agent: AgentRecord, chain_id: int) -> str:
        """Give the agent a secp256k1 payout account (a key file, mode 0600, made once) and
        log its binding, signed by both keys, unless one is already bound. Returns the address.

        Raises KeyStoreError when the key file is unreadable.
        """
        existing = self.payout_address(agent.did, chain_id)
        if existing is not None:
            return existing
        from eth_account import Account  # slow to import; only binding needs it

        account = Account.from_key(self.payout_key(agent))
        signer = self.registry.signer(agent)
        binding = bind_payout_address(
            signer, account, chain_id, secrets.token_hex(16), self.ledger.clock()
        )
        self.ledger.append(signer, PAYOUT_BOUND_KIND, subject=agent.did, body={"binding": binding})
        return str(account.address)

    def payout_key(self, agent: AgentRecord) -> str:
        """The agent's payout account key (hex), made on first use (mode 0600).

        Raises KeyStoreError when the key file is unreadable.
        """
        path = self.registry.agent_keys_dir / f"{agent.name}.eth.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            key = "0x" + secrets.token_bytes(32).hex()
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as handle:
                    json.dump({"did": agent.did, "key": key}, handle)
        try:
            document = json.loads(path.read_text())
            return str(document["key"])
        except (OSError, ValueError, KeyError) as exc:
            raise KeyStoreError(f"cannot read the payout key {path}: {exc}") from exc

    def bind_payout_signed(self, agent: AgentRecord, entry: Entry, chain_id: int) -> str:
        """Log a `payout.bound` entry the agent signed itself, carrying its binding (signed by
        its DID key and its payout account); returns the bound address.

        Raises BindingError when the binding does not verify, is for another chain or another
        DID; ExamError when the entry is not the agent's `payout.bound` event with exactly
        `{"binding": ...}`; SequenceError for a seq that is not the agent's next.
        """
        binding = entry.event.body.get("binding")
        if not isinstance(binding, dict):
            raise BindingError("a payout.bound body is {binding}")
        check_agent_entry(
            entry,
            actor=agent.did,
            kind=PAYOUT_BOUND_KIND,
            subject=agent.did,
            body={"binding": binding},
            now=self.ledger.clock(),
        )
        bound_did, address = verify_binding(binding, chain_id=chain_id)
        if bound_did != agent.did:
            raise BindingError(f"the binding is {bound_did}'s, not {agent.did}'s")
        self.ledger.append_entries([entry])
        return address
