"""A requester that holds its own keys: its did:key signs its `task.posted` (the service never
holds it), and its Ethereum account (`accord.kit.wallet.Wallet`) funds the escrow itself.

    with AccordClient(url, signer=my_did_key) as client:
        requester = Requester(client, Wallet.from_key_file(path, client.get("/chain")))
        posted = requester.post(spec)                 # prepare, sign, POST /tasks {"entry"}
        requester.deposit(posted)                     # TaskEscrow.open from its own account
        requester.wait_until_bidding(posted.task_id)  # the service saw the deposit
        ...
        requester.deliverable(posted.task_id)         # once delivered
        requester.withdraw()                          # refunds, the unpaid rest of a budget

The HTTP flow underneath (any language can do the same): `POST /tasks/prepare` with the spec
and the account answers the `task.posted` body to sign, its task id and idempotency key;
`POST /tasks` with `{"entry": ...}` and that `Idempotency-Key` logs it and answers `escrow`,
the deposit to make. Posting the same entry again with the key is safe: it answers the same
task, and has the service look for the deposit at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from accord.client import AccordClient, ApiError
from accord.kit.wallet import Sent, Wallet, WalletError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import AccordError
from accord.ledger.events import Entry, parse_time
from accord.ledger.fast_entries import make_entry
from accord.market.money import Wei
from accord.market.payouts import bond_owed, dispute_fee
from accord.market.tasks import CHECKS_PREVIEWED, REVIEW_GIVEN

JsonObject = dict[str, Any]
IDEMPOTENCY_HEADER = "Idempotency-Key"
WAITING_STATES = ("posted",)
ENTRIES_PAGE = 1000
"""Entries asked per `GET /ledger/entries` (the most the route gives)."""


@dataclass(frozen=True)
class Posted:
    """A task this requester posted: its id, the idempotency key its id derives from, the
    signed `task.posted` entry, and the service's answer (the task, and `escrow`: the call
    that opens its escrow)."""

    task_id: str
    idempotency_key: str
    entry: JsonObject
    answer: JsonObject

    @property
    def escrow(self) -> JsonObject:
        return cast(JsonObject, self.answer["escrow"])


class Requester:
    """A requester over `client` (whose signer is the requester's own did:key) paying from
    `wallet` (its own Ethereum account)."""

    def __init__(self, client: AccordClient, wallet: Wallet) -> None:
        if client.signer is None:
            raise ApiError("a requester's client signs as the requester: give it a signer")
        self.client = client
        self.wallet = wallet

    @property
    def did(self) -> str:
        assert self.client.signer is not None
        return self.client.signer.did

    def prepare(self, spec: Mapping[str, Any], *, idempotency_key: str | None = None) -> JsonObject:
        """`POST /tasks/prepare`: the `task.posted` to sign for `spec`, paid from the
        wallet's account. Raises ApiError (an invalid spec is 422 naming its path)."""
        headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
        body = {"spec": dict(spec), "escrow_from": self.wallet.address}
        answer = self.client.request("POST", "/tasks/prepare", json=body, headers=headers)
        return cast(JsonObject, answer)

    def post(self, spec: Mapping[str, Any], *, idempotency_key: str | None = None) -> Posted:
        """Post `spec` signed by the requester's own key; nothing is deposited yet (see
        `deposit`). With the same `idempotency_key` again, the same task. Raises ApiError."""
        prepared = self.prepare(spec, idempotency_key=idempotency_key)
        entry = self.sign_prepared(prepared)
        key = str(prepared["idempotency_key"])
        answer = self._post_entry(entry, key)
        return Posted(str(prepared["task_id"]), key, entry, answer)

    def sign_prepared(self, prepared: Mapping[str, Any]) -> JsonObject:
        """The `task.posted` entry `prepare` answered, signed by this requester: what
        `POST /tasks` takes, or an A2A `SendMessage` in `metadata.accord.entry`."""
        assert self.client.signer is not None
        return make_entry(
            self.client.signer,
            kind=str(prepared["kind"]),
            seq=int(prepared["seq"]),
            at=parse_time(str(prepared["server_time"])),
            subject=str(prepared["subject"]),
            body=prepared["body"],
        ).to_json()

    def _post_entry(self, entry: JsonObject, key: str) -> JsonObject:
        return cast(
            JsonObject,
            self.client.request(
                "POST", "/tasks", json={"entry": entry}, headers={IDEMPOTENCY_HEADER: key}
            ),
        )

    def deposit(self, posted: Posted) -> Sent:
        """Open the task's escrow from the wallet: the call the service answered, checked by
        the wallet before it signs (see `Wallet.deposit`). A task that no longer waits for its
        deposit (closed unfunded, cancelled, …: a retry of an old posting) gets none.

        Raises WalletError for such a task (nothing is sent), and what `Wallet.deposit` raises.
        """
        state = posted.answer.get("state")
        if state not in (*WAITING_STATES, "bidding", None):
            raise WalletError(
                f"{posted.task_id} is {state}: it takes no deposit (one sent now would come back "
                "only after its escrow deadline). Post it again under a new idempotency key"
            )
        return self.wallet.deposit(posted.task_id, posted.escrow)

    def wait_until_bidding(
        self, posted: Posted, *, timeout: float = 60.0, poll: float = 0.5
    ) -> JsonObject:
        """The task once the service has seen its deposit (its state past `posted`): the
        posting is sent again (idempotent), which has the service look at the chain at once,
        then the task is read every `poll` seconds. Raises ApiError after `timeout` seconds,
        saying what the service knows."""
        deadline = time.monotonic() + timeout
        while True:
            task = self._post_entry(posted.entry, posted.idempotency_key)
            if task.get("state") not in WAITING_STATES:
                return task
            if time.monotonic() >= deadline:
                raise ApiError(
                    f"{posted.task_id} still takes no bids after {timeout:g} s: the service has "
                    "not seen its deposit (was it sent from the account the posting names, with "
                    "the budget and the deadline the service answered?)"
                )
            time.sleep(poll)

    def task(self, task_id: str) -> JsonObject:
        return self.client.task(task_id)

    def deliverable(self, task_id: str) -> JsonObject:
        """The delivered work as its requester may read it (`GET /tasks/{id}/deliverable`)."""
        return self.client.deliverable(task_id)

    def review(
        self, task_id: str, check: str, verdict: str, reason: str | None = None
    ) -> JsonObject:
        """Accept or reject a review check of the delivered work, with the requester's own
        signed `review.given`; a rejection needs a `reason`, and holds the dispute fee
        (`accord.market.payouts.dispute_fee` of the price) that the service checks it names.
        When the escrow does not hold the fee of every rejection beyond the price (a lone
        bidder is paid the whole budget), the wallet bonds what is missing first from the
        requester's own account (`TaskEscrow.bond`), its earlier rejections read from the log
        (`rejections`: a restarted requester bonds right). A rejection names the chain's
        head block (`after_block`): its panel is drawn with the hash of the next one."""
        body: JsonObject = {"task_id": task_id, "check": check, "verdict": verdict}
        if verdict == "reject":
            task = self.task(task_id)
            price = Wei(int(task.get("price") or 0))
            fee = dispute_fee(price)
            budget = int(task["spec"]["budget"])
            bonded = self.wallet.chain.bonded(task_id)
            short = bond_owed(budget, price, len(self.rejections(task_id)), bonded)
            if short > 0:
                self.wallet.bond(task_id, Wei(short))
            body |= {
                "reason": (reason or "").strip(),
                "fee": str(fee),
                "after_block": self.wallet.head(),
            }
        entry = self.client.entry("review.given", task_id, body)
        path = f"/tasks/{quote(task_id, safe='')}/reviews"
        return cast(JsonObject, self.client.request("POST", path, json={"entry": entry}))

    def rejections(self, task_id: str) -> list[str]:
        """The review checks of `task_id` this requester rejected, as the service's log holds
        them (`GET /ledger/entries?kind=review.given&subject=…`): only the entries this
        requester's own key signed count, so a restarted requester bonds what its rejections
        need, and a service cannot have it bond for rejections it never made. Raises ApiError
        (a page that does not move on included)."""
        found: set[str] = set()
        start = 0
        while True:
            params: dict[str, str | int] = {
                "kind": REVIEW_GIVEN,
                "subject": task_id,
                "from": start,
                "limit": ENTRIES_PAGE,
            }
            page = cast(JsonObject, self.client.get("/ledger/entries", params=params))
            rows = page.get("entries") or []
            for row in rows:
                check = self._own_rejection(row, task_id)
                if check is not None:
                    found.add(check)
            if len(rows) < ENTRIES_PAGE:
                return sorted(found)
            try:
                after = int(rows[-1]["index"]) + 1
            except (KeyError, TypeError, ValueError) as exc:
                raise ApiError(f"GET /ledger/entries answered a row with no index: {exc}") from exc
            if after <= start:
                raise ApiError(f"GET /ledger/entries from {start} answered entries before it")
            start = after

    def _own_rejection(self, row: Mapping[str, Any], task_id: str) -> str | None:
        """The check a logged row rejects, when it is this requester's own signed rejection
        of `task_id` (else None: another's, altered, or not a rejection)."""
        try:
            entry = Entry.from_bytes(canonical_json({k: row[k] for k in ("event", "kid", "sig")}))
            entry.verify()
        except (AccordError, KeyError, TypeError, ValueError):
            return None
        event = entry.event
        body = event.body
        if event.actor != self.did or event.kind != REVIEW_GIVEN or event.subject != task_id:
            return None
        if body.get("task_id") != task_id or body.get("verdict") != "reject":
            return None
        check = body.get("check")
        return check if isinstance(check, str) else None

    def inconclusive(self, task_id: str) -> dict[str, str]:
        """The python checks of `task_id` the service found inconclusive in the review window
        (check id -> why), from its signed `checks.previewed` (`GET /ledger/entries`): the
        ones this requester may contest, until the window ends, by rejecting them
        (`review(task_id, check, "reject", reason)`). Empty before the service has looked, or
        when every check decided. Raises ApiError."""
        params: dict[str, str | int] = {"kind": CHECKS_PREVIEWED, "subject": task_id, "limit": 1}
        page = cast(JsonObject, self.client.get("/ledger/entries", params=params))
        for row in page.get("entries") or []:
            try:
                entry = Entry.from_bytes(
                    canonical_json({k: row[k] for k in ("event", "kid", "sig")})
                )
                entry.verify()
            except (AccordError, KeyError, TypeError, ValueError):
                continue
            event = entry.event
            named = event.body.get("inconclusive")
            if event.kind == CHECKS_PREVIEWED and event.subject == task_id:
                return (
                    {str(c): str(d) for c, d in (named or {}).items()}
                    if isinstance(named, Mapping)
                    else {}
                )
        return {}

    def cancel(self, task_id: str) -> JsonObject:
        """End a posted task whose escrow never opened, with the requester's own signed
        `task.cancelled` (e.g. after a stranger opened an escrow under its key first)."""
        entry = self.client.entry("task.cancelled", task_id, {"task_id": task_id})
        path = f"/tasks/{quote(task_id, safe='')}/cancel"
        return cast(JsonObject, self.client.request("POST", path, json={"entry": entry}))

    def credit(self) -> Wei:
        """What the escrow holds for the wallet's account (refunds, a budget's unpaid rest)."""
        return self.wallet.credit()

    def withdraw(self) -> Sent:
        """Pull the wallet's whole credit from the escrow, signed with its own key."""
        return self.wallet.withdraw()
