"""The audit as HTML: the pieces both audit pages show (checklist, deliverable, check results,
team tree, payouts chart) and the static report of `accord audit TASK --html`.

Built from the kit (`accord.audit.html_kit`): every value is escaped. The web explorer
(`accord.api.explorer`) shows the same pieces in its own page and links entries its own way
(`EntryLink`); the report names them.

The audit's facts carry the deliverable and the check results; the payouts, the rule's
contractor share and the agents' names are read from the log's `settlement.computed` and
`agent.registered` entries, so `render_html` takes the store the audit read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from accord.audit.checks import AuditReport
from accord.audit.html_kit import (
    STYLE,
    agent,
    as_fraction,
    escaped,
    eth,
    fraction_text,
    page,
    percent,
    pretty_json,
    prose,
    short_did,
    table,
)
from accord.identity.onboarding import REGISTERED_KIND
from accord.ledger.errors import MalformedError
from accord.ledger.events import Entry
from accord.ledger.store import LogStore
from accord.ledger.verify import StepResult
from accord.market.settlement import SETTLEMENT_COMPUTED
from accord.market.work import ASSEMBLY_CHECK, PLAN_CHECK

MAX_NAMES = 100_000

EntryLink = Callable[[int | None], str]
"""A log index as HTML: a link where the page has somewhere to send it."""

_REPORT_STYLE = """
main > h2 { margin-top: 2rem; }
"""
"""The report's own rules, after the kit's `STYLE`."""


# -- shared pieces ---------------------------------------------------------------------------


def move_kind(class_name: str) -> str:
    """A move as conversations log it (`kind` of `message_to_json`): `AssignSync` is
    `assign_sync`, `Discuss` is `discuss`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name).lower()


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


def contractor_share(
    checks: Sequence[Mapping[str, Any]], settlement: Mapping[str, Any] | None
) -> Fraction | None:
    """The share of v(N) the contract holder's plan and assembly checks carry: the settlement's
    `contractor_share`, else the sum of those two checks' logged shares."""
    if settlement is not None and "contractor_share" in settlement:
        return as_fraction(settlement["contractor_share"])
    shares = [
        as_fraction(c.get("share")) for c in checks if c.get("id") in (PLAN_CHECK, ASSEMBLY_CHECK)
    ]
    if not shares or any(s is None for s in shares):
        return None
    return sum((s for s in shares if s is not None), Fraction(0))


def _part_output(part: Mapping[str, Any]) -> str:
    """The output where the reader may see it, else the commitment the log holds."""
    if "output" in part:
        return pretty_json(part["output"])
    commitment = str(part.get("output_sha256", ""))
    return (
        f'<span class="muted" title="{escaped(commitment)}">sealed until paid · sha256 '
        f"<code>{escaped(commitment[:16])}…</code></span>"
    )


def _capability_cell(capability: object, skill: Callable[[str], str] | None) -> str:
    if not isinstance(capability, str) or not capability:
        return '<span class="muted">-</span>'
    return escaped(capability) if skill is None else skill(capability)


def deliverable_html(
    deliverable: Mapping[str, Any] | None,
    names: Mapping[str, str],
    *,
    skill: Callable[[str], str] | None = None,
) -> str:
    """Each part's id, capability, the member the leader's plan gave it, its producer and its
    output; the parts the plan gave out that were not delivered; the deliverable's hash.
    `skill(capability)` renders a part's capability as HTML (by default: its escaped text)."""
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
            f'<tr class="part" data-part="{escaped(part_id)}">'
            f"<td><code>{escaped(part_id)}</code></td>"
            f"<td>{_capability_cell(part.get('capability'), skill)}</td>"
            f"<td>{agent(None if assigned is None else str(assigned), names)}</td>"
            f'<td class="producer">{agent(str(part.get("producer") or "") or None, names)}</td>'
            f"<td>{_part_output(part)}</td></tr>"
        )
    delivered = {str(p.get("part", "")) for p in parts}
    for part_id, assigned in planned.items():
        if str(part_id) not in delivered:
            rows.append(
                f'<tr class="part missing" data-part="{escaped(part_id)}">'
                f"<td><code>{escaped(part_id)}</code></td><td>-</td>"
                f"<td>{agent(str(assigned), names)}</td>"
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
        f"{agent(str(deliverable.get('leader') or '') or None, names)}; {plan_note}. "
        f'sha256 <code class="hash">{escaped(deliverable.get("sha256", "-"))}</code></p>'
        f"{table}"
        '<details id="deliverable-plan"><summary>the leader\'s plan, as signed</summary>'
        f"{pretty_json(plan)}</details>"
    )


def _record_html(record: Mapping[str, Any], *, entry: EntryLink) -> str:
    pieces = []
    if "model" in record or "prompt" in record or "answer" in record:
        pieces.append(f'<div class="muted">judged by {escaped(record.get("model", "?"))}</div>')
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
            f'<div class="review">the requester\'s verdict: <b>{escaped(record["verdict"])}</b>'
            f"{' ' + link if link else ''}</div>"
        )
    elif "window_ended" in record:
        pieces.append(
            '<div class="review">no verdict given: accepted when the review window ended '
            f"({escaped(record['window_ended'])})</div>"
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
        f"carry {escaped(share)} of the value ({escaped(percent(share))} of v(N)); the requester's "
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
            f'<tr class="check" data-check="{escaped(check.get("id", ""))}" data-passed="{status}">'
            f'<td><span class="badge {status}">{status}</span></td>'
            f"<td><code>{escaped(check.get('id', ''))}</code></td>"
            f'<td class="num" title="{escaped(share_text)} of v(N)">'
            f"{escaped(percent(share_text))}</td>"
            f"<td>{escaped(check.get('detail', ''))}{held}</td></tr>"
        )
    table = (
        '<table id="checks"><tr><th></th><th>check</th><th class="num">share of v(N)</th>'
        f"<th>detail</th></tr>{''.join(rows)}</table>"
        if rows
        else '<p class="muted">The settlement logged no check result.</p>'
    )
    return rule + table


_MARKS = {
    "pass": "✓",
    "fail": "✗",
    "skipped": "-",
    "not-run": "·",
    "unchecked": "?",
    "pending": "…",
}


def checklist_html(
    steps: Sequence[StepResult], names: Mapping[str, str], *, entry: EntryLink
) -> str:
    """The audit's numbered checklist: each step's mark, title and detail (amounts in ETH,
    DIDs by name), and the entry it read."""
    items = []
    for step in steps:
        link = entry(step.entry) if step.entry is not None else ""
        where = f"<div>entry {link}</div>" if link else ""
        items.append(
            f'<li class="step step-{escaped(step.status)}" data-status="{escaped(step.status)}">'
            f'<span class="mark {escaped(step.status)}">{_MARKS.get(step.status, "?")}</span>'
            f'<div><div class="step-title">({step.number}) {escaped(step.title)}</div>'
            f'<div class="step-detail">{prose(step.detail, names)}</div></div>{where}</li>'
        )
    return f'<ol class="checklist" id="checklist">{"".join(items)}</ol>'


def team_tree(
    conversations: Sequence[Mapping[str, Any]],
    names: Mapping[str, str],
    parent: str | None = None,
) -> str:
    """The team as a tree of conversations (a sub-team under the conversation that formed
    it), each with its members, the leader starred; "" when there is none."""
    children = [c for c in conversations if c.get("parent") == parent]
    if not children:
        return ""
    items = []
    for c in children:
        leader = c.get("leader")
        members = "".join(
            f'<span class="chip{" lead" if m == leader else ""}">'
            f"{'★ ' if m == leader else ''}{agent(str(m), names)}</span>"
            for m in c.get("members", [])
        )
        items.append(
            f'<li><div class="conv" data-conv="{escaped(c["conv_id"])}">'
            f"<b>{escaped(c.get('title') or c['conv_id'])}</b> "
            f'<span class="muted">· <code>{escaped(c["conv_id"])}</code> · depth '
            f"{escaped(c['depth'])} · {escaped(c['turns'])} turns · {escaped(c['state'])}"
            f"</span><div>{members}</div></div>"
            f"{team_tree(conversations, names, str(c['conv_id']))}</li>"
        )
    return '<ul class="tree">' + "".join(items) + "</ul>"


_BAR_COLOURS = ("#3457d5", "#1e9e8f", "#e08a1e", "#8b4fc9", "#d04a6a", "#5c8a2e")


def payouts_chart(
    payouts: Mapping[str, str], values: Mapping[str, str], names: Mapping[str, str]
) -> str:
    """A horizontal bar chart of the payouts in wei (inline SVG), largest first, each bar
    labelled with the agent's name, the amount in ETH and its Shapley value where known."""
    amounts = {did: int(wei) for did, wei in payouts.items()}
    if not amounts:
        return '<p class="muted">No payouts.</p>'
    top = max(amounts.values()) or 1
    rows = sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))
    label_w, bar_w, row_h = 170, 520, 40
    height = row_h * len(rows) + 12
    parts = []
    for i, (did, wei) in enumerate(rows):
        y = 6 + row_h * i
        width = max(2, round(bar_w * wei / top))
        name = names.get(did) or short_did(did)
        value = values.get(did)
        shapley = f"φ = {fraction_text(value)}" if value is not None else ""
        parts.append(
            f'<g class="bar" data-did="{escaped(did)}"><title>{escaped(did)}: {wei} wei'
            f"{escaped(' · ' + shapley) if shapley else ''}</title>"
            f'<text x="{label_w - 10}" y="{y + 20}" text-anchor="end" font-size="14" '
            f'font-weight="600" fill="#1d2330">{escaped(name)}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="24" rx="5" '
            'fill="#eef1f6"></rect>'
            f'<rect x="{label_w}" y="{y + 4}" width="{width}" height="24" rx="5" '
            f'fill="{_BAR_COLOURS[i % len(_BAR_COLOURS)]}"></rect>'
            f'<text x="{label_w + bar_w + 10}" y="{y + 15}" font-size="13" fill="#1d2330">'
            f"{escaped(eth(wei))}</text>"
            f'<text x="{label_w + bar_w + 10}" y="{y + 31}" font-size="11" fill="#6b7385">'
            f"{escaped(shapley)}</text></g>"
        )
    total_w = label_w + bar_w + 250
    return (
        f'<svg id="payouts-chart" viewBox="0 0 {total_w} {height}" width="100%" '
        f'role="img" aria-label="payouts by agent">{"".join(parts)}</svg>'
    )


# -- the static report -----------------------------------------------------------------------


def _payouts(
    facts: Mapping[str, Any],
    settlement: Mapping[str, Any] | None,
    names: Mapping[str, str],
    *,
    read: bool,
) -> str:
    logged = settlement.get("payouts") if settlement is not None else facts.get("payouts")
    if isinstance(logged, Mapping):
        values = settlement.get("values") if settlement is not None else None
        return payouts_chart(
            {str(k): str(v) for k, v in logged.items()},
            {str(k): str(v) for k, v in values.items()} if isinstance(values, Mapping) else {},
            names,
        )
    if not read:
        return "<p>The payouts are read from the log: this report was rendered without it.</p>"
    return "<p>The task has not been settled: no payouts.</p>"


def _report_entry(index: int | None) -> str:
    return "" if index is None else f'<span class="entry">#{int(index)}</span>'


def render_html(report: AuditReport, store: LogStore | None = None) -> str:
    """The report as one HTML page. `store` is the log the audit read: the payouts, the
    contract holder's share and the agents' names come from it (without it they are left out).
    """
    facts = report.facts
    verdict = str(report.to_json()["verdict"])
    names = agent_names(store) if store is not None else {}
    found = settlement_entry(store, report.task_id) if store is not None else None
    settlement = found[1] if found is not None else None
    timeline = [
        f"<tr><td><code>{escaped(t['conv_id'])}</code></td>"
        f'<td class="num">t{int(t["turn"]):02d}</td><td>{escaped(t["index"])}</td>'
        f'<td><span class="kind {escaped(move)}">{escaped(move)}</span></td>'
        f"<td>{agent(t['speaker'], names)}</td></tr>"
        for t in facts.get("timeline", [])
        for move in [move_kind(str(t["kind"]))]
    ]
    payouts = _payouts(facts, settlement, names, read=store is not None)
    price, budget = facts.get("price"), facts.get("budget")
    price_text = escaped(eth(price)) if price is not None else "no price yet"
    budget_text = escaped(eth(budget)) if budget is not None else "-"
    checks = facts.get("checks") or []
    tree = team_tree(facts.get("conversations", []), names) or "<p>No conversation.</p>"
    body = f"""<main>
<h1>Audit of <code>{escaped(report.task_id)}</code> <span class="verdict {escaped(verdict.lower())}"
 id="verdict">{escaped(verdict)}</span></h1>
<p>{escaped(facts.get("title", ""))} — winner {agent(facts.get("winner"), names)},
price {price_text} of a {budget_text} budget.</p>
<h2>Checklist</h2>{checklist_html(report.steps, names, entry=_report_entry)}
<h2>Deliverable</h2><div id="deliverable">{deliverable_html(facts.get("deliverable"), names)}
</div>
<h2>Checks</h2><div id="check-results">
{checks_html(checks, settlement, entry=_report_entry)}</div>
<h2>Team</h2>{tree}
<h2>Payouts (Shapley)</h2><div id="payouts">{payouts}</div>
<h2>Conversation timeline</h2>
{table(["conversation", "turn", "entry", "move", "speaker"], timeline, numeric={"turn"})}
</main>"""
    return page(f"accord audit {report.task_id}", body, style=STYLE + _REPORT_STYLE)
