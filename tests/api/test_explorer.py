"""The web audit explorer over the honest demo world, built in-process (SQLite ledger, in-memory
anchor and escrow chains, reference agents), read by HTTP and by a real headless Chromium."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from html import escape
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from accord.api.explorer import explorer_router, render_task
from accord.api.routes.skills import logged_agreement
from accord.audit.checks import audit_task
from accord.audit.html_kit import eth, percent
from accord.coordinator.service import conversation_ids, run_awarded_task
from accord.identity.manifests import resolve_builtin
from accord.identity.onboarding import open_onboarding
from accord.identity.skill_registry import DeclaredSkill
from accord.ledger import merkle
from accord.ledger.chain import DEVNET_OPERATOR_KEY, AnchorChain, MemoryAnchorChain
from accord.ledger.settings import Settings
from accord.ledger.store import LogStore
from accord.ledger.wiring import open_ledger
from accord.market.escrow import (
    EscrowActions,
    EscrowChain,
    MemoryEscrowChain,
    MemoryEscrowJournal,
    address_of,
)
from accord.market.money import parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.service import Market
from accord.market.settlement import settle_task
from accord.market.strategies import cost_plus_margin
from accord.market.wiring import DEVNET_REQUESTER_KEY, ChainEscrow, MarketContext
from tests.audit.conftest import assert_deliverable_section
from tests.clocks import Clock
from tests.identity.test_skill_manifests import manifest as skill_manifest
from tests.serving import serve
from tests.specs import invoice_spec, single_part_spec

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
HOSTILE_TITLE = '<script>alert("x")</script> & figures'


@dataclass(frozen=True)
class ExplorerContext:
    """The explorer's sources (`accord.api.explorer.ExplorerSources`) as the tests hold them."""

    store: LogStore
    anchors: AnchorChain
    escrow: EscrowChain


@dataclass
class World:
    context: ExplorerContext
    task_id: str
    other_task_id: str
    lone_task_id: str
    names: dict[str, str]
    payouts: dict[str, int]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The demo's honest flow: onboard, post, bid, reveal, award, run the team, settle, anchor."""
    home = tmp_path_factory.mktemp("explorer") / "home"
    settings = Settings.from_env({"ACCORD_HOME": str(home)})
    clock = Clock()
    anchors = MemoryAnchorChain()
    ledger = open_ledger(settings, anchors)
    ledger.clock = clock
    assert ledger.anchorer is not None
    ledger.anchorer.clock = clock
    onboarding = open_onboarding(settings, ledger)
    escrow_chain = MemoryEscrowChain(address_of(DEVNET_OPERATOR_KEY))
    actions = EscrowActions(escrow_chain, MemoryEscrowJournal(), receipt_timeout=0)
    escrow = ChainEscrow(escrow_chain, actions, DEVNET_OPERATOR_KEY)
    market = Market(ledger, onboarding, escrow, clock=clock)
    context = MarketContext(settings, onboarding, market, escrow)
    registry = onboarding.registry
    names = {}
    for name, capabilities in (
        ("ada", ["arithmetic", "extraction"]),
        ("linus", ["arithmetic", "extraction"]),
        ("grace", ["extraction", "python"]),
        ("hopper", ["arithmetic"]),
    ):
        record = registry.new_agent(name, now=clock(), runtime="reference")
        onboarding.onboard(record, capabilities, item_count=5)
        names[record.did] = name
    requester = registry.signer(registry.new_agent("requester", now=clock()))
    spec = invoice_spec(title="Check the quarterly figures")
    task = market.post(requester, spec, requester_key=DEVNET_REQUESTER_KEY)
    salts = {}
    for name, cost in (("ada", "0.12eth"), ("linus", "0.10eth")):
        signer = registry.signer(registry.get(name))
        price = cost_plus_margin(parse_amount(cost), Fraction(1, 5), spec.budget)
        assert price is not None
        salt = secrets.token_bytes(32)
        market.commit(commit_bid(signer, task.task_id, price, salt))
        salts[name] = (price, salt)
    clock.advance(61)
    for name, (price, salt) in salts.items():
        signer = registry.signer(registry.get(name))
        market.reveal(reveal_bid(signer, task.task_id, price, salt))
    clock.advance(61)
    market.award(task.task_id)
    run_awarded_task(context, task.task_id)
    # Every member, the contract holder included, binds a payout address before settlement.
    for name in names.values():
        onboarding.bind_payout(registry.get(name), escrow.chain_id())
    settled = settle_task(market, onboarding, task.task_id)
    other = market.post(
        requester,
        invoice_spec(title=HOSTILE_TITLE, description="<b>not bold</b>", budget="0.1eth"),
        requester_key=DEVNET_REQUESTER_KEY,
    )
    # A task with one bidder: it wins, and is paid against the reserve.
    lone = market.post(
        requester, single_part_spec("arithmetic"), requester_key=DEVNET_REQUESTER_KEY
    )
    hopper = registry.signer(registry.get("hopper"))
    salt = secrets.token_bytes(32)
    lone_bid = parse_amount("0.2eth")
    market.commit(commit_bid(hopper, lone.task_id, lone_bid, salt))
    clock.advance(61)
    market.reveal(reveal_bid(hopper, lone.task_id, lone_bid, salt))
    clock.advance(61)
    market.award(lone.task_id)
    ledger.anchorer.anchor_latest()
    return World(
        ExplorerContext(ledger.store, anchors, escrow_chain),
        task.task_id,
        other.task_id,
        lone.task_id,
        names,
        {did: int(w) for did, w in settled.payouts.items()},
    )


def make_app(world: World) -> FastAPI:
    app = FastAPI()
    app.include_router(explorer_router(lambda: world.context))
    return app


@pytest.fixture(scope="module")
def client(world: World) -> Iterator[TestClient]:
    with TestClient(make_app(world)) as test_client:
        yield test_client


# -- over HTTP -------------------------------------------------------------------------------


def test_index_lists_the_tasks_escaped(client: TestClient, world: World) -> None:
    page = client.get("/explorer")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert f'href="/explorer/tasks/{world.task_id}"' in page.text
    assert "Check the quarterly figures" in page.text
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; figures" in page.text
    # newest first
    assert page.text.index(world.other_task_id) < page.text.index(world.task_id)


def test_task_page_shows_verdict_checklist_team_bids_payouts(
    client: TestClient, world: World
) -> None:
    page = client.get(f"/explorer/tasks/{world.task_id}")
    assert page.status_code == 200
    html = page.text
    assert re.search(r'id="verdict">PASS<', html)
    assert html.count('data-status="pass"') == 7
    assert 'id="payouts-chart"' in html
    for did, wei in world.payouts.items():
        if wei:
            assert f'data-did="{did}"' in html
            assert eth(wei) in html
    for name in ("ada", "linus"):  # both bidders, named from their registrations
        assert f">{name}<" in html
    assert 'id="bids"' in html and "winner" in html
    assert 'id="timeline"' in html and 'class="kind conclude">conclude<' in html
    teams = conversation_ids(world.context.store, world.task_id)
    assert len(teams) >= 2  # the team and at least one nested sub-team
    assert html.count('class="conv"') == len(teams)
    assert "/explorer/entries/" in html and "/proof" in html
    # who holds each signer's key: every agent here was made by the operator's home
    custody = _section(html, "custody")
    assert custody.count('data-custody="hosted"') >= 3 and 'data-custody="self"' not in custody
    assert "its signatures prove only that the operator signed" in custody
    # the requester never registered: the log shows no key of it handed to the operator
    assert custody.count('data-custody="unregistered"') == 1 and "never registered" in custody


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start : html.index("</section>", start)]


def test_task_page_shows_each_part_with_its_producer_and_output(
    client: TestClient, world: World
) -> None:
    html = client.get(f"/explorer/tasks/{world.task_id}").text
    report = audit_task(
        world.context.store,
        world.task_id,
        anchors=world.context.anchors,
        escrow=world.context.escrow,
    )
    deliverable = report.facts["deliverable"]
    section = _section(html, "deliverable")
    assert deliverable["sha256"] in section
    assert f">{world.names[deliverable['leader']]}<" in section
    assert len(re.findall(r'<tr class="part" ', section)) == 4
    assert_deliverable_section(section, deliverable, world.names)


def test_task_page_shows_each_check_result_and_the_contractor_rule(
    client: TestClient, world: World
) -> None:
    html = client.get(f"/explorer/tasks/{world.task_id}").text
    section = _section(html, "check-results")
    assert "the contract holder's plan and assembly checks carry 1/5 of the value" in section
    report = audit_task(
        world.context.store,
        world.task_id,
        anchors=world.context.anchors,
        escrow=world.context.escrow,
    )
    checks = report.facts["checks"]
    assert len(checks) == 8 and all(c["passed"] for c in checks)
    rows = re.findall(r'<tr class="check" data-check="([^"]+)" data-passed="(\w+)">', section)
    assert rows == [(c["id"], "pass") for c in checks]
    assert section.count('<span class="badge pass">pass</span>') == len(checks)
    for check in checks:
        assert percent(check["share"]) in section
        assert escape(check["detail"], quote=True) in section


def test_a_lone_bidder_is_paid_the_reserve(client: TestClient, world: World) -> None:
    html = client.get(f"/explorer/tasks/{world.lone_task_id}").text
    award = _section(html, "award-rule")
    assert "One bidder: it is paid the reserve, the task's budget (0.5 ETH)" in award
    assert "rather than its own bid of 0.2 ETH" in award
    assert "One bidder" not in client.get(f"/explorer/tasks/{world.task_id}").text


def test_a_malicious_output_never_appears_unescaped(world: World) -> None:
    hostile = '<script>alert("owned")</script>'
    report = audit_task(
        world.context.store,
        world.task_id,
        anchors=world.context.anchors,
        escrow=world.context.escrow,
    )
    report = copy.deepcopy(report)
    parts = report.facts["deliverable"]["parts"]
    parts[0]["output"] = {"note": hostile, hostile: [hostile] * 40}
    parts[1]["output"] = hostile
    parts[1]["producer"] = hostile
    report.facts["deliverable"]["plan"] = {"assignments": {hostile: hostile}}
    report.facts["checks"][0]["detail"] = hostile
    report.facts["checks"][1]["record"] = {"model": hostile, "prompt": hostile, "answer": hostile}
    report.facts["checks"][2]["record"] = {"entry": 3, "verdict": hostile}
    # what a stranger names: the task's title, a team's title, a speaker, a step's detail
    report.facts["title"] = hostile
    report.facts["conversations"][0]["title"] = hostile
    report.facts["timeline"][0]["speaker"] = hostile
    report.steps[0] = dataclasses.replace(report.steps[0], detail=hostile)
    html = render_task(world.context.store, report)
    assert "<script>alert" not in html
    assert escape(hostile) in html
    assert html.count("<script>") == 1  # the page's own filter script
    assert '<a class="entry" href="/explorer/entries/3/proof">#3</a>' in _section(
        html, "check-results"
    )
    assert "<details><summary>" in _section(html, "deliverable")  # the long output is folded


def test_unfinished_task_page_is_pending_and_escaped(client: TestClient, world: World) -> None:
    """A task in progress is not a failure: its page says PENDING (`accord.audit.checks`)."""
    page = client.get(f"/explorer/tasks/{world.other_task_id}")
    assert page.status_code == 200
    assert 'id="verdict">PENDING<' in page.text
    assert "The task is in progress" in page.text and "Fails at step" not in page.text
    assert "<script>alert" not in page.text


def test_proof_page_shows_the_covering_anchor_and_a_proof_that_verifies(
    client: TestClient, world: World
) -> None:
    store, chain = world.context.store, world.context.anchors
    [anchor] = [a for a in chain.anchors(store.log_id) if a.size == store.size()]
    index = store.find(subject=world.task_id, limit=1)[0].index
    page = client.get(f"/explorer/entries/{index}/proof")
    assert page.status_code == 200
    covering = min((a for a in chain.anchors(store.log_id) if a.size > index), key=lambda a: a.size)
    assert anchor.size >= covering.size
    assert f"{covering.block_number}</div>" in page.text
    assert covering.root.hex() in page.text
    assert "✓ the proof recomputes the root anchored in block" in page.text
    shown = re.findall(r'<td class="mono hash">([0-9a-f]{64})</td>', page.text)
    proof = [bytes.fromhex(h) for h in shown]
    assert proof == store.inclusion_proof(index, covering.size)
    leaf = store.entry(index).leaf_hash
    merkle.verify_inclusion(leaf, index, covering.size, proof, covering.root)


def test_unknown_task_and_entry_are_404(client: TestClient, world: World) -> None:
    assert client.get("/explorer/tasks/task-nope").status_code == 404
    missing = client.get(f"/explorer/entries/{world.context.store.size() + 5}/proof")
    assert missing.status_code == 404
    assert "no entry" in missing.text


# -- in a real headless Chromium -------------------------------------------------------------


def _browser_available() -> str | None:
    """None when Debian's chromium and chromedriver are there (installing them if need be),
    else why not."""
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        script = ROOT / "scripts" / "install_browser.sh"
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=900, check=False
        )
        if done.returncode != 0:
            return f"chromium cannot be installed here: {(done.stderr or done.stdout)[-300:]}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
def served(world: World) -> Iterator[str]:
    with serve(make_app(world)) as url:
        yield url


def test_explorer_in_headless_chromium(served: str, world: World, tmp_path: Path) -> None:
    reason = _browser_available()
    if reason is not None:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        driver.set_page_load_timeout(30)
        driver.get(f"{served}/explorer")
        link = driver.find_element(By.CSS_SELECTOR, f'a[href="/explorer/tasks/{world.task_id}"]')
        link.click()
        WebDriverWait(driver, 20).until(
            expected_conditions.presence_of_element_located((By.ID, "verdict"))
        )
        assert driver.find_element(By.ID, "verdict").text == "PASS"
        chart = driver.find_element(By.ID, "payouts-chart")
        assert chart.is_displayed() and chart.size["height"] > 40
        bars = chart.find_elements(By.CSS_SELECTOR, "g.bar")
        assert len(bars) == len(world.payouts)
        shown = chart.text
        for did, wei in world.payouts.items():
            assert world.names[did] in shown
            assert eth(wei) in shown
        # the little JavaScript: clicking the sub-team shows only its moves
        rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-row-conv]")
        sub = driver.find_elements(By.CSS_SELECTOR, "ul.tree ul .conv")[0]
        sub.click()
        visible = [r for r in rows if r.is_displayed()]
        assert 0 < len(visible) < len(rows)
        sub.click()
        assert all(r.is_displayed() for r in rows)

        driver.execute_script("window.scrollTo(0, 0)")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, int(height) + 100)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "explorer.png"
        assert driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000

        driver.find_element(By.CSS_SELECTOR, "#entries a").click()
        WebDriverWait(driver, 20).until(
            expected_conditions.presence_of_element_located((By.ID, "proof-result"))
        )
        assert "✓" in driver.find_element(By.ID, "proof-result").text
        assert driver.find_element(By.ID, "anchor-block").text.strip().isdigit()
        driver.save_screenshot(str(ARTIFACTS / "explorer-proof.png"))
    finally:
        driver.quit()


# -- the skill page ----------------------------------------------------------------------------


def test_skill_page_shows_the_manifest_its_declarer_and_the_agreement(
    client: TestClient, world: World
) -> None:
    """A built-in skill by its name and by its id: one page, its manifest's facts, and each
    credentialed agent's exam score beside its real parts, as `market.agreement` computes."""
    arithmetic = resolve_builtin("arithmetic")
    assert arithmetic is not None
    by_name = client.get("/explorer/skills/arithmetic")
    assert by_name.status_code == 200, by_name.text
    assert client.get(f"/explorer/skills/{arithmetic.skill_id}").text == by_name.text
    html = by_name.text
    assert f'id="skill-id">{arithmetic.skill_id}<' in html
    assert escape(arithmetic.description) in html and f"v{arithmetic.version}" in html
    assert "the operator" in html and "shipped with the service" in html
    expected = logged_agreement(world.context.store, DeclaredSkill(arithmetic, "", None, None))
    holders = {h["agent"]: h for h in expected["holders"]}
    assert {world.names[did] for did in holders} == {"ada", "linus", "hopper"}
    assert any(h["field"] is not None for h in holders.values())  # the settled invoice
    table_html = _section(html, "agreement")
    for did, holder in holders.items():
        row = re.search(rf'<tr class="holder" data-agent="{re.escape(did)}">(.*?)</tr>', table_html)
        assert row is not None, did
        assert world.names[did] in row.group(1) and percent(holder["exam"]) in row.group(1)
        field = "-" if holder["field"] is None else percent(holder["field"])
        assert f'<td class="num">{holder["parts"]}</td><td class="num">{field}</td>' in row.group(1)


def test_task_page_links_each_part_to_its_skill(client: TestClient, world: World) -> None:
    deliverable = _section(client.get(f"/explorer/tasks/{world.task_id}").text, "deliverable")
    assert 'href="/explorer/skills/arithmetic"' in deliverable
    assert 'href="/explorer/skills/extraction"' in deliverable


def test_an_unknown_skill_is_404_and_escaped(client: TestClient) -> None:
    for skill in ("juggling", "f" * 64, "<script>x</script>"):
        response = client.get(f"/explorer/skills/{skill}")
        assert response.status_code == 404
        assert "<script>x" not in response.text
    assert client.get(f"/explorer/skills/{'a' * 65}").status_code == 422


def test_a_declared_skill_page_names_its_declarer_and_escapes_the_manifest(
    tmp_path: Path,
) -> None:
    """A hosted agent declares a skill whose description is hostile HTML: its page names the
    agent and its `skill.declared` entry, and shows the text escaped."""
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    anchors = MemoryAnchorChain()
    ledger = open_ledger(settings, anchors)
    onboarding = open_onboarding(settings, ledger)
    record = onboarding.registry.new_agent("author", now=ledger.clock())
    onboarding.register(record)
    document = skill_manifest(description=HOSTILE_TITLE)
    declared, _ = onboarding.skills.declare(onboarding.registry.signer(record), document)
    sources = ExplorerContext(
        ledger.store, anchors, MemoryEscrowChain(address_of(DEVNET_OPERATOR_KEY))
    )
    app = FastAPI()
    app.include_router(explorer_router(lambda: sources))
    with TestClient(app) as test_client:
        html = test_client.get(f"/explorer/skills/{declared.manifest.skill_id}").text
        assert escape(HOSTILE_TITLE) in html and HOSTILE_TITLE not in html
        assert f'title="{record.did}">author<' in html
        assert f'href="/explorer/entries/{declared.index}/proof"' in html
        assert 'id="agreement">No agent holds a credential' in html
        assert test_client.get("/explorer/skills/add-two").status_code == 404  # by id only
