"""The HTML kit of accord's two pages: the audit report (`accord.audit.html`, `accord audit
--html`) and the web explorer (`accord.api.explorer`) are built from these pieces.

Pure: strings in, escaped HTML out; no file, network, clock or store. Whatever a page shows of
the log (an agent's name, a task's title, a part's output) may come from a stranger, so it
enters a page only through `escaped` or a piece built on it: a `<script>` reads as text.

    escaped(value)               any value as text, safe in an element or a quoted attribute
    page(title, body, ...)       the document: doctype, charset, viewport, title, stylesheet
    table(columns, rows, ...)    a table under its header row
    agent(did, names)            an agent by name, its DID on hover; a short DID if unnamed
    eth(wei)                     an amount as text in ETH (`accord.market.money.format_eth`)
    amounts(text)                escaped text, each amount of wei in it in ETH, wei on hover
    prose(text, names)           `amounts`, with each DID in it shown as `agent` shows it
    fraction_text(v), percent(v) a share or a Shapley value for a person to read
    pretty_json(value)           indented JSON in an escaped <pre>, folded when long
    STYLE                        the stylesheet both pages start from

Amounts are exact (`format_eth`, the ETH the CLI's `--json` wei stand for): the pages show
a payout to the wei, with the wei themselves on hover.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from fractions import Fraction
from html import escape

from accord.market.money import format_eth, with_amounts

MAX_SHOWN_OUTPUT = 20_000
"""Characters of one JSON value shown; the rest is cut (the log holds it whole)."""
FOLD_LINES = 12
FOLD_CHARS = 600
"""A value longer than this many lines or characters is folded in a <details>."""

_DID = re.compile(r"did:key:[1-9A-HJ-NP-Za-km-z]+")


def escaped(value: object) -> str:
    """`str(value)` as HTML text: `<`, `>`, `&` and both quotes escaped, so the result is safe
    inside an element and inside a quoted attribute."""
    return escape(str(value), quote=True)


def page(title: str, body: str, *, style: str, script: str = "") -> str:
    """One HTML document: `title` (text, escaped here), `body` (HTML), `style` (CSS) and an
    optional `script` (the page's own JavaScript, never anything from the log)."""
    js = f"<script>{script}</script>" if script else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escaped(title)}</title><style>{style}</style></head>
<body>{body}{js}</body></html>
"""


def table(
    columns: Sequence[str],
    rows: Iterable[str],
    *,
    numeric: Collection[str] = (),
    element_id: str | None = None,
) -> str:
    """A <table>: a header row of `columns` (text, escaped here; those in `numeric` aligned
    right, as their cells are with `class="num"`), then `rows` (each a `<tr>` of HTML)."""
    head = "".join(
        f'<th class="num">{escaped(c)}</th>' if c in numeric else f"<th>{escaped(c)}</th>"
        for c in columns
    )
    at = f' id="{escaped(element_id)}"' if element_id else ""
    return f"<table{at}><tr>{head}</tr>{''.join(rows)}</table>"


def short_did(did: str | None) -> str:
    """A DID cut to its start and end (`did:key:z6MkhaXg…4UYbfo`); `-` for none."""
    if not did:
        return "-"
    return did if len(did) < 24 else did[:16] + "…" + did[-6:]


def agent(did: str | None, names: Mapping[str, str]) -> str:
    """An agent as HTML: the name it registered under (`names`), else its short DID; the whole
    DID on hover. `-` for none."""
    if not did:
        return '<span class="muted">-</span>'
    label = names.get(did) or short_did(did)
    return f'<span class="agent" title="{escaped(did)}">{escaped(label)}</span>'


def eth(wei: int | str) -> str:
    """An amount of wei (an integer or its decimal text, as the log holds it) as text in ETH,
    exactly: `format_eth`. Raises ValueError for text that is not a whole number."""
    return format_eth(int(wei))


def amounts(text: str) -> str:
    """Escaped `text` with each amount of wei in it (`accord.market.money.WEI_IN_TEXT`) shown in
    ETH, exactly, the wei on hover: `at 200000000000000000 wei` reads `at 0.2 ETH`."""
    return with_amounts(
        escaped(text),
        lambda wei: f'<span class="amount" title="{wei} wei">{escaped(format_eth(wei))}</span>',
    )


def prose(text: str, names: Mapping[str, str]) -> str:
    """`amounts(text)` with each DID in it shown by `agent` (a name where `names` has one)."""
    return _DID.sub(lambda m: agent(m.group(0), names), amounts(text))


def as_fraction(value: object) -> Fraction | None:
    """`value` (`12/55`, `3`, a Fraction) as a Fraction; None if it is not one."""
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        return None


def fraction_text(value: object) -> str:
    """`12/55 ≈ 0.218`; a whole number as it is; text that is no fraction unchanged (escape
    the result)."""
    fraction = as_fraction(value)
    if fraction is None:
        return str(value)
    return str(fraction) if fraction.denominator == 1 else f"{fraction} ≈ {float(fraction):.3f}"


def percent(share: object) -> str:
    """`12/55` → `21.8 %` (to a tenth of a percent, by integer arithmetic); `?` if unreadable."""
    fraction = as_fraction(share)
    if fraction is None:
        return "?"
    tenths = round(fraction * 1000)
    sign = "-" if tenths < 0 else ""
    whole, rest = divmod(abs(tenths), 10)
    return f"{sign}{whole}.{rest} %" if rest else f"{sign}{whole} %"


def json_text(value: object) -> str:
    """`value` as indented JSON (a string as it is), cut after MAX_SHOWN_OUTPUT characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_SHOWN_OUTPUT:
        text = text[:MAX_SHOWN_OUTPUT] + "\n…"
    return text


def pretty_json(value: object) -> str:
    """`value` as indented JSON in an escaped <pre>; folded in a <details> when long."""
    text = json_text(value)
    block = f'<pre class="output">{escaped(text)}</pre>'
    lines = text.count("\n") + 1
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return block
    return f"<details><summary>{lines} lines, {len(text)} characters</summary>{block}</details>"


STYLE = """
:root { --ink: #1d2330; --muted: #6b7385; --line: #e4e7ee; --bg: #f6f7fb; --card: #fff;
  --accent: #3457d5; --pass: #1e7b45; --pass-bg: #e3f4ea; --fail: #b3261e; --fail-bg: #fbe4e2; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--ink); background: var(--bg); }
main { max-width: 1080px; margin: 1.5rem auto 4rem; padding: 0 1.5rem; }
h1 { font-size: 1.5rem; margin: .2rem 0 .3rem; display: flex; gap: .8rem; align-items: center;
  flex-wrap: wrap; }
h2 { font-size: 1.1rem; margin: 0 0 .8rem; }
.verdict { font-size: 1rem; font-weight: 700; padding: .2rem .9rem; border-radius: 999px;
  letter-spacing: .06em; }
.verdict.pass { color: var(--pass); background: var(--pass-bg); border: 1px solid #b5dfc5; }
.verdict.fail { color: var(--fail); background: var(--fail-bg); border: 1px solid #f0b9b4; }
.verdict.incomplete { color: #8a5a00; background: #fff4d6; border: 1px solid #f0d48a; }
.verdict.pending { color: #1f4f8a; background: #e6effa; border: 1px solid #a9c5ea; }
.muted { color: var(--muted); } code, .mono { font: .85em ui-monospace, "SFMono-Regular",
  Menlo, monospace; } .agent { font-weight: 600; border-bottom: 1px dotted var(--muted); }
.amount { border-bottom: 1px dotted var(--muted); }
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
.mark.unchecked { background: #e0a800; } .mark.pending { background: #4a7fc1; }
.step-title { font-weight: 600; } .step-detail { color: var(--muted); font-size: .92em; }
ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 1.4rem; }
ul.tree { padding-left: 0; } ul.tree ul { border-left: 2px solid var(--line);
  margin-left: .6rem; } ul.tree li { margin: .5rem 0; }
.conv { display: inline-block; border: 1px solid var(--line); border-radius: 8px;
  padding: .45rem .7rem; background: #fbfcff; }
.chip { display: inline-block; background: #eef1fd; border-radius: 999px;
  padding: 0 .55rem; margin: .1rem .15rem 0 0; font-size: .85em; }
.chip.lead { background: #ffe9c7; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.nowrap { white-space: nowrap; }
.kind { font-size: .78rem; font-weight: 600; padding: .05rem .45rem; border-radius: 4px;
  background: #eef1f6; } .kind.conclude { background: var(--pass-bg); color: var(--pass); }
.kind.assign_sync, .kind.assign_async { background: #e8edff; color: #2b45a8; }
.kind.report { background: #fff1dc; color: #8a5300; }
.kind.abandon { background: var(--fail-bg); color: var(--fail); }
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
"""The stylesheet of both pages: colours, type, tables, the verdict, the checklist's marks,
the team tree, badges, folded outputs. A page adds only the rules of its own pieces."""
