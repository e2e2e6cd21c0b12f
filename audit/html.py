"""A readable HTML report of an audit: verdict, checklist, deliverable, check results, team
tree, payouts chart, timeline.

Plain server-rendered HTML with an inline SVG bar chart; every value is escaped. The pieces
that show a deliverable and a settlement's check results (`deliverable_html`, `checks_html`)
are shared with the web explorer (`accord.api.explorer`), which links DIDs and entries its own way.

The audit's facts carry the deliverable and the check results; the payouts, the rule's
contractor share and the agents' names are read from the log's `settlement.computed` and
`agent.registered` entries, so `render_html` takes the store the audit read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from html import escape
from typing import Any

from accord.audit.checks import AuditReport
from accord.identity.onboarding import REGISTERED_KIND
from accord.ledger.errors import MalformedError
from accord.ledger.events import Entry
from accord.ledger.store import LogStore
from accord.market.money import format_eth, with_amounts
from accord.market.settlement import SETTLEMENT_COMPUTED
from accord.market.work import ASSEMBLY_CHECK, PLAN_CHECK

MAX_NAMES = 100_000
MAX_SHOWN_OUTPUT = 20_000
"""Characters of one output shown; the rest is cut (the log holds it whole)."""
FOLD_LINES = 12
FOLD_CHARS = 600
"""An output longer than this many lines or characters is folded in a <details>."""

AgentLabel = Callable[[str | None], str]
"""A DID as HTML (escaped): a name where known."""
EntryLink = Callable[[int | None], str]
"""A log index as HTML: a link where the page has somewhere to send it."""

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 960px; margin: 2rem auto; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.verdict { display: inline-block; padding: .2rem .8rem; border-radius: .3rem; color: #fff; }
.pass { background: #2e7d32; } .fail { background: #c62828; } .incomplete { background: #b26a00; }
table { border-collapse: collapse; width: 100%; } td, th { padding: .3rem .5rem; text-align: left;
  border-bottom: 1px solid #eee; vertical-align: top; } code { font-size: .85em; }
.mark-pass { color: #2e7d32; } .mark-fail { color: #c62828; } .mark-not-run { color: #999; }
.mark-unchecked { color: #b26a00; }
ul.tree { list-style: none; padding-left: 1.2rem; }
.muted { color: #777; } .num { text-align: right; white-space: nowrap; }
.badge { display: inline-block; font-size: .78rem; font-weight: 700; padding: .05rem .5rem;
  border-radius: 4px; color: #fff; } .badge.pass { background: #2e7d32; }
.badge.fail { background: #c62828; }
pre.output { background: #f5f6f9; border-radius: 6px; padding: .5rem .7rem; margin: 0;
  font-size: .8rem; white-space: pre-wrap; word-break: break-word; max-width: 560px; }
"""


# -- shared pieces ---------------------------------------------------------------------------


def move_kind(class_name: str) -> str:
    """A move as conversations log it (`kind` of `message_to_json`): `AssignSync` is
    `assign_sync`, `Discuss` is `discuss`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name).lower()


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def amounts_html(text: str) -> str:
    """Escaped `text` with each amount of wei in it (`accord.market.money.WEI_IN_TEXT`) shown in
    ETH, exactly, the wei on hover: `at 200000000000000000 wei` reads `at 0.2 ETH`."""
    return with_amounts(
        _e(text), lambda wei: f'<span class="amount" title="{wei} wei">{_e(format_eth(wei))}</span>'
    )


def short_did(did: str | None) -> str:
    if not did:
        return "-"
    return did if len(did) < 24 else did[:16] + "…" + did[-6:]


def agent_names(store: LogStore) -> dict[str, str]:
    """DID -> the name each agent registered under (from `agent.registered` entries)."""
    names: dict[str, str] = {}
    for stored in store.find(kind=REGISTERED_KIND, limit=MAX_NAMES):
        try:
            event = Entry.from_bytes(stored.data).event
        except MalformedError:
            continue  # the audit names it; the report shows what parses
        name = event.body.get("name")
        if isinstance(name, str) and name:
            names.setdefault(event.actor, name)
    return names


def settlement_entry(store: LogStore, task_id: str) -> tuple[int, Mapping[str, Any]] | None:
    """The task's `settlement.computed` entry (its index and body), if it was settled."""
    for stored in store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1):
        try:
            return stored.index, Entry.from_bytes(stored.data).event.body
        except MalformedError:
            return None
    return None


def _fraction(value: object) -> Fraction | None:
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        return None


def percent(share: object) -> str:
    """`12/55` → `21.8 %` (to a tenth of a percent, by integer arithmetic); `?` if unreadable."""
    fraction = _fraction(share)
    if fraction is None:
        return "?"
    tenths = round(fraction * 1000)
    sign = "-" if tenths < 0 else ""
    whole, rest = divmod(abs(tenths), 10)
    return f"{sign}{whole}.{rest} %" if rest else f"{sign}{whole} %"


def contractor_share(
    checks: Sequence[Mapping[str, Any]], settlement: Mapping[str, Any] | None
) -> Fraction | None:
    """The share of v(N) the contract holder's plan and assembly checks carry: the settlement's
    `contractor_share`, else the sum of those two checks' logged shares."""
    if settlement is not None and "contractor_share" in settlement:
        return _fraction(settlement["contractor_share"])
    shares = [
        _fraction(c.get("share")) for c in checks if c.get("id") in (PLAN_CHECK, ASSEMBLY_CHECK)
    ]
    if not shares or any(s is None for s in shares):
        return None
    return sum((s for s in shares if s is not None), Fraction(0))


def pretty_json(value: object) -> str:
    """`value` as indented JSON in an escaped <pre>; folded in a <details> when long."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_SHOWN_OUTPUT:
        text = text[:MAX_SHOWN_OUTPUT] + "\n…"
    block = f'<pre class="output">{_e(text)}</pre>'
    lines = text.count("\n") + 1
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return block
    return f"<details><summary>{lines} lines, {len(text)} characters</summary>{block}</details>"


def _part_output(part: Mapping[str, Any]) -> str:
    """The output where the reader may see it, else the commitment the log holds."""
    if "output" in part:
        return pretty_json(part["output"])
    commitment = str(part.get("output_sha256", ""))
    return (
        f'<span class="muted" title="{_e(commitment)}">sealed until paid · sha256 '
        f"<code>{_e(commitment[:16])}…</code></span>"
    )


def deliverable_html(deliverable: Mapping[str, Any] | None, *, agent: AgentLabel) -> str:
    """Each part's id, capability, the member the leader's plan gave it, its producer and its
    output; the parts the plan gave out that were not delivered; the deliverable's hash."""
    if not isinstance(deliverable, Mapping):
        return '<p class="muted">Nothing has been delivered yet.</p>'
    plan = deliverable.get("plan")
    assignments = plan.get("assignments") if isinstance(plan, Mapping) else None
    planned: Mapping[str, Any] = assignments if isinstance(assignments, Mapping) else {}
    raw_parts = deliverable.get("parts")
    parts = [p for p in raw_parts if isinstance(p, Mapping)] if isinstance(raw_parts, list) else []
    rows = []
    for part in parts:
        part_id = str(part.get("part", ""))
        assigned = planned.get(part_id)
        rows.append(
            f'<tr class="part" data-part="{_e(part_id)}"><td><code>{_e(part_id)}</code></td>'
            f"<td>{_e(part.get('capability', '-'))}</td>"
            f"<td>{agent(None if assigned is None else str(assigned))}</td>"
            f'<td class="producer">{agent(str(part.get("producer") or "") or None)}</td>'
            f"<td>{_part_output(part)}</td></tr>"
        )
    delivered = {str(p.get("part", "")) for p in parts}
    for part_id, assigned in planned.items():
        if str(part_id) not in delivered:
            rows.append(
                f'<tr class="part missing" data-part="{_e(part_id)}">'
                f"<td><code>{_e(part_id)}</code></td><td>-</td><td>{agent(str(assigned))}</td>"
                '<td class="muted">-</td><td class="muted">not delivered</td></tr>'
            )
    table = (
        '<table id="deliverable-parts"><tr><th>part</th><th>capability</th>'
        f"<th>planned for</th><th>producer</th><th>output</th></tr>{''.join(rows)}</table>"
        if rows
        else '<p class="muted">The deliverable holds no part.</p>'
    )
    plan_note = (
        f"its plan gives out {len(planned)} part{'s' if len(planned) != 1 else ''}"
        if planned
        else "it holds no plan"
    )
    return (
        f'<p id="deliverable-summary">Assembled and signed by the contract holder '
        f"{agent(str(deliverable.get('leader') or '') or None)}; {plan_note}. "
        f'sha256 <code class="hash">{_e(deliverable.get("sha256", "-"))}</code></p>'
        f"{table}"
        '<details id="deliverable-plan"><summary>the leader\'s plan, as signed</summary>'
        f"{pretty_json(plan)}</details>"
    )


def _record_html(record: Mapping[str, Any], *, entry: EntryLink) -> str:
    pieces = []
    if "model" in record or "prompt" in record or "answer" in record:
        pieces.append(f'<div class="muted">judged by {_e(record.get("model", "?"))}</div>')
        pieces.append(
            f"<details><summary>prompt</summary>{pretty_json(str(record.get('prompt', '')))}"
            "</details>"
        )
        pieces.append(
            f"<details><summary>answer</summary>{pretty_json(str(record.get('answer', '')))}"
            "</details>"
        )
    elif "verdict" in record:
        index = record.get("entry")
        link = entry(index if isinstance(index, int) else None)
        pieces.append(
            f'<div class="review">the requester\'s verdict: <b>{_e(record["verdict"])}</b>'
            f"{' ' + link if link else ''}</div>"
        )
    elif "window_ended" in record:
        pieces.append(
            '<div class="review">no verdict given: accepted when the review window ended '
            f"({_e(record['window_ended'])})</div>"
        )
    else:
        pieces.append(f"<details><summary>record</summary>{pretty_json(dict(record))}</details>")
    return "".join(pieces)


def checks_html(
    checks: Sequence[Mapping[str, Any]],
    settlement: Mapping[str, Any] | None,
    *,
    entry: EntryLink,
) -> str:
    """Each check's result (pass/fail badge), its share of v(N) as a percentage, its detail,
    and what it was held to (the judge's prompt and answer, the review's verdict and entry);
    with the rule that the contract holder's plan and assembly checks carry a fixed share."""
    if settlement is None and not checks:
        return '<p class="muted">The task has not been settled: no check has run.</p>'
    share = contractor_share(checks, settlement)
    rule = (
        f'<p id="contractor-rule">The rule: the contract holder\'s plan and assembly checks '
        f"carry {_e(share)} of the value ({_e(percent(share))} of v(N)); the requester's "
        "checks share the rest by weight.</p>"
        if share is not None
        else ""
    )
    rows = []
    for check in checks:
        passed = check.get("passed") is True
        status = "pass" if passed else "fail"
        share_text = check.get("share")
        record = check.get("record")
        held = _record_html(record, entry=entry) if isinstance(record, Mapping) else ""
        rows.append(
            f'<tr class="check" data-check="{_e(check.get("id", ""))}" data-passed="{status}">'
            f'<td><span class="badge {status}">{status}</span></td>'
            f"<td><code>{_e(check.get('id', ''))}</code></td>"
            f'<td class="num" title="{_e(share_text)} of v(N)">{_e(percent(share_text))}</td>'
            f"<td>{_e(check.get('detail', ''))}{held}</td></tr>"
        )
    table = (
        '<table id="checks"><tr><th></th><th>check</th><th class="num">share of v(N)</th>'
        f"<th>detail</th></tr>{''.join(rows)}</table>"
        if rows
        else '<p class="muted">The settlement logged no check result.</p>'
    )
    return rule + table


# -- the static report -----------------------------------------------------------------------


def _tree(conversations: list[dict[str, Any]], parent: str | None, agent: AgentLabel) -> str:
    children = [c for c in conversations if c.get("parent") == parent]
    if not children:
        return ""
    items = []
    for c in children:
        members = ", ".join(agent(str(m)) for m in c.get("members", []))
        items.append(
            f"<li><code>{_e(c['id'])}</code> depth {_e(c['depth'])}, {_e(c['turns'])} turns, "
            f"{_e(c['state'])}; leader {agent(c.get('leader'))}; members "
            f"{members}{_tree(conversations, c['id'], agent)}</li>"
        )
    return '<ul class="tree">' + "".join(items) + "</ul>"


def _chart(payouts: Mapping[str, str], agent_name: Callable[[str], str]) -> str:
    if not payouts:
        return "<p>No payouts.</p>"
    amounts = {k: int(v) for k, v in payouts.items()}
    top = max(amounts.values()) or 1
    rows = sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))
    height = 28 * len(rows) + 10
    bars = []
    for i, (did, wei) in enumerate(rows):
        width = 520 * wei // top
        y = 10 + 28 * i
        bars.append(
            f'<g class="payout" data-did="{_e(did)}"><title>{_e(did)}: {wei} wei</title>'
            f'<text x="0" y="{y + 14}" font-size="12">{_e(agent_name(did))}</text>'
            f'<rect x="230" y="{y}" width="{width}" height="18" fill="#1565c0"></rect>'
            f'<text x="{236 + width}" y="{y + 14}" font-size="12">{_e(format_eth(wei))}</text>'
            "</g>"
        )
    return f'<svg width="900" height="{height}" role="img">{"".join(bars)}</svg>'


def _payouts(
    facts: Mapping[str, Any],
    settlement: Mapping[str, Any] | None,
    agent_name: Callable[[str], str],
    *,
    read: bool,
) -> str:
    logged = settlement.get("payouts") if settlement is not None else facts.get("payouts")
    if isinstance(logged, Mapping):
        return _chart({str(k): str(v) for k, v in logged.items()}, agent_name)
    if not read:
        return "<p>The payouts are read from the log: this report was rendered without it.</p>"
    return "<p>The task has not been settled: no payouts.</p>"


def render_html(report: AuditReport, store: LogStore | None = None) -> str:
    """The report as one HTML page. `store` is the log the audit read: the payouts, the
    contract holder's share and the agents' names come from it (without it they are left out).
    """
    data = report.to_json()
    facts = data["facts"]
    verdict = data["verdict"]
    names = agent_names(store) if store is not None else {}
    found = settlement_entry(store, report.task_id) if store is not None else None
    settlement = found[1] if found is not None else None

    def agent_name(did: str) -> str:
        return names.get(did) or short_did(did)

    def agent(did: str | None) -> str:
        if not did:
            return '<span class="muted">-</span>'
        return f'<span class="agent" title="{_e(did)}">{_e(agent_name(did))}</span>'

    def entry(index: int | None) -> str:
        return "" if index is None else f'<span class="entry">entry #{int(index)}</span>'

    steps = "".join(
        f'<tr><td class="mark-{_e(s["status"])}">{_e(s["status"])}</td>'
        f"<td>({s['step']}) {_e(s['title'])}</td><td>{amounts_html(s['detail'])}</td>"
        f"<td>{'' if s['entry'] is None else int(s['entry'])}</td></tr>"
        for s in data["steps"]
    )
    timeline = "".join(
        f"<tr><td><code>{_e(t['conversation'])}</code></td><td>t{int(t['turn']):02d}</td>"
        f"<td>{_e(t['index'])}</td><td>{_e(move_kind(str(t['kind'])))}</td>"
        f"<td>{agent(t['speaker'])}</td></tr>"
        for t in facts.get("timeline", [])
    )
    payouts = _payouts(facts, settlement, agent_name, read=store is not None)
    price, budget = facts.get("price"), facts.get("budget")
    price_text = _e(format_eth(int(price))) if price is not None else "no price yet"
    budget_text = _e(format_eth(int(budget))) if budget is not None else "-"
    checks = facts.get("checks") or []
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>accord audit {_e(report.task_id)}</title>
<style>{_STYLE}</style></head><body>
<h1>Audit of <code>{_e(report.task_id)}</code> <span class="verdict {_e(verdict.lower())}"
 id="verdict">{_e(verdict)}</span></h1>
<p>{_e(facts.get("title", ""))} — winner {agent(facts.get("winner"))},
price {price_text} of a {budget_text} budget.</p>
<h2>Checklist</h2><table><tr><th></th><th>step</th><th>detail</th><th>entry</th></tr>{steps}</table>
<h2>Deliverable</h2><div id="deliverable">{deliverable_html(facts.get("deliverable"), agent=agent)}
</div>
<h2>Checks</h2><div id="check-results">{checks_html(checks, settlement, entry=entry)}</div>
<h2>Team</h2>{_tree(facts.get("conversations", []), None, agent) or "<p>No conversation.</p>"}
<h2>Payouts (Shapley)</h2><div id="payouts">{payouts}</div>
<h2>Conversation timeline</h2>
<table><tr><th>conversation</th><th>turn</th><th>entry</th><th>message</th><th>speaker</th></tr>
{timeline}</table>
</body></html>
"""
