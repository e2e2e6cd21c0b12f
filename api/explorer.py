"""The web audit explorer: pick a task, see how it went and whether the audit holds.

`explorer_router(context_provider)` serves plain server-rendered HTML (a little JavaScript
filters the timeline by conversation):

    GET /explorer                       the tasks in the log, newest first
    GET /explorer/tasks/{task_id}       verdict, audit checklist, the deliverable (each part's
                                        output and producer, the leader's plan), each check's
                                        result, payouts chart (inline SVG), team tree, bids
                                        after reveal and the award, conversation timeline,
                                        and every ledger entry the task touched
    GET /explorer/entries/{i}/proof     an entry, its RFC 9162 inclusion proof, and the
                                        on-chain anchor (block, root) that covers it

Everything shown is read from the ledger and the chain (as `accord audit` does); every value
is escaped. `context_provider` is called once per request and returns the store, the anchor
chain and the escrow chain (see `sources_from_settings`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from html import escape
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse

from accord.audit.checks import AuditReport, audit_task
from accord.audit.html import (
    agent_names,
    checks_html,
    deliverable_html,
    move_kind,
    settlement_entry,
)
from accord.coordinator.conversation import message_from_json
from accord.coordinator.errors import CoordinatorError
from accord.coordinator.runner import CONVERSATION_MESSAGE
from accord.ledger import merkle
from accord.ledger.chain import AnchorChain, OnChainAnchor
from accord.ledger.errors import LedgerError, MalformedError, ProofError
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.store import LogStore
from accord.market.blobs import BlobStore
from accord.market.escrow import EscrowChain
from accord.market.money import format_eth
from accord.market.tasks import BID_REVEALED, TASK_AWARDED, TASK_KINDS, TASK_POSTED

MAX_TASKS_LISTED = 200
MAX_EVENTS = 100_000


class ExplorerSources(Protocol):
    """What the pages read: the log, the anchors on chain, the escrow on chain."""

    @property
    def store(self) -> LogStore: ...

    @property
    def anchors(self) -> AnchorChain: ...

    @property
    def escrow(self) -> EscrowChain: ...


@dataclass(frozen=True)
class ExplorerContext:
    store: LogStore
    anchors: AnchorChain
    escrow: EscrowChain


def sources_from_settings(settings: Settings) -> ExplorerContext:
    """Open the log and the chains as `accord audit` does (the devnet must be running).

    Raises LedgerError, MarketError.
    """
    from accord.ledger.runtime import connect_chain, open_store
    from accord.market.runtime import connect_escrow

    store = open_store(settings)
    anchors = connect_chain(settings, start_devnet=False)
    escrow, _ = connect_escrow(settings, start_devnet=False)
    return ExplorerContext(store, anchors, escrow)


def explorer_router(context_provider: Callable[[], ExplorerSources]) -> APIRouter:
    """The explorer's routes; include it in an app with `app.include_router(...)`."""
    router = APIRouter(tags=["explorer"])

    @router.get("/explorer", response_class=HTMLResponse, summary="Pick a task to explore")
    def explorer_index() -> HTMLResponse:
        return HTMLResponse(render_index(context_provider().store))

    @router.get(
        "/explorer/tasks/{task_id}",
        response_class=HTMLResponse,
        summary="A task's audit: verdict, checklist, team, bids, payouts, timeline",
        responses={404: {"description": "No such task in the log"}},
    )
    def explorer_task(task_id: str) -> HTMLResponse:
        sources = context_provider()
        if not sources.store.find(kind=TASK_POSTED, subject=task_id, limit=1):
            return _not_found(f"The log holds no task {task_id!r}.")
        # The service re-runs the checks on the outputs it holds; the page shows only their
        # commitments and the verdicts (`accord.market.privacy`).
        report = audit_task(
            sources.store,
            task_id,
            anchors=sources.anchors,
            escrow=sources.escrow,
            outputs=BlobStore(sources.store.engine).sealed,
        )
        return HTMLResponse(render_task(sources.store, report))

    @router.get(
        "/explorer/entries/{index}/proof",
        response_class=HTMLResponse,
        summary="An entry's inclusion proof and the on-chain anchor that covers it",
        responses={404: {"description": "No such entry in the log"}},
    )
    def explorer_proof(index: Annotated[int, Path(ge=0, le=MAX_ENTRY_INDEX)]) -> HTMLResponse:
        sources = context_provider()
        try:
            stored = sources.store.entry(index)
        except IndexError:
            return _not_found(f"The log has no entry {index}.")
        return HTMLResponse(render_proof(sources.store, sources.anchors, index, stored.data))

    return router


# -- reading the log -------------------------------------------------------------------------


def _events(store: LogStore, limit: int = MAX_EVENTS, **query: Any) -> list[tuple[int, Entry]]:
    out = []
    for stored in store.find(limit=limit, **query):
        try:
            out.append((stored.index, Entry.from_bytes(stored.data)))
        except MalformedError:
            continue  # the audit names it; the page shows what parses
    return out


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    title: str
    budget: str
    posted_at: str
    state: str
    index: int


def list_tasks(store: LogStore, limit: int = MAX_TASKS_LISTED) -> list[TaskRow]:
    rows = []
    for index, entry in _events(store, kind=TASK_POSTED, newest_first=True, limit=limit):
        event = entry.event
        spec = event.body.get("spec", {})
        lifecycle = _events(store, subject=event.subject, kinds=TASK_KINDS)
        state = lifecycle[-1][1].event.kind.split(".", 1)[-1] if lifecycle else "posted"
        rows.append(
            TaskRow(
                event.subject,
                str(spec.get("title", "")),
                str(spec.get("budget", "0")),
                event.at,
                state,
                index,
            )
        )
    return rows


# -- pieces of HTML --------------------------------------------------------------------------


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _short(did: str | None) -> str:
    if not did:
        return "-"
    return did if len(did) < 24 else did[:12] + "…" + did[-5:]


def _agent(did: str | None, names: Mapping[str, str]) -> str:
    """An agent's name with its DID on hover (escaped)."""
    if not did:
        return '<span class="muted">-</span>'
    name = names.get(did)
    label = name if name else _short(did)
    return f'<span class="agent" title="{_e(did)}">{_e(label)}</span>'


_CUSTODY_TEXT = {
    "hosted": "hosted: the operator holds its key, so its signatures prove only that the "
    "operator signed",
    "self": "self: it keeps its own key",
}


def _custody(facts: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """Each actor of the task but the operator, with who holds its key (`agent.registered`)."""
    custody = facts.get("custody") or {}
    if not custody:
        return '<p class="muted">No agent signed for this task.</p>'
    rows = "".join(
        f'<tr class="custody" data-custody="{_e(held)}"><td>{_agent(did, names)}</td>'
        f"<td>{_e(_CUSTODY_TEXT.get(held, held))}</td></tr>"
        for did, held in sorted(custody.items(), key=lambda kv: (kv[1], names.get(kv[0], kv[0])))
    )
    return f"<table><tr><th>signer</th><th>custody</th></tr>{rows}</table>"


def eth(wei: int | str) -> str:
    """Wei as ETH for display, exact and without trailing zeros."""
    return format_eth(int(wei))


MAX_ENTRY_INDEX = 2**62
"""Larger indices cannot be a log position (SQLite integers are 64-bit)."""


def _entry_link(index: int | None) -> str:
    if index is None or index < 0:
        return ""
    return f'<a class="entry" href="/explorer/entries/{int(index)}/proof">#{int(index)}</a>'


def _fraction_text(value: str) -> str:
    try:
        fraction = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return value
    return str(fraction) if fraction.denominator == 1 else f"{fraction} ≈ {float(fraction):.3f}"


_STYLE = """
:root { --ink: #1d2330; --muted: #6b7385; --line: #e4e7ee; --bg: #f6f7fb; --card: #fff;
  --accent: #3457d5; --pass: #1e7b45; --pass-bg: #e3f4ea; --fail: #b3261e; --fail-bg: #fbe4e2; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--ink); background: var(--bg); }
header.top { background: #1d2330; color: #fff; padding: .7rem 2rem; display: flex;
  gap: 1.5rem; align-items: baseline; }
header.top a { color: #c9d4ff; text-decoration: none; } header.top b { font-size: 1.05rem; }
main { max-width: 1080px; margin: 1.5rem auto 4rem; padding: 0 1.5rem; }
h1 { font-size: 1.5rem; margin: .2rem 0 .3rem; display: flex; gap: .8rem; align-items: center;
  flex-wrap: wrap; }
h2 { font-size: 1.1rem; margin: 0 0 .8rem; }
section.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 1.1rem 1.3rem; margin: 1rem 0; box-shadow: 0 1px 2px rgba(20,30,60,.04); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: .8rem; }
.fact { background: var(--bg); border-radius: 8px; padding: .55rem .8rem; }
.fact .k { font-size: .75rem; text-transform: uppercase; letter-spacing: .04em;
  color: var(--muted); } .fact .v { font-weight: 600; word-break: break-all; }
.verdict { font-size: 1rem; font-weight: 700; padding: .2rem .9rem; border-radius: 999px;
  letter-spacing: .06em; }
.verdict.pass { color: var(--pass); background: var(--pass-bg); border: 1px solid #b5dfc5; }
.verdict.fail { color: var(--fail); background: var(--fail-bg); border: 1px solid #f0b9b4; }
.verdict.incomplete { color: #8a5a00; background: #fff4d6; border: 1px solid #f0d48a; }
.muted { color: var(--muted); } code, .mono { font: .85em ui-monospace, "SFMono-Regular",
  Menlo, monospace; } .agent { font-weight: 600; border-bottom: 1px dotted var(--muted); }
table { border-collapse: collapse; width: 100%; }
th { text-align: left; font-size: .78rem; text-transform: uppercase; letter-spacing: .04em;
  color: var(--muted); font-weight: 600; padding: .35rem .5rem; border-bottom: 2px solid
  var(--line); } td { padding: .45rem .5rem; border-bottom: 1px solid var(--line);
  vertical-align: top; } tr:last-child td { border-bottom: 0; }
a { color: var(--accent); } a.entry { font: .85em ui-monospace, Menlo, monospace;
  text-decoration: none; background: #eef1fd; padding: .05rem .35rem; border-radius: 4px; }
ol.checklist { list-style: none; padding: 0; margin: 0; }
ol.checklist li { display: grid; grid-template-columns: 2rem 1fr auto; gap: .6rem;
  padding: .55rem 0; border-bottom: 1px solid var(--line); } ol.checklist li:last-child
  { border-bottom: 0; } .mark { width: 1.6rem; height: 1.6rem; border-radius: 50%;
  display: grid; place-items: center; font-weight: 700; color: #fff; }
.mark.pass { background: var(--pass); } .mark.fail { background: var(--fail); }
.mark.not-run, .mark.skipped { background: #c4c9d4; }
.mark.unchecked { background: #e0a800; }
.step-title { font-weight: 600; } .step-detail { color: var(--muted); font-size: .92em; }
ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 1.4rem; }
ul.tree { padding-left: 0; } ul.tree ul { border-left: 2px solid var(--line);
  margin-left: .6rem; } ul.tree li { margin: .5rem 0; }
.conv { display: inline-block; border: 1px solid var(--line); border-radius: 8px;
  padding: .45rem .7rem; background: #fbfcff; cursor: pointer; }
.conv:hover, .conv.on { border-color: var(--accent); box-shadow: 0 0 0 2px #dfe6ff; }
.chip { display: inline-block; background: #eef1fd; border-radius: 999px;
  padding: 0 .55rem; margin: .1rem .15rem 0 0; font-size: .85em; }
.chip.lead { background: #ffe9c7; } .tag { font-size: .75rem; padding: .05rem .45rem;
  border-radius: 4px; background: #eef1f6; color: var(--muted); }
.tag.win { background: var(--pass-bg); color: var(--pass); font-weight: 700; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tl-depth-1 td:first-child { padding-left: 1.2rem; } .tl-depth-2 td:first-child
  { padding-left: 2.2rem; } .tl-depth-1, .tl-depth-2 { background: #fafbfe; }
tr.hidden { display: none; } .nowrap { white-space: nowrap; }
.kind { font-size: .78rem; font-weight: 600; padding: .05rem .45rem; border-radius: 4px;
  background: #eef1f6; } .kind.conclude { background: var(--pass-bg); color: var(--pass); }
.kind.assign_sync, .kind.assign_async { background: #e8edff; color: #2b45a8; }
.kind.report { background: #fff1dc; color: #8a5300; }
.kind.abandon { background: var(--fail-bg); color: var(--fail); }
.entries { display: flex; flex-wrap: wrap; gap: .35rem; }
a.entry-chip { font-size: .8rem; text-decoration: none; color: var(--ink); background: #f3f5fa;
  border: 1px solid var(--line); border-radius: 6px; padding: .1rem .45rem; }
a.entry-chip b { color: var(--accent); font: .85em ui-monospace, Menlo, monospace; }
a.entry-chip:hover { border-color: var(--accent); }
pre { background: #f3f5fa; border-radius: 8px; padding: .8rem; overflow-x: auto;
  font-size: .8rem; } .ok { color: var(--pass); font-weight: 700; }
.bad { color: var(--fail); font-weight: 700; } .hash { word-break: break-all; }
.badge { display: inline-block; font-size: .75rem; font-weight: 700; padding: .05rem .5rem;
  border-radius: 4px; text-transform: uppercase; letter-spacing: .04em; }
.badge.pass { color: var(--pass); background: var(--pass-bg); }
.badge.fail { color: var(--fail); background: var(--fail-bg); }
pre.output { margin: 0; padding: .45rem .6rem; white-space: pre-wrap; word-break: break-word;
  max-width: 520px; } details summary { cursor: pointer; color: var(--accent); }
.review { margin-top: .3rem; } tr.missing td { color: var(--fail); }
footer { color: var(--muted); font-size: .85em; text-align: center; margin-top: 2rem; }
"""

_SCRIPT = """
document.querySelectorAll('[data-conv]').forEach(function (node) {
  node.addEventListener('click', function () {
    var conv = node.getAttribute('data-conv');
    var on = !node.classList.contains('on');
    document.querySelectorAll('[data-conv]').forEach(function (n) { n.classList.remove('on'); });
    if (on) { node.classList.add('on'); }
    document.querySelectorAll('tr[data-row-conv]').forEach(function (row) {
      row.classList.toggle('hidden', on && row.getAttribute('data-row-conv') !== conv);
    });
    var hint = document.getElementById('timeline-filter');
    if (hint) { hint.textContent = on ? 'showing ' + conv + ' only (click it again for all)'
                                      : 'click a conversation above to show only its moves'; }
  });
});
"""


def _page(title: str, body: str, *, script: bool = False) -> str:
    js = f"<script>{_SCRIPT}</script>" if script else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · accord explorer</title><style>{_STYLE}</style></head>
<body><header class="top"><b>accord</b> <a href="/explorer">audit explorer</a></header>
<main>{body}</main>
<footer>Read from the signed ledger and the chain alone.</footer>{js}</body></html>
"""


def _not_found(message: str) -> HTMLResponse:
    body = (
        f'<section class="card"><h1>Not found</h1><p>{_e(message)}</p>'
        '<p><a href="/explorer">Back to the tasks</a></p></section>'
    )
    return HTMLResponse(_page("not found", body), status_code=404)


# -- the task list ---------------------------------------------------------------------------


def render_index(store: LogStore) -> str:
    rows = list_tasks(store)
    if not rows:
        table = '<p class="muted">No task has been posted to this log yet.</p>'
    else:
        lines = "".join(
            f'<tr><td><a href="/explorer/tasks/{_e(r.task_id)}">{_e(r.title) or "(untitled)"}'
            f'</a><br><code class="muted">{_e(r.task_id)}</code></td>'
            f'<td><span class="tag">{_e(r.state)}</span></td>'
            f'<td class="num">{_e(eth(r.budget))}</td>'
            f'<td class="muted">{_e(r.posted_at)}</td><td>{_entry_link(r.index)}</td></tr>'
            for r in rows
        )
        table = (
            '<table id="tasks"><tr><th>task</th><th>state</th><th class="num">budget</th>'
            f"<th>posted</th><th>entry</th></tr>{lines}</table>"
        )
    body = (
        '<h1>Tasks</h1><p class="muted">Pick a task to re-run its audit from the log and '
        f'the chain.</p><section class="card">{table}</section>'
    )
    return _page("tasks", body)


# -- the task page ---------------------------------------------------------------------------


_DID = re.compile(r"did:key:[1-9A-HJ-NP-Za-km-z]+")
_WEI = re.compile(r"\b(\d{13,})( wei)?")


def humanize(text: str, names: Mapping[str, str]) -> str:
    """Escaped `text` with DIDs shown by name and long wei amounts in ETH (exact on hover)."""
    html = _e(text)
    html = _DID.sub(lambda m: _agent(m.group(0), names), html)
    return _WEI.sub(lambda m: f'<span title="{m.group(1)} wei">{_e(eth(m.group(1)))}</span>', html)


def _checklist(report: AuditReport, names: Mapping[str, str]) -> str:
    marks = {"pass": "✓", "fail": "✗", "skipped": "-", "not-run": "·", "unchecked": "?"}
    items = []
    for step in report.steps:
        entry = f"<div>entry {_entry_link(step.entry)}</div>" if step.entry is not None else ""
        items.append(
            f'<li class="step step-{_e(step.status)}" data-status="{_e(step.status)}">'
            f'<span class="mark {_e(step.status)}">{marks.get(step.status, "?")}</span>'
            f'<div><div class="step-title">({step.number}) {_e(step.title)}</div>'
            f'<div class="step-detail">{humanize(step.detail, names)}</div></div>{entry}</li>'
        )
    return f'<ol class="checklist" id="checklist">{"".join(items)}</ol>'


def _tree(
    conversations: Sequence[Mapping[str, Any]], parent: str | None, names: Mapping[str, str]
) -> str:
    children = [c for c in conversations if c.get("parent") == parent]
    if not children:
        return ""
    items = []
    for c in children:
        leader = c.get("leader")
        members = "".join(
            f'<span class="chip{" lead" if m == leader else ""}">'
            f"{'★ ' if m == leader else ''}{_agent(str(m), names)}</span>"
            for m in c.get("members", [])
        )
        items.append(
            f'<li><div class="conv" data-conv="{_e(c["id"])}" title="show only its moves">'
            f"<b>{_e(c.get('title') or c['id'])}</b> "
            f'<span class="muted">· <code>{_e(c["id"])}</code> · depth {_e(c["depth"])} · '
            f"{_e(c['turns'])} turns · {_e(c['state'])}</span><div>{members}</div></div>"
            f"{_tree(conversations, str(c['id']), names)}</li>"
        )
    return '<ul class="tree">' + "".join(items) + "</ul>"


def _bids(store: LogStore, report: AuditReport, names: Mapping[str, str]) -> str:
    facts = report.facts
    events = _events(store, subject=report.task_id, kinds=(BID_REVEALED, TASK_AWARDED))
    revealed: dict[str, tuple[int, str]] = {}
    ranking: dict[str, tuple[int, Mapping[str, Any]]] = {}
    rule = ""
    award: Mapping[str, Any] = {}
    for index, entry in events:
        body = entry.event.body
        if entry.event.kind == BID_REVEALED:
            reveal = body.get("reveal", {})
            revealed[str(reveal.get("bidder"))] = (index, str(reveal.get("price")))
        else:
            award = body
            rule = str(body.get("rule", ""))
            for rank, row in enumerate(body.get("ranking", []), start=1):
                ranking[str(row.get("bidder"))] = (rank, row)
    winner = facts.get("winner")
    rows = []
    bids = sorted(facts.get("bids", []), key=lambda b: ranking.get(b["bidder"], (10**9, {}))[0])
    for bid in bids:
        bidder = str(bid["bidder"])
        reveal = revealed.get(bidder)
        rank, row = ranking.get(bidder, (0, {}))
        tag = '<span class="tag win">winner</span>' if bidder == winner else ""
        price = (
            f"{_e(eth(reveal[1]))} {_entry_link(reveal[0])}"
            if reveal
            else '<span class="muted">not revealed (forfeited)</span>'
        )
        rows.append(
            f'<tr><td class="num">{rank or ""}</td>'
            f"<td>{_agent(bidder, names)} {tag}</td>"
            f"<td>{_entry_link(bid['index'])} "
            f'<code class="muted" title="{_e(bid["commitment"])}">'
            f"{_e(str(bid['commitment'])[:12])}…</code></td>"
            f'<td class="num">{price}</td>'
            f'<td class="num">{_e(row.get("exam_score", "-"))}</td>'
            f'<td class="num">{_e(row.get("reputation", "-"))}</td>'
            f'<td class="num">{_e(_fraction_text(str(row.get("score", "-"))))}</td></tr>'
        )
    if not rows:
        return '<p class="muted">No bids were committed.</p>'
    paid = facts.get("price")
    summary = (
        f'<p class="muted">Sealed bids, opened after the reveal window. Rule: {_e(rule)}; '
        f"the winner is paid {_e(eth(paid))}.</p>{_lone_bidder(award, facts.get('budget'))}"
        if paid is not None and rule
        else ""
    )
    return (
        f'{summary}<table id="bids"><tr><th class="num">rank</th><th>bidder</th>'
        '<th>commitment</th><th class="num">revealed price</th><th class="num">exam</th>'
        f'<th class="num">reputation</th><th class="num">score</th></tr>{"".join(rows)}</table>'
    )


def _lone_bidder(award: Mapping[str, Any], budget: object) -> str:
    """Why a lone bidder is paid what it is (`accord.market.auction`: with no runner-up the winner
    is measured against the reserve, a bid of zero quality asking the whole budget)."""
    ranking = award.get("ranking")
    if not isinstance(ranking, list) or len(ranking) != 1 or award.get("runner_up") is not None:
        return ""
    bid = ranking[0].get("price") if isinstance(ranking[0], Mapping) else None
    own = f" rather than its own bid of {_e(eth(str(bid)))}" if str(bid or "").isdigit() else ""
    if award.get("rule") == "second-score":
        whole = f" ({_e(eth(str(budget)))})" if str(budget or "").isdigit() else ""
        why = (
            "One bidder: it is paid the reserve, the task's budget"
            f"{whole}{own}. With no runner-up, the second-score rule measures the winner "
            "against the reserve, a bid of zero quality asking the whole budget; every "
            "admissible bid scores at least that, so the price, budget · (quality + 1), is "
            "capped at the budget."
        )
    elif award.get("rule") == "first-score":
        why = "One bidder: under the first-score rule it is paid its own bid."
    else:
        return ""
    return f'<p id="award-rule">{why}</p>'


def payouts_chart(
    payouts: Mapping[str, str], values: Mapping[str, str], names: Mapping[str, str]
) -> str:
    """A horizontal bar chart of the payouts (inline SVG), largest first."""
    amounts = {did: int(wei) for did, wei in payouts.items()}
    if not amounts:
        return '<p class="muted">No payouts.</p>'
    top = max(amounts.values()) or 1
    rows = sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))
    label_w, bar_w, row_h = 170, 520, 40
    height = row_h * len(rows) + 12
    parts = []
    colours = ("#3457d5", "#1e9e8f", "#e08a1e", "#8b4fc9", "#d04a6a", "#5c8a2e")
    for i, (did, wei) in enumerate(rows):
        y = 6 + row_h * i
        width = max(2, round(bar_w * wei / top))
        name = names.get(did) or _short(did)
        value = values.get(did)
        shapley = f" · φ = {_fraction_text(value)}" if value is not None else ""
        parts.append(
            f'<g class="bar" data-did="{_e(did)}"><title>{_e(did)}: {wei} wei{_e(shapley)}'
            f"</title>"
            f'<text x="{label_w - 10}" y="{y + 20}" text-anchor="end" font-size="14" '
            f'font-weight="600" fill="#1d2330">{_e(name)}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="24" rx="5" '
            'fill="#eef1f6"></rect>'
            f'<rect x="{label_w}" y="{y + 4}" width="{width}" height="24" rx="5" '
            f'fill="{colours[i % len(colours)]}"></rect>'
            f'<text x="{label_w + bar_w + 10}" y="{y + 15}" font-size="13" fill="#1d2330">'
            f"{_e(eth(wei))}</text>"
            f'<text x="{label_w + bar_w + 10}" y="{y + 31}" font-size="11" fill="#6b7385">'
            f"{_e(shapley.removeprefix(' · '))}</text></g>"
        )
    total_w = label_w + bar_w + 250
    return (
        f'<svg id="payouts-chart" viewBox="0 0 {total_w} {height}" width="100%" '
        f'role="img" aria-label="payouts by agent">{"".join(parts)}</svg>'
    )


def _payouts(store: LogStore, report: AuditReport, names: Mapping[str, str]) -> str:
    found = settlement_entry(store, report.task_id)
    if found is None:
        return '<p class="muted">The task has not been settled.</p>'
    index, body = found
    payouts = {str(k): str(v) for k, v in body.get("payouts", {}).items()}
    values = {str(k): str(v) for k, v in body.get("values", {}).items()}
    amount = int(body.get("amount", 0))
    budget = int(report.facts.get("budget") or 0)
    refund = budget - sum(int(w) for w in payouts.values()) if budget else None
    back = f"; {_e(eth(refund))} went back to the requester" if refund is not None else ""
    return (
        f'<p class="muted">{_e(str(body.get("method", "")))} Shapley values over '
        f"{len(body.get('evaluated', []))} coalitions (total value "
        f"{_e(_fraction_text(str(body.get('total_value', '-'))))}) split "
        f"{_e(eth(amount))}{back}. Settlement {_entry_link(index)}.</p>"
        f'<div id="payouts">{payouts_chart(payouts, values, names)}</div>'
    )


def _timeline(store: LogStore, report: AuditReport, names: Mapping[str, str]) -> str:
    from accord.api.coordinator_cli import describe

    rows = []
    timeline = sorted(report.facts.get("timeline", []), key=lambda t: int(t["index"]))
    for item in timeline:
        index = int(item["index"])
        text = ""
        try:
            entry = Entry.from_bytes(store.entry(index).data)
            if entry.event.kind == CONVERSATION_MESSAGE:
                text = describe(message_from_json(entry.event.body["message"]), dict(names))
        except (LedgerError, CoordinatorError, IndexError, KeyError):
            text = ""
        depth = int(item.get("depth", 0))
        move = move_kind(str(item["kind"]))
        rows.append(
            f'<tr class="tl-depth-{min(depth, 2)}" data-row-conv="{_e(item["conversation"])}">'
            f'<td><code class="muted nowrap">{"↳ " * min(depth, 2)}{_e(item["conversation"])}'
            "</code></td>"
            f'<td class="num">t{int(item["turn"]):02d}</td>'
            f"<td>{_entry_link(index)}</td>"
            f'<td><span class="kind {_e(move)}">{_e(move)}</span></td>'
            f"<td>{_agent(str(item['speaker']), names)}</td><td>{_e(text)}</td></tr>"
        )
    if not rows:
        return '<p class="muted">No conversation was logged.</p>'
    return (
        '<p class="muted" id="timeline-filter">click a conversation above to show only its '
        'moves</p><table id="timeline"><tr><th>conversation</th><th class="num">turn</th>'
        f"<th>entry</th><th>move</th><th>speaker</th><th>what</th></tr>{''.join(rows)}</table>"
    )


def _touched(store: LogStore, report: AuditReport) -> list[tuple[int, str]]:
    indices: dict[int, str] = {}
    for index, entry in _events(store, subject=report.task_id):
        indices[index] = entry.event.kind
    for conversation in report.facts.get("conversations", []):
        for index, entry in _events(store, subject=str(conversation["id"])):
            indices[index] = entry.event.kind
    return sorted(indices.items())


def render_task(store: LogStore, report: AuditReport) -> str:
    data = report.to_json()
    facts = report.facts
    names = agent_names(store)
    verdict = str(data["verdict"])
    failure = report.first_failure
    why = (
        f'<p class="bad">Fails at step {failure.number}'
        f"{' on entry ' + _entry_link(failure.entry) if failure.entry is not None else ''}: "
        f"{humanize(failure.detail, names)}</p>"
        if failure is not None
        else '<p class="ok">Every step of the audit holds.</p>'
    )
    fact_cells = [
        ("requester", _agent(facts.get("requester"), names)),
        ("winner", _agent(facts.get("winner"), names)),
        ("price", _e(eth(facts["price"])) if facts.get("price") else "-"),
        ("budget", _e(eth(facts["budget"])) if facts.get("budget") else "-"),
        ("state", _e(facts.get("state", "-"))),
        ("operator", _agent(facts.get("operator"), names)),
    ]
    grid = "".join(
        f'<div class="fact"><div class="k">{k}</div><div class="v">{v}</div></div>'
        for k, v in fact_cells
    )
    settled = settlement_entry(store, report.task_id)
    deliverable = deliverable_html(facts.get("deliverable"), agent=lambda did: _agent(did, names))
    checks = checks_html(
        facts.get("checks") or [], None if settled is None else settled[1], entry=_entry_link
    )
    conversations = facts.get("conversations", [])
    tree = _tree(conversations, None, names) or '<p class="muted">No team was formed.</p>'
    entries = " ".join(
        f'<a class="entry-chip" href="/explorer/entries/{i}/proof"><b>#{i}</b> {_e(kind)}</a>'
        for i, kind in _touched(store, report)
    )
    body = f"""
<p class="muted"><a href="/explorer">Tasks</a> / <code>{_e(report.task_id)}</code></p>
<h1>{_e(facts.get("title") or report.task_id)}
<span class="verdict {verdict.lower()}" id="verdict">{_e(verdict)}</span></h1>
{why}
<section class="card"><div class="grid">{grid}</div></section>
<section class="card"><h2>Audit checklist</h2>{_checklist(report, names)}</section>
<section class="card" id="deliverable"><h2>Deliverable</h2>{deliverable}</section>
<section class="card" id="check-results"><h2>Checks</h2>{checks}</section>
<section class="card"><h2>Payouts</h2>{_payouts(store, report, names)}</section>
<section class="card"><h2>Team</h2>{tree}</section>
<section class="card" id="custody"><h2>Who holds the keys</h2>{_custody(facts, names)}</section>
<section class="card"><h2>Bids after reveal and the award</h2>
{_bids(store, report, names)}</section>
<section class="card"><h2>Conversation timeline</h2>{_timeline(store, report, names)}</section>
<section class="card"><h2>Ledger entries of this task</h2>
<p class="muted">Each links to its inclusion proof and the on-chain anchor that covers it.</p>
<div class="entries" id="entries">{entries}</div></section>
"""
    return _page(f"audit of {report.task_id}", body, script=True)


# -- the proof page --------------------------------------------------------------------------


def _covering(anchors: Iterable[OnChainAnchor], index: int) -> OnChainAnchor | None:
    return min((a for a in anchors if a.size > index), key=lambda a: a.size, default=None)


def render_proof(store: LogStore, chain: AnchorChain, index: int, data: bytes) -> str:
    leaf = merkle.leaf_hash(data)
    try:
        entry: Entry | None = Entry.from_bytes(data)
    except MalformedError:
        entry = None
    chain_note = ""
    try:
        anchor = _covering(chain.anchors(store.log_id), index)
    except LedgerError as exc:
        anchor, chain_note = None, f"The chain did not answer: {exc}"
    size = anchor.size if anchor is not None else store.size()
    proof = store.inclusion_proof(index, size)
    root = anchor.root if anchor is not None else store.root(size)
    try:
        merkle.verify_inclusion(leaf, index, size, proof, root)
        verified = (
            f'<p class="ok" id="proof-result">✓ the proof recomputes the root anchored in '
            f"block {anchor.block_number}</p>"
            if anchor is not None
            else '<p class="ok" id="proof-result">✓ the proof recomputes the log\'s current '
            "root</p>"
        )
    except ProofError as exc:
        verified = f'<p class="bad" id="proof-result">✗ the proof does not verify: {_e(exc)}</p>'
    if anchor is not None:
        anchor_html = f"""<div class="grid" id="anchor">
<div class="fact"><div class="k">block</div><div class="v" id="anchor-block">
{anchor.block_number}</div></div>
<div class="fact"><div class="k">tree size</div><div class="v">{anchor.size}</div></div>
<div class="fact" style="grid-column: span 2"><div class="k">anchored root</div>
<div class="v mono hash" id="anchor-root">{anchor.root.hex()}</div></div>
<div class="fact" style="grid-column: 1 / -1"><div class="k">transaction</div>
<div class="v mono hash">0x{anchor.tx_hash.hex()}</div></div></div>"""
    else:
        anchor_html = (
            f'<p class="bad" id="anchor">No anchor on chain covers entry {index} yet. '
            f'{_e(chain_note)}</p><p class="muted">Shown against the log\'s current size '
            f"{size}.</p>"
        )
    steps = "".join(
        f'<tr><td class="num">{i}</td><td class="mono hash">{h.hex()}</td></tr>'
        for i, h in enumerate(proof)
    )
    proof_table = (
        f'<table id="proof"><tr><th class="num">#</th><th>sibling hash</th></tr>{steps}</table>'
        if proof
        else '<p class="muted">The tree has one leaf: the proof is empty.</p>'
    )
    if entry is not None:
        event = entry.event
        names = agent_names(store)
        subject = f"<code>{_e(event.subject)}</code>"
        if store.find(kind=TASK_POSTED, subject=event.subject, limit=1):
            subject = f'<a href="/explorer/tasks/{_e(event.subject)}">{subject}</a>'
        about = (
            f"<p><b>{_e(event.kind)}</b> signed by {_agent(event.actor, names)} "
            f'<code class="muted">{_e(event.actor)}</code><br>about {subject} '
            f'at <span class="muted">{_e(event.at)}</span></p>'
        )
        shown = json.dumps(event.body, indent=2, sort_keys=True, ensure_ascii=False)
        if len(shown) > 20_000:
            shown = shown[:20_000] + "\n…"
        body_html = f"<details><summary>signed body</summary><pre>{_e(shown)}</pre></details>"
    else:
        about, body_html = '<p class="bad">The entry does not parse.</p>', ""
    nav = " · ".join(
        part
        for part in (
            f'<a href="/explorer/entries/{index - 1}/proof">← #{index - 1}</a>'
            if index > 0
            else "",
            f'<a href="/explorer/entries/{index + 1}/proof">#{index + 1} →</a>'
            if index + 1 < store.size()
            else "",
        )
        if part
    )
    body = f"""
<p class="muted"><a href="/explorer">Tasks</a> / entry {index} · {nav}</p>
<h1>Entry #{index}</h1>
<section class="card">{about}<p>leaf hash <code class="hash">{leaf.hex()}</code></p>
{body_html}</section>
<section class="card"><h2>On-chain anchor</h2>{anchor_html}</section>
<section class="card"><h2>Inclusion proof (RFC 9162) in the tree of size {size}</h2>
{verified}{proof_table}</section>
"""
    return _page(f"entry {index}", body)
