"""`Home`: one accord home (database, keys, chain) driven from Python, as the CLI drives it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from accord.audit.checks import AuditReport, audit_task
from accord.coordinator.conversation import Conversation
from accord.coordinator.service import run_awarded_task
from accord.identity.agents import AgentRecord
from accord.identity.onboarding import CapabilityOutcome
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.wiring import devnet_for, wait_until
from accord.market.auction import AuctionOutcome
from accord.market.deliverable import Deliverable
from accord.market.money import Wei, parse_amount
from accord.market.sealed import check_within_budget, commit_bid, reveal_bid
from accord.market.settlement import SettleOutcome, deliverable_view, settle_task
from accord.market.tasks import Task, TaskSpec
from accord.market.views import TaskPage
from accord.market.wiring import MarketContext, open_market

Agent = AgentRecord | str


@dataclass
class Home:
    """An accord home: its market, credentials and ledger (`context`), and the sealed bids this
    process committed and has yet to reveal. Raises what the packages raise: LedgerError,
    IdentityError, MarketError, CoordinatorError and their subclasses."""

    context: MarketContext
    _sealed: dict[str, list[tuple[Signer, Wei, bytes]]] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return self.context.settings

    def agent(self, agent: Agent) -> AgentRecord:
        """A registered agent by name or DID (or the record itself)."""
        if isinstance(agent, AgentRecord):
            return agent
        return self.context.onboarding.registry.get(agent)

    def new_agent(self, name: str, *, runtime: str = "reference", **options: Any) -> AgentRecord:
        """A new did:key agent; `options` are the runtime's (command, endpoint, model)."""
        onboarding = self.context.onboarding
        return onboarding.registry.new_agent(
            name, now=onboarding.ledger.clock(), runtime=runtime, **options
        )

    def onboard(
        self, agent: Agent, capabilities: Sequence[str], *, items: int | None = None
    ) -> list[CapabilityOutcome]:
        """Register the agent by DID-auth, sit one exam per capability, issue a credential
        for each one passed."""
        return self.context.onboarding.onboard(
            self.agent(agent), list(capabilities), item_count=items
        )

    def spec(self, request: Mapping[str, Any]) -> TaskSpec:
        """A task spec from a request (the JSON of `accord task post --spec`)."""
        return self.context.market.spec_from_request(dict(request))

    def post(
        self, request: Mapping[str, Any] | TaskSpec, *, requester: Agent | None = None
    ) -> Task:
        """Post a task (a spec, or its request JSON), its budget escrowed from the managed
        devnet's funded requester account (or ACCORD_REQUESTER_ETH_KEY)."""
        import os

        spec = request if isinstance(request, TaskSpec) else self.spec(request)
        signer = self.context.signer_for(None if requester is None else self.agent(requester).did)
        key = os.environ.get("ACCORD_REQUESTER_ETH_KEY") or self.context.default_requester_key()
        return self.context.market.post(signer, spec, requester_key=key)

    # -- reading ---------------------------------------------------------------------------

    def tasks(
        self,
        *,
        state: str | None = None,
        capability: str | None = None,
        requester: Agent | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskPage:
        """One page of tasks, oldest posting first: those in `state` now (as `state()` says
        it), needing `capability`, posted by `requester` (an agent, by name or DID, or a
        requester's DID); at most `limit` (1..200, default 50), after `cursor` (the
        `next_cursor` of the page before; None on the last page). Raises QueryError naming
        a bad parameter."""
        if isinstance(requester, AgentRecord):
            requester = requester.did
        elif requester is not None and not requester.startswith("did:"):
            requester = self.agent(requester).did
        return self.context.market.list_tasks(
            state=state, capability=capability, requester=requester, limit=limit, cursor=cursor
        )

    def task(self, task_id: str) -> Task:
        """The task replayed from its events. Raises TaskError when there is none."""
        return self.context.market.task(task_id)

    def state(self, task: Task | str) -> str:
        """The task's state now: `Task.state`, with the clock ending bidding (`revealing`)."""
        return self.context.market.state(task if isinstance(task, Task) else self.task(task))

    def deliverable(self, task_id: str) -> Deliverable:
        """What the requester gets back (`result` as a typed value): each part's producer and
        output, the plan, and once settled each check's verdict and the payouts. Raises
        TaskError before delivery, BlobError or SettlementError for altered stored work."""
        return Deliverable.from_view(self.result(task_id))

    def bid(self, task_id: str, agent: Agent, price: str | int) -> int:
        """Commit a sealed bid for `agent`; the price and salt stay in this `Home` until
        `reveal_bids`. Returns the entry's log index. Raises BidRejected (``over-budget``)
        for a price above the task's budget, before anything is sent."""
        signer = self.context.signer_for(self.agent(agent).did)
        amount = Wei(price) if isinstance(price, int) else parse_amount(price)
        check_within_budget(task_id, amount, self.task(task_id).spec.budget)
        salt = secrets.token_bytes(32)
        index = self.context.market.commit(commit_bid(signer, task_id, amount, salt))
        self._sealed.setdefault(task_id, []).append((signer, amount, salt))
        return index

    def reveal_bids(self, task_id: str, *, wait: bool = True) -> list[int]:
        """Reveal every bid this `Home` committed to the task, first waiting (with `wait`) for
        the bidding window to close."""
        if wait:
            self._wait_until(self.task(task_id).bidding_ends)
        indexes = [
            self.context.market.reveal(reveal_bid(signer, task_id, amount, salt))
            for signer, amount, salt in self._sealed.pop(task_id, [])
        ]
        return indexes

    def award(self, task_id: str, *, wait: bool = True) -> AuctionOutcome:
        """Clear the auction, first waiting (with `wait`) for the reveal window to close."""
        if wait:
            self._wait_until(self.task(task_id).reveal_ends)
        return self.context.market.award(task_id)

    def _wait_until(self, moment: datetime) -> None:
        wait_until(moment, self.context.market.clock)

    def run(self, task_id: str) -> Conversation:
        """The winner's team does the parts and delivers (the rule policy)."""
        return run_awarded_task(self.context, task_id)

    def result(self, task_id: str) -> dict[str, Any]:
        """The deliverable as JSON (`accord task result --json`); `deliverable` types it."""
        return deliverable_view(self.context.market, task_id)

    def settle(self, task_id: str) -> SettleOutcome:
        """Run the checks and pay the team by Shapley value through the escrow (once)."""
        return settle_task(self.context.market, self.context.onboarding, task_id)

    def audit(self, task_id: str) -> AuditReport:
        """The audit checklist of a task, from the log and the chain (anchors the log first):
        `AuditReport.ok`, and each step's verdict with the first one that failed."""
        ledger = self.context.market.ledger
        chains = self.context.escrow.chain
        if ledger.anchorer is not None:
            ledger.anchorer.anchor_latest()
            anchors = ledger.anchorer.chain
        else:
            from accord.ledger.wiring import connect_chain

            anchors = connect_chain(self.settings, start_devnet=False)
        market = self.context.market
        return audit_task(
            ledger.store, task_id, anchors=anchors, escrow=chains, outputs=market.sealed_bytes
        )


@contextmanager
def open_home(
    home: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Iterator[Home]:
    """An accord home at `home` (else ACCORD_HOME, else ./.accord), with its managed devnet
    started if needed and stopped again on exit when this call started it."""
    import os

    env = dict(os.environ if environ is None else environ)
    if home is not None:
        env["ACCORD_HOME"] = str(home)
    settings = Settings.from_env(env)
    started = False
    if settings.managed_devnet:
        started = not devnet_for(settings).up().reused
    try:
        yield Home(open_market(settings))
    finally:
        if started:
            devnet_for(settings).down()
