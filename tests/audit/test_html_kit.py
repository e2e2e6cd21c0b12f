"""The HTML kit both audit pages are built from: whatever a stranger wrote (an agent's name, a
task's title, a DID that is none) comes out as text, and amounts read in exact ETH."""

from __future__ import annotations

import re

import pytest

from accord.audit.html_kit import (
    STYLE,
    agent,
    amounts,
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
from accord.market.money import format_eth

HOSTILE = "<script>alert(\"owned\")</script> & 'quoted'"
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def test_escaped_is_safe_in_text_and_in_quoted_attributes() -> None:
    assert escaped(HOSTILE) == (
        "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt; &amp; &#x27;quoted&#x27;"
    )
    assert escaped(3) == "3" and escaped(None) == "None"


@pytest.mark.parametrize("did", [DID, HOSTILE])
def test_an_agent_with_a_hostile_name_or_did_is_text(did: str) -> None:
    named = agent(did, {did: HOSTILE})
    assert "<script" not in named and escaped(HOSTILE) in named
    assert f'title="{escaped(did)}"' in named
    unnamed = agent(did, {})
    assert "<script" not in unnamed and escaped(short_did(did)) in unnamed
    assert agent(None, {DID: HOSTILE}) == '<span class="muted">-</span>'


def test_prose_names_agents_and_shows_amounts_in_exact_eth() -> None:
    text = f"{DID} bid 66666666666666667 wei for {HOSTILE}, 5 wei more than 12 parts"
    shown = prose(text, {DID: HOSTILE})
    assert "<script" not in shown and shown.count(escaped(HOSTILE)) == 2
    assert f'<span class="agent" title="{DID}">' in shown
    amount = format_eth(66666666666666667)
    assert f'<span class="amount" title="66666666666666667 wei">{amount}</span>' in shown
    assert '<span class="amount" title="5 wei">0.000000000000000005 ETH</span>' in shown
    assert "12 parts" in shown  # a count is no amount
    assert amounts(HOSTILE) == escaped(HOSTILE)


def test_amounts_are_exact_eth() -> None:
    assert eth(500000000000000000) == eth("500000000000000000") == "0.5 ETH"
    assert eth(1) == format_eth(1)
    with pytest.raises(ValueError):
        eth("0.5")


def test_the_page_and_its_table_escape_their_text() -> None:
    rows = [f"<tr><td>{escaped(HOSTILE)}</td><td class='num'>1</td></tr>"]
    listed = table([HOSTILE, "n"], rows, numeric={"n"}, element_id='x" onload="y')
    assert "<script" not in listed and '<th class="num">n</th>' in listed
    assert 'id="x&quot; onload=&quot;y"' in listed
    document = page(HOSTILE, listed, style=STYLE)
    assert "<script" not in document
    assert f"<title>{escaped(HOSTILE)}</title>" in document
    assert document.startswith("<!doctype html>")
    assert page("t", "", style="", script="run()").count("<script>run()</script>") == 1


def test_shares_and_json() -> None:
    assert percent("12/55") == "21.8 %" and percent("1/5") == "20 %" and percent("x") == "?"
    assert fraction_text("12/55") == "12/55 ≈ 0.218" and fraction_text("3") == "3"
    assert fraction_text(HOSTILE) == HOSTILE  # unchanged: the caller escapes it
    short = pretty_json({"note": HOSTILE})
    assert "<script" not in short and short.startswith('<pre class="output">')
    folded = pretty_json([HOSTILE] * 40)
    assert folded.startswith("<details><summary>42 lines") and "<script" not in folded
    assert re.search(r"…</pre>", pretty_json("x" * 30_000))
