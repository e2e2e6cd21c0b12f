"""The audit of an outsider: from what a service publishes and from the chain, in this process.

    with published_log("https://accord.example") as published:
        anchors, escrow = published_chains(published, rpc_url=None)
        report = audit_task(published.store, task_id, anchors=anchors, escrow=escrow)

What comes from the service, and how it is checked:

- the log's entries (`GET /ledger/entries`, every page): each one rebuilt as its canonical
  signed bytes, which must parse; indices contiguous from 0, each actor's seq growing. The
  checklist then verifies every signature and proves the entries against the roots on chain,
  so an entry the service altered, left out or made up fails there;
- the signed checkpoints (`GET /ledger/checkpoints`): each must parse and be signed by the key
  it names; the latest one's signer is the operator the checklist holds operator acts to;
- where the chain is (`GET /chain`): its id, the escrow's and the anchor registry's addresses
  and the JSON-RPC URL it advertises (or the auditor's own, `rpc_url`). The node must be on
  that chain id, and each address must hold accord's contract code (an address holding other
  code could emit any events it likes).

What comes from the chain alone: the anchored roots (the registry's `Anchored` events) and the
escrow's events (deposit, payouts, refunds). A service cannot change either after the fact;
what it could do is publish another registry it also operates, holding roots of a rewritten
log: the registry's address is in the report (`on_chain`), for an auditor to compare with the
one it saw before.

Nothing is written to disk: the fetched log lives in an in-memory SQLite `LogStore`, gone
when the block ends.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool

from accord.audit.checks import STEP_TITLES, AuditReport
from accord.audit.errors import PublishedLogError
from accord.ledger.canonical import canonical_json
from accord.ledger.chain import AnchorChain
from accord.ledger.checkpoint import SignedCheckpoint
from accord.ledger.errors import ChainError, ChainUnavailableError, LedgerError
from accord.ledger.events import Entry
from accord.ledger.store import LogStore
from accord.ledger.verify import STEP_TITLES as VERIFY_TITLES
from accord.ledger.verify import StepResult, VerificationReport
from accord.market.escrow.chain import EscrowChain

PAGE = 1000
"""Entries asked per `GET /ledger/entries` (the most the route gives)."""


@dataclass(frozen=True)
class Refusal:
    """Something the service published does not hold as a log: `reason`, the entry it is
    about (None: a checkpoint), and the step of `accord ledger verify` that checks it."""

    reason: str
    entry: int | None
    verify_step: int


@dataclass(frozen=True)
class ServiceChain:
    """Where the service says its escrow and anchors are (`GET /chain`, `/ledger/checkpoints`)."""

    chain_id: int
    rpc_url: str | None
    escrow: str
    registry: str | None


@dataclass
class PublishedLog:
    """The service's log, copied into `store` (in memory) up to the first entry that does not
    hold (`refusal`); `operator` is the signer of its latest checkpoint (None: it has none)."""

    server: str
    store: LogStore
    chain: ServiceChain
    operator: str | None
    refusal: Refusal | None


@contextmanager
def published_log(server: str) -> Iterator[PublishedLog]:
    """What the service at `server` publishes: its log in an in-memory store, its checkpoints
    and where its chain is; the store is gone when the block ends.

    Raises PublishedLogError when the service cannot be reached or answers in another shape.
    """
    from accord.client import AccordClient, ApiError

    engine = create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    try:
        with AccordClient(server) as client:
            first = _get(client, "/ledger/entries", {"from": 0, "limit": 1})
            log_id = _field(first, "log_id", str, "/ledger/entries")
            store = LogStore(engine, log_id, once_per_subject=())  # the checklist finds repeats
            refusal = _copy_entries(client, store)
            checkpoints = _get(client, "/ledger/checkpoints")
            operator, refused_checkpoint = _copy_checkpoints(store, checkpoints)
            chain = _service_chain(_get(client, "/chain"), checkpoints)
        yield PublishedLog(server, store, chain, operator, refusal or refused_checkpoint)
    except ApiError as exc:
        raise PublishedLogError(str(exc)) from exc
    finally:
        engine.dispose()


def published_chains(
    published: PublishedLog, rpc_url: str | None = None
) -> tuple[AnchorChain, EscrowChain]:
    """The anchor registry and the escrow the service names, read through `rpc_url` (default:
    the JSON-RPC URL the service advertises). Checks that the node is on the service's chain
    and that both addresses hold accord's contracts.

    Raises ChainError naming what does not hold (no URL, a node that does not answer or is
    on another chain, an address that is none or holds other code, no registry).
    """
    from eth_utils.address import to_checksum_address

    from accord.ledger.chain.values import REGISTRY_CONTRACT
    from accord.ledger.chain.web3_chain import Web3AnchorChain, make_web3, mapped_chain_errors
    from accord.ledger.contracts import load_artifact
    from accord.market.escrow.values import ESCROW_CONTRACT
    from accord.market.escrow.web3_chain import Web3EscrowChain

    chain = published.chain
    url = rpc_url or chain.rpc_url
    if url is None:
        raise ChainError(
            f"{published.server} advertises no JSON-RPC URL (its chain is external): give "
            f"--rpc-url, a node of chain {chain.chain_id}"
        )
    if chain.registry is None:
        raise ChainError(
            f"{published.server} names no anchor registry: nothing of its log is anchored yet"
        )
    try:
        w3 = make_web3(url)
    except ValueError as exc:
        raise ChainError(f"the RPC URL {url!r} must start with http:// or https://") from exc
    try:
        with mapped_chain_errors(url, "reading the service's contracts"):
            node_chain = int(w3.eth.chain_id)
            if node_chain != chain.chain_id:
                raise ChainError(
                    f"the node at {url} is chain {node_chain}, but {published.server} escrows "
                    f"on chain {chain.chain_id}"
                )
            for name, address in (
                (ESCROW_CONTRACT, chain.escrow),
                (REGISTRY_CONTRACT, chain.registry),
            ):
                try:
                    checksummed = to_checksum_address(address)
                except ValueError:
                    raise ChainError(
                        f"{published.server} names {address!r} as its {name}: not an address"
                    ) from None
                code = bytes(w3.eth.get_code(checksummed))
                if not load_artifact(name).deployed_code_matches(code):
                    raise ChainError(
                        f"the {name} {published.server} names, {address}, does not hold "
                        f"accord's {name} code on chain {node_chain}"
                    )
    except ChainUnavailableError as exc:
        source = "given with --rpc-url" if rpc_url else f"{published.server} advertises"
        raise ChainError(
            f"the node {source}, {url}, does not answer ({exc.__cause__ or exc}): give "
            f"--rpc-url, a node of chain {chain.chain_id}"
        ) from exc
    # The registry is only read: the key it is built with signs nothing.
    anchors = Web3AnchorChain(url, "0x" + secrets.token_hex(32), chain.registry)
    return anchors, Web3EscrowChain(url, chain.escrow)


def refused_audit(task_id: str, refusal: Refusal) -> AuditReport:
    """The audit's report on a published log that does not hold: step 1 fails, as the local
    audit's does on such a store (`accord.audit.checks._signed_log`)."""
    report = AuditReport(task_id)
    report.steps.append(StepResult(1, STEP_TITLES[1], "fail", refusal.reason, refusal.entry))
    for number in sorted(STEP_TITLES)[1:]:
        report.steps.append(StepResult(number, STEP_TITLES[number], "not-run", "-"))
    return report


def refused_verification(published: PublishedLog, refusal: Refusal) -> VerificationReport:
    """`accord ledger verify`'s report on a published log that does not hold: the step that
    checks what does not hold fails; the others are not run (what was copied stops there)."""
    steps: list[StepResult] = []
    for number in sorted(VERIFY_TITLES):
        title = VERIFY_TITLES[number]
        if number < refusal.verify_step:
            steps.append(
                StepResult(number, title, "not-run", f"step {refusal.verify_step} failed first")
            )
        elif number == refusal.verify_step:
            steps.append(StepResult(number, title, "fail", refusal.reason, refusal.entry))
        else:
            steps.append(StepResult(number, title, "not-run", "an earlier step failed"))
    return VerificationReport(published.store.log_id, published.store.size(), tuple(steps))


# -- reading the service ------------------------------------------------------------------------


def _get(client: Any, path: str, params: Mapping[str, str | int] | None = None) -> Any:
    """The JSON object the service answers `path` with (a rate-limited read waits as the
    client's Retry-After rule says). Raises PublishedLogError, ApiError."""
    answer = client.get(path, params=params)
    if not isinstance(answer, dict):
        raise PublishedLogError(f"GET {client.base_url}{path} did not answer a JSON object")
    return answer


def _field(value: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    found = value.get(name)
    if not isinstance(found, kind) or isinstance(found, bool):
        raise PublishedLogError(f"the answer of {where} has no {kind.__name__} {name!r}")
    return found


def _copy_entries(client: Any, store: LogStore) -> Refusal | None:
    """Every entry the service publishes, appended to `store` in order; the first that does
    not hold (no canonical signed entry, an index out of order, a seq that does not grow)
    is returned as a Refusal and nothing after it is copied. Raises PublishedLogError."""
    last_seq: dict[str, int] = {}
    while True:
        start = store.size()
        page = _get(client, "/ledger/entries", {"from": start, "limit": PAGE})
        if page.get("log_id") != store.log_id:
            raise PublishedLogError("the service's log changed its id while it was read")
        rows = _field(page, "entries", list, "/ledger/entries")
        batch: list[Entry] = []
        refusal: Refusal | None = None
        for row in rows:
            entry, refusal = _checked_entry(row, start + len(batch), last_seq)
            if entry is None:
                break
            last_seq[entry.event.actor] = entry.event.seq
            batch.append(entry)
        store.append_batch(batch)
        if refusal is not None:
            return refusal
        if len(rows) < PAGE:
            size = _field(page, "size", int, "/ledger/entries")
            if store.size() < size:
                return Refusal(
                    f"entry {store.size()} is missing from the log (its head counts {size})",
                    store.size(),
                    1,
                )
            return None


def _checked_entry(
    row: Any, index: int, last_seq: Mapping[str, int]
) -> tuple[Entry, None] | tuple[None, Refusal]:
    """The entry a published row carries at `index`, or why it does not hold there."""
    if not isinstance(row, dict) or row.get("index") != index:
        found = row.get("index") if isinstance(row, dict) else None
        return None, Refusal(
            f"entry {index} is missing from the log (the next one published is {found})",
            index,
            1,
        )
    try:
        entry = _entry_of(row)
    except LedgerError as exc:
        return None, Refusal(f"entry {index}: {exc}", index, 1)
    event = entry.event
    last = last_seq.get(event.actor, -1)
    if event.seq <= last:
        return None, Refusal(
            f"entry {index}: seq {event.seq} of {event.actor} does not grow (it signed "
            f"seq {last} before)",
            index,
            2,
        )
    return entry, None


def _entry_of(row: Mapping[str, Any]) -> Entry:
    """The canonical signed entry a published row carries. Raises MalformedError,
    CanonicalizationError."""
    return Entry.from_bytes(canonical_json({k: v for k, v in row.items() if k != "index"}))


def _copy_checkpoints(
    store: LogStore, answer: Mapping[str, Any]
) -> tuple[str | None, Refusal | None]:
    """The published checkpoints saved into `store`; returns the latest one's signer and the
    first that does not parse, is not signed by the key it names or is of another log."""
    rows = _field(answer, "checkpoints", list, "/ledger/checkpoints")
    signer: str | None = None
    for row in rows:
        document = row.get("checkpoint") if isinstance(row, dict) else None
        try:
            signed = SignedCheckpoint.from_bytes(canonical_json(document))
            signed.verify(signed.signer_did)
        except LedgerError as exc:
            return signer, Refusal(f"a published checkpoint does not hold: {exc}", None, 4)
        checkpoint = signed.checkpoint
        if checkpoint.log_id != store.log_id:
            return signer, Refusal(
                f"checkpoint {checkpoint.size} is for log {checkpoint.log_id!r}, not "
                f"{store.log_id!r}",
                None,
                4,
            )
        store.save_checkpoint(checkpoint.size, checkpoint.root, checkpoint.at, signed.data)
        signer = signed.signer_did
    return signer, None


def _service_chain(answer: Mapping[str, Any], checkpoints: Mapping[str, Any]) -> ServiceChain:
    """`GET /chain`, with the registry it names or else the one of the latest anchor the
    checkpoints list."""
    rpc_url = answer.get("rpc_url")
    registry = answer.get("registry_contract")
    if not isinstance(registry, str):
        anchored = [
            row["anchor"]["registry"]
            for row in checkpoints.get("checkpoints", [])
            if isinstance(row, dict)
            and isinstance(row.get("anchor"), dict)
            and isinstance(row["anchor"].get("registry"), str)
        ]
        registry = anchored[-1] if anchored else None
    return ServiceChain(
        chain_id=_field(answer, "chain_id", int, "/chain"),
        rpc_url=rpc_url if isinstance(rpc_url, str) else None,
        escrow=_field(answer, "escrow_contract", str, "/chain"),
        registry=registry,
    )
