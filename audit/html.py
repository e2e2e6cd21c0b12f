"""A readable HTML report of an audit: verdict, checklist, team tree, timeline, payouts chart.

Plain server-rendered HTML with an inline SVG bar chart; every value is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from audit.checks import AuditReport

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 960px; margin: 2rem auto; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.verdict { display: inline-block; padding: .2rem .8rem; border-radius: .3rem; color: #fff; }
.pass { background: #2e7d32; } .fail { background: #c62828; }
table { border-collapse: collapse; width: 100%; } td, th { padding: .3rem .5rem; text-align: left;
  border-bottom: 1px solid #eee; vertical-align: top; } code { font-size: .85em; }
.mark-pass { color: #2e7d32; } .mark-fail { color: #c62828; } .mark-not-run { color: #999; }
ul.tree { list-style: none; padding-left: 1.2rem; }
"""


def _short(did: str | None) -> str:
    if not did:
        return "-"
    return did if len(did) < 24 else did[:16] + "…" + did[-6:]


def _tree(conversations: list[dict[str, Any]], parent: str | None) -> str:
    children = [c for c in conversations if c.get("parent") == parent]
    if not children:
        return ""
    items = []
    for c in children:
        members = ", ".join(_short(m) for m in c.get("members", []))
        items.append(
            f"<li><code>{escape(str(c['id']))}</code> depth {c['depth']}, {c['turns']} turns, "
            f"{escape(str(c['state']))}; leader {escape(_short(c.get('leader')))}; members "
            f"{escape(members)}{_tree(conversations, c['id'])}</li>"
        )
    return '<ul class="tree">' + "".join(items) + "</ul>"


def _chart(payouts: dict[str, str]) -> str:
    if not payouts:
        return "<p>No payouts.</p>"
    amounts = {k: int(v) for k, v in payouts.items()}
    top = max(amounts.values()) or 1
    rows = sorted(amounts.items(), key=lambda kv: -kv[1])
    height = 28 * len(rows) + 10
    bars = []
    for i, (did, wei) in enumerate(rows):
        width = int(520 * wei / top)
        y = 10 + 28 * i
        eth = wei / 10**18  # display only
        bars.append(
            f'<text x="0" y="{y + 14}" font-size="12">{escape(_short(did))}</text>'
            f'<rect x="230" y="{y}" width="{width}" height="18" fill="#1565c0"></rect>'
            f'<text x="{236 + width}" y="{y + 14}" font-size="12">{eth:.6f} ETH</text>'
        )
    return f'<svg width="900" height="{height}" role="img">{"".join(bars)}</svg>'


def render_html(report: AuditReport) -> str:
    data = report.to_json()
    facts = data["facts"]
    verdict = data["verdict"]
    steps = "".join(
        f'<tr><td class="mark-{escape(s["status"])}">{escape(s["status"])}</td>'
        f"<td>({s['step']}) {escape(s['title'])}</td><td>{escape(s['detail'])}</td>"
        f"<td>{'' if s['entry'] is None else s['entry']}</td></tr>"
        for s in data["steps"]
    )
    timeline = "".join(
        f"<tr><td><code>{escape(str(t['conversation']))}</code></td><td>{t['turn']}</td>"
        f"<td>{t['index']}</td><td>{escape(str(t['kind']))}</td>"
        f"<td>{escape(_short(t['speaker']))}</td></tr>"
        for t in facts.get("timeline", [])
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>accord audit {escape(report.task_id)}</title>
<style>{_STYLE}</style></head><body>
<h1>Audit of <code>{escape(report.task_id)}</code> <span class="verdict {verdict.lower()}"
 id="verdict">{verdict}</span></h1>
<p>{escape(str(facts.get("title", "")))} — winner {escape(_short(facts.get("winner")))},
price {escape(str(facts.get("price")))} wei of a {escape(str(facts.get("budget")))} wei budget.</p>
<h2>Checklist</h2><table><tr><th></th><th>step</th><th>detail</th><th>entry</th></tr>{steps}</table>
<h2>Team</h2>{_tree(facts.get("conversations", []), None) or "<p>No conversation.</p>"}
<h2>Payouts (Shapley)</h2><div id="payouts">{_chart(facts.get("payouts", {}))}</div>
<h2>Conversation timeline</h2>
<table><tr><th>conversation</th><th>turn</th><th>entry</th><th>message</th><th>speaker</th></tr>
{timeline}</table>
</body></html>
"""
