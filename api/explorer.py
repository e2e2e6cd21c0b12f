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
    GET /explorer/skills/{id}           a skill (a shipped one by its name too): its manifest's
                                        name, version and description, its declarer, and its
                                        exam→field agreement (`accord.market.agreement`); a
                                        task page's parts link to their skill's page

Everything shown is read from the ledger and the chain (as `accord audit` does); every value
is escaped. `context_provider` is called once per request and returns the store, the anchor
chain and the escrow chain (`ExplorerSources`; the service's are `accord.api.app._ExplorerSources`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from accord.api.audits import AuditCache, AuditKey, audit_key
from accord.api.routes.deps import address_of
from accord.api.routes.skills import logged_agreement
from accord.audit.checks import AuditReport, audit_task
from accord.audit.html import (
    agent_names,
    checklist_html,
    checks_html,
    deliverable_html,
    move_kind,
    payouts_chart,
    settlement_entry,
    team_tree,
)
from accord.audit.html_kit import (
    STYLE,
    agent,
    escaped,
    eth,
    fraction_text,
    json_text,
    page,
    percent,
    prose,
    table,
)
from accord.coordinator.conversation import CONVERSATION_MESSAGE, message_from_json
from accord.coordinator.errors import CoordinatorError
from accord.identity.errors import ManifestError
from accord.identity.manifests import SKILL_ID_PATTERN, parse_manifest
from accord.identity.skill_registry import SKILL_DECLARED_KIND, DeclaredSkill, shipped_manifests
from accord.ledger import merkle
from accord.ledger.chain import AnchorChain, OnChainAnchor
from accord.ledger.errors import LedgerError, MalformedError, ProofError
from accord.ledger.events import Entry
from accord.ledger.store import LogStore
from accord.market.blobs import BlobStore
from accord.market.escrow import EscrowChain
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


def explorer_router(
    context_provider: Callable[[], ExplorerSources], audits: AuditCache | None = None
) -> APIRouter:
    """The explorer's routes; include it in an app with `app.include_router(...)`. A task's
    page runs its audit through `audits` (the service's, shared with `GET /tasks/{id}/audit`;
    by default one of the router's own): computed once per log size and chain head, limited
    per caller and in all (429)."""
    router = APIRouter(tags=["explorer"])
    cache = audits or AuditCache(per_caller=2, total=4)

    @router.get("/explorer", response_class=HTMLResponse, summary="Pick a task to explore")
    def explorer_index() -> HTMLResponse:
        return HTMLResponse(render_index(context_provider().store))

    @router.get(
        "/explorer/tasks/{task_id}",
        response_class=HTMLResponse,
        summary="A task's audit: verdict, checklist, team, bids, payouts, timeline",
        responses={404: {"description": "No such task in the log"}},
    )
    async def explorer_task(task_id: str, request: Request) -> HTMLResponse:
        """Async, so that a page waiting for an audit under way holds no worker thread; the
        reads, the audit and the rendering run in worker threads."""

        def prepare() -> tuple[ExplorerSources | None, AuditKey | None]:
            sources = context_provider()
            if not sources.store.find(kind=TASK_POSTED, subject=task_id, limit=1):
                return None, None
            return sources, audit_key(sources.store, task_id, sources.anchors, sources.escrow)

        found, key = await run_in_threadpool(prepare)
        if found is None:
            return _not_found(f"The log holds no task {task_id!r}.")
        sources = found

        def compute() -> AuditReport:
            # The service re-runs the checks on the outputs it holds; the page shows only
            # their commitments and the verdicts (`accord.market.privacy`).
            return audit_task(
                sources.store,
                task_id,
                anchors=sources.anchors,
                escrow=sources.escrow,
                outputs=BlobStore(sources.store.engine).sealed,
            )

        report = await cache.report(address_of(request), key, compute)
        return HTMLResponse(await run_in_threadpool(render_task, sources.store, report))

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

    @router.get(
        "/explorer/skills/{skill}",
        response_class=HTMLResponse,
        summary="A skill: its manifest, its declarer, and its exam→field agreement",
        responses={404: {"description": "No such skill, shipped or declared in the log"}},
    )
    def explorer_skill(skill: Annotated[str, Path(min_length=1, max_length=64)]) -> HTMLResponse:
        store = context_provider().store
        found = find_skill(store, skill)
        if found is None:
            return _not_found(
                f"No skill {skill!r}: a shipped skill is named by its name or id, a declared "
                "one by its id."
            )
        return HTMLResponse(render_skill(store, found))

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


_CUSTODY_TEXT = {
    "hosted": "hosted: the operator holds its key, so its signatures prove only that the "
    "operator signed",
    "self": "self: it keeps its own key",
    "unregistered": "unregistered: it signed with its own key and never registered, so the "
    "log shows no key of it handed to the operator",
}


def _custody(facts: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """Each actor of the task but the operator, with who holds its key, as the log shows it
    (`facts.custody`: its `agent.registered`, or none)."""
    custody = facts.get("custody") or {}
    if not custody:
        return '<p class="muted">No agent signed for this task.</p>'
    rows = (
        f'<tr class="custody" data-custody="{escaped(held)}"><td>{agent(did, names)}</td>'
        f"<td>{escaped(_CUSTODY_TEXT.get(held, held))}</td></tr>"
        for did, held in sorted(custody.items(), key=lambda kv: (kv[1], names.get(kv[0], kv[0])))
    )
    return table(["signer", "custody"], rows)


MAX_ENTRY_INDEX = 2**62
"""Larger indices cannot be a log position (SQLite integers are 64-bit)."""


def _entry_link(index: int | None) -> str:
    if index is None or index < 0:
        return ""
    return f'<a class="entry" href="/explorer/entries/{int(index)}/proof">#{int(index)}</a>'


_STYLE = """
header.top { background: #1d2330; color: #fff; padding: .7rem 2rem; display: flex;
  gap: 1.5rem; align-items: baseline; }
header.top a { color: #c9d4ff; text-decoration: none; } header.top b { font-size: 1.05rem; }
section.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 1.1rem 1.3rem; margin: 1rem 0; box-shadow: 0 1px 2px rgba(20,30,60,.04); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: .8rem; }
.fact { background: var(--bg); border-radius: 8px; padding: .55rem .8rem; }
.fact .k { font-size: .75rem; text-transform: uppercase; letter-spacing: .04em;
  color: var(--muted); } .fact .v { font-weight: 600; word-break: break-all; }
.conv { cursor: pointer; }
.conv:hover, .conv.on { border-color: var(--accent); box-shadow: 0 0 0 2px #dfe6ff; }
.tag { font-size: .75rem; padding: .05rem .45rem;
  border-radius: 4px; background: #eef1f6; color: var(--muted); }
.tag.win { background: var(--pass-bg); color: var(--pass); font-weight: 700; }
.tl-depth-1 td:first-child { padding-left: 1.2rem; } .tl-depth-2 td:first-child
  { padding-left: 2.2rem; } .tl-depth-1, .tl-depth-2 { background: #fafbfe; }
tr.hidden { display: none; }
.entries { display: flex; flex-wrap: wrap; gap: .35rem; }
a.entry-chip { font-size: .8rem; text-decoration: none; color: var(--ink); background: #f3f5fa;
  border: 1px solid var(--line); border-radius: 6px; padding: .1rem .45rem; }
a.entry-chip b { color: var(--accent); font: .85em ui-monospace, Menlo, monospace; }
a.entry-chip:hover { border-color: var(--accent); }
"""
"""The explorer's own rules, after the kit's `STYLE`: the header, cards, facts, the
conversation filter, the timeline's depths, the entry chips."""

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
    return page(
        f"{title} · accord explorer",
        '<header class="top"><b>accord</b> <a href="/explorer">audit explorer</a></header>'
        f"<main>{body}</main>"
        "<footer>Read from the signed ledger and the chain alone.</footer>",
        style=STYLE + _STYLE,
        script=_SCRIPT if script else "",
    )


def _not_found(message: str) -> HTMLResponse:
    body = (
        f'<section class="card"><h1>Not found</h1><p>{escaped(message)}</p>'
        '<p><a href="/explorer">Back to the tasks</a></p></section>'
    )
    return HTMLResponse(_page("not found", body), status_code=404)


# -- the task list ---------------------------------------------------------------------------


def render_index(store: LogStore) -> str:
    rows = list_tasks(store)
    if not rows:
        listed = '<p class="muted">No task has been posted to this log yet.</p>'
    else:
        lines = (
            f'<tr><td><a href="/explorer/tasks/{escaped(r.task_id)}">'
            f"{escaped(r.title) or '(untitled)'}"
            f'</a><br><code class="muted">{escaped(r.task_id)}</code></td>'
            f'<td><span class="tag">{escaped(r.state)}</span></td>'
            f'<td class="num">{escaped(eth(r.budget))}</td>'
            f'<td class="muted">{escaped(r.posted_at)}</td><td>{_entry_link(r.index)}</td></tr>'
            for r in rows
        )
        listed = table(
            ["task", "state", "budget", "posted", "entry"],
            lines,
            numeric={"budget"},
            element_id="tasks",
        )
    body = (
        '<h1>Tasks</h1><p class="muted">Pick a task to re-run its audit from the log and '
        f'the chain.</p><section class="card">{listed}</section>'
    )
    return _page("tasks", body)


# -- the task page ---------------------------------------------------------------------------


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
            f"{escaped(eth(reveal[1]))} {_entry_link(reveal[0])}"
            if reveal
            else '<span class="muted">not revealed (forfeited)</span>'
        )
        rows.append(
            f'<tr><td class="num">{rank or ""}</td>'
            f"<td>{agent(bidder, names)} {tag}</td>"
            f"<td>{_entry_link(bid['index'])} "
            f'<code class="muted" title="{escaped(bid["commitment"])}">'
            f"{escaped(str(bid['commitment'])[:12])}…</code></td>"
            f'<td class="num">{price}</td>'
            f'<td class="num">{escaped(row.get("exam_score", "-"))}</td>'
            f'<td class="num">{escaped(row.get("reputation", "-"))}</td>'
            f'<td class="num">{escaped(fraction_text(str(row.get("score", "-"))))}</td></tr>'
        )
    if not rows:
        return '<p class="muted">No bids were committed.</p>'
    paid = facts.get("price")
    summary = (
        f'<p class="muted">Sealed bids, opened after the reveal window. Rule: {escaped(rule)}; '
        f"the winner is paid {escaped(eth(paid))}.</p>{_lone_bidder(award, facts.get('budget'))}"
        if paid is not None and rule
        else ""
    )
    numeric = {"rank", "revealed price", "exam", "reputation", "score"}
    columns = ["rank", "bidder", "commitment", "revealed price", "exam", "reputation", "score"]
    return summary + table(columns, rows, numeric=numeric, element_id="bids")


def _lone_bidder(award: Mapping[str, Any], budget: object) -> str:
    """Why a lone bidder is paid what it is (`accord.market.auction`: with no runner-up the winner
    is measured against the reserve, a bid of zero quality asking the whole budget)."""
    ranking = award.get("ranking")
    if not isinstance(ranking, list) or len(ranking) != 1 or award.get("runner_up") is not None:
        return ""
    bid = ranking[0].get("price") if isinstance(ranking[0], Mapping) else None
    own = (
        f" rather than its own bid of {escaped(eth(str(bid)))}" if str(bid or "").isdigit() else ""
    )
    if award.get("rule") == "second-score":
        whole = f" ({escaped(eth(str(budget)))})" if str(budget or "").isdigit() else ""
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
    back = f"; {escaped(eth(refund))} went back to the requester" if refund is not None else ""
    return (
        f'<p class="muted">{escaped(str(body.get("method", "")))} Shapley values of the parts '
        f"over {len(body.get('evaluated', []))} coalitions, each member paid its parts' sum "
        f"(total value "
        f"{escaped(fraction_text(str(body.get('total_value', '-'))))}) split "
        f"{escaped(eth(amount))}{back}. Settlement {_entry_link(index)}.</p>"
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
            f'<tr class="tl-depth-{min(depth, 2)}" data-row-conv="{escaped(item["conv_id"])}">'
            f'<td><code class="muted nowrap">{"↳ " * min(depth, 2)}{escaped(item["conv_id"])}'
            "</code></td>"
            f'<td class="num">t{int(item["turn"]):02d}</td>'
            f"<td>{_entry_link(index)}</td>"
            f'<td><span class="kind {escaped(move)}">{escaped(move)}</span></td>'
            f"<td>{agent(str(item['speaker']), names)}</td><td>{escaped(text)}</td></tr>"
        )
    if not rows:
        return '<p class="muted">No conversation was logged.</p>'
    columns = ["conversation", "turn", "entry", "move", "speaker", "what"]
    return (
        '<p class="muted" id="timeline-filter">click a conversation above to show only its '
        f"moves</p>{table(columns, rows, numeric={'turn'}, element_id='timeline')}"
    )


def _touched(store: LogStore, report: AuditReport) -> list[tuple[int, str]]:
    indices: dict[int, str] = {}
    for index, entry in _events(store, subject=report.task_id):
        indices[index] = entry.event.kind
    for conversation in report.facts.get("conversations", []):
        for index, entry in _events(store, subject=str(conversation["conv_id"])):
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
        f"{prose(failure.detail, names)}</p>"
        if failure is not None
        else '<p class="muted">The task is in progress: the pending steps wait for what it '
        "has not done yet, or for its newest entries to be anchored on chain (the service "
        "anchors its tail within ACCORD_ANCHOR_INTERVAL); every other step holds.</p>"
        if verdict == "PENDING"
        else '<p class="ok">Every step of the audit holds.</p>'
    )
    fact_cells = [
        ("requester", agent(facts.get("requester"), names)),
        ("winner", agent(facts.get("winner"), names)),
        ("price", escaped(eth(facts["price"])) if facts.get("price") else "-"),
        ("budget", escaped(eth(facts["budget"])) if facts.get("budget") else "-"),
        ("state", escaped(facts.get("state", "-"))),
        ("operator", agent(facts.get("operator"), names)),
    ]
    grid = "".join(
        f'<div class="fact"><div class="k">{k}</div><div class="v">{v}</div></div>'
        for k, v in fact_cells
    )
    settled = settlement_entry(store, report.task_id)
    deliverable = deliverable_html(facts.get("deliverable"), names, skill=skill_link)
    checks = checks_html(
        facts.get("checks") or [], None if settled is None else settled[1], entry=_entry_link
    )
    checklist = checklist_html(report.steps, names, entry=_entry_link)
    conversations = facts.get("conversations", [])
    tree = team_tree(conversations, names) or '<p class="muted">No team was formed.</p>'
    entries = " ".join(
        f'<a class="entry-chip" href="/explorer/entries/{i}/proof"><b>#{i}</b> {escaped(kind)}</a>'
        for i, kind in _touched(store, report)
    )
    body = f"""
<p class="muted"><a href="/explorer">Tasks</a> / <code>{escaped(report.task_id)}</code></p>
<h1>{escaped(facts.get("title") or report.task_id)}
<span class="verdict {verdict.lower()}" id="verdict">{escaped(verdict)}</span></h1>
{why}
<section class="card"><div class="grid">{grid}</div></section>
<section class="card"><h2>Audit checklist</h2>{checklist}</section>
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


# -- the skill page --------------------------------------------------------------------------


def find_skill(store: LogStore, skill: str) -> DeclaredSkill | None:
    """The shipped skill named or identified by `skill`, or the skill `skill` declared in the
    log (its first `skill.declared`), or None. A shipped skill's declarer is the operator."""
    for manifest in shipped_manifests():
        if skill in (manifest.name, manifest.skill_id):
            return DeclaredSkill(manifest, OPERATOR, None, None)
    if not SKILL_ID_PATTERN.match(skill):
        return None
    for index, entry in _events(store, kind=SKILL_DECLARED_KIND, subject=skill, limit=1):
        try:
            manifest = parse_manifest(entry.event.body.get("manifest"))
        except ManifestError:
            return None  # the audit names it
        if manifest.skill_id == skill:
            return DeclaredSkill(manifest, entry.event.actor, index, entry.event.at)
    return None


OPERATOR = "the operator"
"""The declarer shown for a shipped skill (it ships with the service, no entry declares it)."""


def skill_link(capability: str) -> str:
    """A part's capability (a built-in's name or a declared skill's id) as a link to its page."""
    label = capability if len(capability) < 64 else f"{capability[:12]}…"
    return (
        f'<a class="skill" href="/explorer/skills/{escaped(capability)}" '
        f'title="{escaped(capability)}">{escaped(label)}</a>'
    )


def _agreement(agreement: Mapping[str, Any], names: Mapping[str, str]) -> str:
    holders = agreement.get("holders") or []
    if not holders:
        return '<p class="muted" id="agreement">No agent holds a credential in this skill yet.</p>'
    rows = (
        f'<tr class="holder" data-agent="{escaped(h["agent"])}">'
        f"<td>{agent(h['agent'], names)}</td>"
        f'<td class="num">{escaped(percent(h["exam"]))}</td>'
        f'<td class="num">{int(h["parts"])}</td>'
        f'<td class="num">{escaped(percent(h["field"])) if h["field"] is not None else "-"}</td>'
        "</tr>"
        for h in holders
    )
    means = agreement.get("exam_mean"), agreement.get("field_mean")
    summary = (
        f"<p>Over the {int(agreement.get('holders_with_real_parts') or 0)} holders with real "
        f"parts: exam mean <b>{escaped(percent(means[0]))}</b>, real parts passed "
        f"<b>{escaped(percent(means[1]))}</b>.</p>"
        if means[0] is not None
        else '<p class="muted">No holder has done a real part a requester\'s check reads yet.</p>'
    )
    columns = ["agent", "exam score", "real parts", "real parts passed"]
    numeric = {"exam score", "real parts", "real parts passed"}
    return summary + table(columns, rows, numeric=numeric, element_id="agreement")


def render_skill(store: LogStore, skill: DeclaredSkill) -> str:
    m = skill.manifest
    names = agent_names(store)
    declarer = (
        escaped(OPERATOR) + ' <span class="muted">(shipped with the service)</span>'
        if skill.index is None
        else f"{agent(skill.declarer, names)} {_entry_link(skill.index)}"
    )
    fact_cells = [
        ("version", escaped(m.version)),
        ("declarer", declarer),
        ("exam", escaped(f"{m.exam['kind']}, {m.item_count} items, pass at {m.threshold}")),
        ("graders", escaped(", ".join(str(g["kind"]) for g in m.graders))),
    ]
    if m.builtin is not None:
        fact_cells.append(("credentials name it", f"<code>{escaped(m.builtin)}</code>"))
    if m.supersedes is not None:
        fact_cells.append(("supersedes", skill_link(m.supersedes)))
    grid = "".join(
        f'<div class="fact"><div class="k">{k}</div><div class="v">{v}</div></div>'
        for k, v in fact_cells
    )
    agreement = logged_agreement(store, skill)
    body = f"""
<p class="muted"><a href="/explorer">Tasks</a> / skill <code>{escaped(m.name)}</code></p>
<h1 id="skill-name">{escaped(m.name)} <span class="tag">v{escaped(m.version)}</span></h1>
<p class="muted">id <code class="hash" id="skill-id">{escaped(m.skill_id)}</code></p>
<section class="card"><p id="skill-description">{escaped(m.description)}</p>
<div class="grid">{grid}</div></section>
<section class="card"><h2>Does its exam predict real work?</h2>
<p class="muted">Each credentialed agent's best exam score beside the share of its real parts of
this skill that passed the requesters' checks, from the log (parts no requester check reads are
left out).</p>{_agreement(agreement, names)}</section>
"""
    return _page(f"skill {m.name}", body)


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
        verified = (
            f'<p class="bad" id="proof-result">✗ the proof does not verify: {escaped(exc)}</p>'
        )
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
            f'{escaped(chain_note)}</p><p class="muted">Shown against the log\'s current size '
            f"{size}.</p>"
        )
    steps = (
        f'<tr><td class="num">{i}</td><td class="mono hash">{h.hex()}</td></tr>'
        for i, h in enumerate(proof)
    )
    proof_table = (
        table(["#", "sibling hash"], steps, numeric={"#"}, element_id="proof")
        if proof
        else '<p class="muted">The tree has one leaf: the proof is empty.</p>'
    )
    if entry is not None:
        event = entry.event
        names = agent_names(store)
        subject = f"<code>{escaped(event.subject)}</code>"
        if store.find(kind=TASK_POSTED, subject=event.subject, limit=1):
            subject = f'<a href="/explorer/tasks/{escaped(event.subject)}">{subject}</a>'
        about = (
            f"<p><b>{escaped(event.kind)}</b> signed by {agent(event.actor, names)} "
            f'<code class="muted">{escaped(event.actor)}</code><br>about {subject} '
            f'at <span class="muted">{escaped(event.at)}</span></p>'
        )
        shown = escaped(json_text(event.body))
        body_html = f"<details><summary>signed body</summary><pre>{shown}</pre></details>"
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
