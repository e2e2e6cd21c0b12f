"""A self-custody agent: its did:key and payout key stay in its owner's files, and it joins an
accord service through the HTTP API only.

    agent = KitAgent.load(client_url, key_file, handler, name=..., capabilities=[...])
    agent.start(host, port)          # serve /run, /sign, /accord/notify
    agent.join()                     # register (DID-auth), sit exams, bind the payout address
    agent.run_until(stopping)        # bid by its strategy, reveal, lead what it wins

Every ledger event of its own the agent signs itself: its registration (custody `self`), its
exam answers, its payout binding, its sealed bids and reveals, and, when it wins, every act of
the contract holder (`accord.kit.leader`). Its team reports it signs at its own `/sign` after
checking them (`accord.kit.server`). `accord agent run` is the command around this class.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from eth_account import Account
from eth_account.signers.local import LocalAccount

from accord.client import AccordClient, ApiError
from accord.coordinator.conversation import WORK_ANSWERED
from accord.coordinator.errors import CoordinatorError
from accord.coordinator.policy import Policy
from accord.coordinator.runner import RunSettings
from accord.identity.challenges import JSON, JSONObject, validate_output
from accord.identity.errors import ExamError, UnknownSkill
from accord.identity.manifests import SkillManifest
from accord.identity.payout import bind_payout_address
from accord.identity.presentations import create_presentation
from accord.identity.runtimes import INPUTS_KEY, AgentRuntime, AgentRuntimeError
from accord.identity.skill_attempts import ATTEMPT_ANSWERED, ATTEMPT_NONCE
from accord.identity.skill_exams import NONCE_BYTES
from accord.kit.assignments import (
    Assignment,
    assignments_to,
    opened_inputs,
    part_item,
    reported_outputs,
)
from accord.kit.leader import SEQ_RETRIES, lead, task_from_json
from accord.kit.practice import preflight
from accord.kit.server import KitServer, Refused
from accord.kit.skills import check_items, fetch_skill, regraded
from accord.kit.wallet import Wallet, WalletError, read_key_file, write_key_file
from accord.ledger.errors import AccordError
from accord.ledger.events import parse_time
from accord.ledger.signing import Ed25519Signer, read_keyfile, write_keyfile
from accord.market.checks import CheckResult
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.work import part_refs

log = logging.getLogger("accord.kit")
CREDIT_EVERY = 5.0
"""Seconds between looks at the escrow's credit for an agent that withdraws its pay."""
RENEW_BEFORE = timedelta(days=1)
"""A credential that ends sooner than this is not kept on start: the agent sits the exam again."""
LEADERS_TTL = 60.0
"""Seconds the agent trusts its list of who leads a running task before asking again."""
LEADERS_REFRESH = 1.0
"""The least number of seconds between two looks at who leads: strangers cannot make the
agent ask the service faster than this."""

Strategy = Callable[[Mapping[str, Any]], Wei | None]
"""What to bid on a task (as `GET /tasks` lists it: its spec, the requester's checks included), or
None to let it pass."""
Say = Callable[..., None]


def fixed_price(price: Wei) -> Strategy:
    """Bid `price` on every task whose budget covers it."""

    def strategy(task: Mapping[str, Any]) -> Wei | None:
        return price if int(task["spec"]["budget"]) >= price else None

    return strategy


def load_key(path: Path) -> Ed25519Signer:
    """The agent's Ed25519 key: read from `path`, or made there (mode 0600) on first use.
    Raises MalformedError for a file that holds no key."""
    if not path.exists():
        write_keyfile(path, Ed25519Signer.generate())
    return read_keyfile(path)


def load_eth_key(path: Path) -> LocalAccount:
    """The agent's payout account: `{"key": "0x..."}` at `path`, made (0600) on first use.
    Raises WalletError for a file that holds no key or that others may read."""
    if not path.exists():
        write_key_file(path)
    account: LocalAccount = Account.from_key(read_key_file(path))
    return account


def _segment(value: str) -> str:
    return quote(value, safe="")


def _moment(text: object) -> datetime | None:
    """An RFC 3339 time with its offset (a credential's `validUntil`), or None for anything
    else."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _quiet(event: str, **fields: Any) -> None:
    log.info("%s %s", event, fields)


class _TellingRuntime:
    """The agent's runtime as its `/run` uses it, telling `say` about each part of a task it
    is given (`given`, when the part's assignment is found) and how it ended (`answered`, or
    `failed` with the reason: no answer, or one that is not the capability's output). The
    service's own calls (its exams) are answered as sent, untold."""

    def __init__(self, runtime: AgentRuntime, say: Say) -> None:
        self.runtime = runtime
        self.say = say
        self._current = threading.local()
        """The assignment this thread's `/run` found (`given`), which its `answer` answers."""

    def given(self, work: Assignment) -> None:
        self._current.work = work
        self.say("given", **_work_fields(work))

    def answer(self, item: JSONObject) -> JSON:
        work: Assignment | None = getattr(self._current, "work", None)
        self._current.work = None
        if work is None:
            return self.runtime.answer(item)
        try:
            answer = self.runtime.answer(item)
        except AgentRuntimeError as exc:
            self.say("failed", **_work_fields(work), reason=exc.reason[:300])
            raise
        try:
            validate_output(work.capability, answer)
        except ExamError as exc:  # the server refuses it the same way
            self.say("failed", **_work_fields(work), reason=f"not its output: {exc}"[:300])
            return answer
        self.say("answered", **_work_fields(work))
        return answer


class _OwnParts:
    """The runtime the agent leads `task_id` with: the parts it gives itself are told as
    given and ended (`_TellingRuntime`) as a member's are."""

    def __init__(self, telling: _TellingRuntime, task_id: str) -> None:
        self.telling = telling
        self.task_id = task_id

    def answer(self, item: JSONObject) -> JSON:
        part, capability = str(item.get("item_id")), str(item.get("capability"))
        self.telling.given(Assignment(self.task_id, "", "", part, capability))
        return self.telling.answer(item)


def _work_fields(work: Assignment) -> dict[str, str]:
    return {
        "task_id": work.task_id,
        "conv_id": work.conv_id,
        "part": work.part,
        "capability": work.capability,
    }


@dataclass
class _Bids:
    """Sealed bids waiting to be revealed, by task, and tasks done with."""

    pending: dict[str, tuple[Wei, bytes]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    leading: set[str] = field(default_factory=set)


class KitAgent:
    """One self-custody agent (see the module). `say(event, **fields)` is told each step."""

    def __init__(
        self,
        client: AccordClient,
        signer: Ed25519Signer,
        payout: LocalAccount,
        runtime: AgentRuntime,
        *,
        name: str,
        capabilities: Sequence[str],
        strategy: Strategy | None = None,
        policy: Policy | None = None,
        run_settings: RunSettings | None = None,
        allow_private: bool = False,
        exam_items: int | None = None,
        reexam: bool = False,
        wallet: Wallet | None = None,
        say: Say = _quiet,
    ) -> None:
        self.client = client
        self.signer = signer
        self.payout = payout
        self.runtime = runtime
        self.name = name
        self.capabilities = tuple(capabilities)
        self.strategy = strategy
        self.policy = policy
        self.run_settings = run_settings
        self.allow_private = allow_private
        self.exam_items = exam_items
        self.reexam = reexam
        """Sit every exam again, though the agent holds a valid credential for it."""
        self.wallet = wallet
        """With a wallet (its payout account on the service's chain), pay is withdrawn as soon
        as the escrow credits it."""
        self.say = say
        self._telling = _TellingRuntime(runtime, say)
        self._credit_checked = 0.0
        self.server: KitServer | None = None
        self.wake = threading.Event()
        self._bids = _Bids()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._leaders: set[str] = set()
        self._leaders_at = -LEADERS_TTL
        self._refreshing = threading.Lock()
        self._answered: set[tuple[str, str]] = set()  # (conv_id, sub_id) logged as answered
        self.skills: dict[str, SkillManifest] = {}
        """The declared (or library) skills among its capabilities, by id, as fetched and
        checked on joining (`accord.kit.skills.fetch_skill`)."""

    @property
    def did(self) -> str:
        return self.signer.did

    @property
    def operator(self) -> str | None:
        """The service operator's DID (known once the agent has started)."""
        return None if self.server is None else self.server.operator

    # -- its own service -------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0, public_url: str | None = None) -> str:
        """Serve /run, /sign and /accord/notify in a thread; returns the base URL others reach
        it at (`public_url`, else http://HOST:PORT), which its callers sign for. Raises
        ApiError when the service cannot say who its operator is, OSError when the address
        cannot be bound."""
        info = self.client.get(f"/agents/{_segment(self.did)}/next-seq")
        self.server = KitServer(
            (host, port),
            self.signer,
            self._telling,
            self._notice,
            operator=str(info["operator"]),
            may_call=self._leads_a_task,
            public_url=public_url,
            work_for=self._work_for,
            log_answered=self._log_answered,
        )
        thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._threads.append(thread)
        return public_url or self.server.url

    def _work_for(self, caller: str, item: JSONObject) -> tuple[Assignment, JSONObject]:
        """The assignment a `/run` of `item` from `caller` answers, and the item to answer: a
        part a logged conversation of a running task `caller` leads (any running task, for
        the service's operator, which runs hosted teams) assigned to this agent and has not
        seen reported, for its input as the requester posted it. The operator's other calls
        (its exams) are answered as sent, under no assignment. Raises Refused (403) when
        there is none, (502) when the service cannot say."""
        part, capability = str(item.get("item_id")), str(item.get("capability"))
        try:
            running = self.client.tasks(state="running")
            for task in running:
                if caller not in (task.get("winner"), self.operator):
                    continue
                task_id = str(task["task_id"])
                for listed in self.client.get("/conversations", {"task": task_id}):
                    if self.did not in listed.get("members", []) or listed.get("state") == "closed":
                        continue
                    shown = self.client.get(f"/conversations/{_segment(str(listed['conv_id']))}")
                    for work in assignments_to(self.did, shown):
                        if (work.part, work.capability) == (part, capability):
                            given = self._part_item(task_id, part, item)
                            self._telling.given(work)
                            return work, given
        except ApiError as exc:
            raise Refused(502, f"the service cannot say what this agent was given: {exc}") from exc
        if caller == self.operator:
            # The service's own call (an exam it gives): answered as sent, and no report of
            # a team is ever signed for it.
            return Assignment("", "", "", part, capability), item
        raise Refused(
            403,
            f"{caller} has assigned this agent no part {part!r} ({capability}) of a running "
            "task it leads",
        )

    def _log_answered(self, work: Assignment) -> None:
        """Log at the service, signed here and sent by this agent itself, that it answered
        `work`'s assignment (`work.answered`, once per assignment): from then on its leader
        cannot declare it absent for it. A seq another writer took first is taken again.
        Raises Refused (503) when the service does not log it."""
        key = (work.conv_id, work.sub_id)
        with self._lock:
            if key in self._answered:
                return
        body = {"conversation": work.conv_id, "sub_id": work.sub_id}
        path = f"/tasks/{_segment(work.task_id)}/work"
        for attempt in range(SEQ_RETRIES):
            try:
                entry = self.client.entry(WORK_ANSWERED, work.conv_id, body)
                self.client.post(path, {"entry": entry})
                break
            except ApiError as exc:
                if exc.status == 409 and "seq" in str(exc) and attempt < SEQ_RETRIES - 1:
                    continue
                raise Refused(
                    503, f"the service did not log that this agent answered {work.sub_id}: {exc}"
                ) from exc
        with self._lock:
            self._answered.add(key)

    def _part_item(self, task_id: str, part: str, sent: JSONObject) -> JSONObject:
        """The item for `part` of `task_id`, its files' text read from the service, and the
        outputs of the parts its input is made of taken from the item `sent` only where each
        is the one its producer reported (`opened_inputs`)."""
        spec = task_from_json(self.client.task(task_id)).spec
        files = {
            sha: self.client.request_text(f"/tasks/{_segment(task_id)}/files/{sha}")
            for sha in spec.files
        }
        try:
            named = [r for p in spec.parts if p.part_id == part for r in part_refs(p.input)]
            outputs = {}
            if named:
                shown = [
                    self.client.get(f"/conversations/{_segment(str(listed['conv_id']))}")
                    for listed in self.client.get("/conversations", {"task": task_id})
                ]
                outputs = opened_inputs(named, sent.get(INPUTS_KEY), reported_outputs(shown))
            return part_item(spec, part, files, outputs)
        except (AccordError, KeyError, StopIteration) as exc:
            raise Refused(409, f"part {part} of {task_id} cannot be given: {exc}") from exc

    def _leads_a_task(self, did: str) -> bool:
        """Whether `did` holds the contract of a running task (so may give this agent work
        and ask it to sign its reports). Asked of the service: a known leader is remembered
        for `LEADERS_TTL` seconds; a caller it does not know makes it ask again, but never
        more often than every `LEADERS_REFRESH` seconds (a caller waits for the next look),
        however many strangers call."""
        with self._lock:
            if did in self._leaders and time.monotonic() - self._leaders_at < LEADERS_TTL:
                return True
        asked_at = time.monotonic()
        with self._refreshing:
            with self._lock:
                if self._leaders_at >= asked_at:  # another caller looked while this one waited
                    return did in self._leaders
                wait = self._leaders_at + LEADERS_REFRESH - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                running = self.client.tasks(state="running")
            except ApiError:
                return False
            with self._lock:
                self._leaders = {str(t["winner"]) for t in running if t.get("winner")}
                self._leaders_at = time.monotonic()
                return did in self._leaders

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.client.close()

    def _notice(self, notice: dict[str, Any]) -> None:
        self.say(
            "notice",
            kind=str(notice.get("event")),
            task_id=str(notice.get("task_id")),
            index=notice.get("index") if isinstance(notice.get("index"), int) else None,
        )
        self.wake.set()

    # -- joining ---------------------------------------------------------------------------

    def join(self, endpoint: str) -> None:
        """Register at `endpoint` (the base URL others reach this agent at), sit an exam in
        each capability it holds no valid credential for (in each, with `reexam`), bind the
        payout address. A capability it holds a credential for is told as a `credential` line
        with `"examined": false`. Before any exam is started the handler answers a practice
        item of each capability it will be examined in (`accord.kit.practice.preflight`).
        A declared skill (named by its id, or a shipped one by its name) is fetched and held
        to its id first, and examined from a seed both sides fix (`sit_skill_exam`).

        Raises ApiError when the service refuses, and before anything is registered when it
        has no exam for one of the capabilities; SkillError, before anything is registered,
        when a skill the service sends is not the one its id names; PreflightError, before
        anything is registered or any attempt spent, when the handler cannot answer a
        practice item."""
        self.check_capabilities()
        held = {} if self.reexam else self.held_credentials()
        for capability in self.capabilities:
            if capability not in held:
                preflight(capability, self.runtime)
        self.register(endpoint)
        for capability in self.capabilities:
            credential = held.get(capability)
            if credential is None:
                self.sit_exam(capability)
                continue
            self.say(
                "credential",
                capability=capability,
                **self._skill_name(capability),
                examined=False,
                passed=True,
                credential_id=credential["id"],
                score=credential.get("score"),
                valid_until=credential.get("valid_until"),
            )
        self.bind_payout()

    def held_credentials(self) -> dict[str, dict[str, Any]]:
        """The agent's credential for each of its capabilities that the service says is
        valid now and stays valid `RENEW_BEFORE` more (the one that lasts longest), as `GET
        /agents/{did}` lists it; none for an agent the service does not know yet. Raises
        ApiError when the service cannot say."""
        try:
            shown = self.client.get(f"/agents/{_segment(self.did)}")
        except ApiError as exc:
            if exc.status == 404:
                return {}
            raise
        renew_at = self._now() + RENEW_BEFORE
        held: dict[str, dict[str, Any]] = {}
        lasts: dict[str, datetime] = {}
        for row in shown.get("credentials", []):
            capability = row.get("capability")
            if capability not in self.capabilities or row.get("valid") is not True:
                continue
            until = _moment(row.get("valid_until"))
            if until is None or until <= renew_at:
                continue
            if capability not in lasts or until > lasts[capability]:
                held[capability], lasts[capability] = dict(row), until
        return held

    def check_capabilities(self) -> None:
        """Each of the agent's capabilities is one the service has an exam for: a built-in
        one (`GET /capabilities`, by name or skill id), or a skill (`GET /skills/{id}`: a
        declared one by its id, a shipped one by its name too), fetched and held to its id
        here (`fetch_skill`). From then on `capabilities` names each as parts and credentials
        do: a built-in by its name, any other skill by its id.

        Raises ApiError (422) naming those the service has no exam for, and its built-in
        ones; SkillError when it sends a manifest that is not the one its id names."""
        builtin: dict[str, str] = {}
        for row in self.client.get("/capabilities"):
            builtin[str(row["name"])] = str(row["name"])
            if row.get("skill_id"):
                builtin[str(row["skill_id"])] = str(row["name"])
        named: list[str] = []
        unknown: list[str] = []
        for ref in self.capabilities:
            if ref in builtin:
                named.append(builtin[ref])
                continue
            try:
                manifest = fetch_skill(self.client, ref)
            except UnknownSkill:
                unknown.append(ref)
                continue
            if manifest.builtin is not None:
                named.append(manifest.builtin)
                continue
            self.skills[manifest.skill_id] = manifest
            named.append(manifest.skill_id)
        if unknown:
            offered = sorted(set(builtin.values()))
            raise ApiError(
                f"the service has no exam for {', '.join(map(repr, unknown))}: its capabilities "
                f"are {', '.join(offered)}, and skills by id (GET /skills); nothing was "
                "registered",
                422,
            )
        self.capabilities = tuple(dict.fromkeys(named))

    def _skill_name(self, capability: str) -> dict[str, str]:
        """`{"skill": name}` for a skill named by its id, for the agent's lines."""
        found = self.skills.get(capability)
        return {} if found is None else {"skill": found.name}

    def register(self, endpoint: str) -> dict[str, Any]:
        """DID-auth: a presentation over the service's challenge, and the agent's own
        `agent.registered` entry declaring custody `self`. Raises ApiError."""
        challenge = self.client.post("/registration/challenge")
        presentation = create_presentation(
            self.signer, [], challenge["challenge"], challenge["domain"], self._now()
        )
        entry = self.client.entry(
            "agent.registered",
            self.did,
            {
                "name": self.name,
                "domain": challenge["domain"],
                "challenge": challenge["challenge"],
                "proof": presentation["proof"],
                "custody": "self",
            },
        )
        record = cast(
            dict[str, Any],
            self.client.post(
                "/remote/registration",
                {
                    "name": self.name,
                    "endpoint": endpoint.rstrip("/") + "/run",
                    "challenge": challenge["challenge"],
                    "presentation": presentation,
                    "entry": entry,
                },
            ),
        )
        self.say("registered", did=self.did, endpoint=record["endpoint"], index=record["index"])
        return record

    def sit_exam(self, capability: str) -> dict[str, Any]:
        """Sit an exam with the agent's own handler, signing each answer (a declared skill's:
        `sit_skill_exam`). Raises ApiError, and SkillError for a declared skill's items that
        are not the skill's."""
        manifest = self.skills.get(capability)
        if manifest is not None:
            return self.sit_skill_exam(manifest)
        exam = self.client.post("/exams", {"capability": capability, "items": self.exam_items})
        exam_id = exam["exam_id"]
        for item in exam["items"]:
            try:
                answer = self.runtime.answer(item)
            except AgentRuntimeError as exc:
                self.say(
                    "unanswered", exam_id=exam_id, item_id=item.get("item_id"), reason=exc.reason
                )
                continue
            body = {"exam_id": exam_id, "item_id": item["item_id"], "answer": answer}
            entry = self.client.entry("exam.answered", exam_id, body)
            self.client.post(f"/exams/{_segment(exam_id)}/answers", {"entry": entry})
        graded = cast(dict[str, Any], self.client.post(f"/exams/{_segment(exam_id)}/grade"))
        self.say(
            "credential",
            capability=capability,
            examined=True,
            exam_id=exam_id,
            passed=graded["passed"],
            credential_id=graded["credential_id"],
            score={"earned": graded["earned"], "possible": graded["possible"]},
            valid_until=graded.get("valid_until"),
            wrong=graded.get("wrong", []),
        )
        return graded

    def sit_skill_exam(self, manifest: SkillManifest) -> dict[str, Any]:
        """Sit the exam of a declared skill: the service commits to its nonce
        (`POST /skills/{id}/attempts`), the agent sends its own, from its own randomness, in
        its own signed `skill.attempt.nonce` and gets the items generated from both (held to
        the skill here: `check_items`), its handler answers each (one it cannot answer is
        answered null), and its own signed `skill.attempt.answered` is graded. Told as a
        `credential` line with the score, each wrong item's reason, and what its own re-grade
        from the revealed seed found (`regrade`: "agrees", or why not; `regraded`).

        Raises ApiError when the service refuses a step, SkillError for items that are not the
        skill's."""
        skill_id = manifest.skill_id
        started = self.client.post(f"/skills/{skill_id}/attempts")
        attempt_id = str(started["attempt_id"])
        path = f"/skills/attempts/{_segment(attempt_id)}"
        own_nonce = secrets.token_bytes(NONCE_BYTES)
        nonce = {"attempt_id": attempt_id, "nonce": own_nonce.hex()}
        entry = self.client.entry(ATTEMPT_NONCE, attempt_id, nonce)
        items = self.client.post(f"{path}/nonce", {"entry": entry})["items"]
        check_items(manifest, items)
        answers: list[JSON] = []
        for item in items:
            try:
                answers.append(self.runtime.answer(item))
            except AgentRuntimeError as exc:
                self.say(
                    "unanswered", exam_id=attempt_id, item_id=item.get("item_id"), reason=exc.reason
                )
                answers.append(None)
        answered = {"attempt_id": attempt_id, "answers": answers}
        entry = self.client.entry(ATTEMPT_ANSWERED, attempt_id, answered)
        graded = cast(dict[str, Any], self.client.post(f"{path}/answers", {"entry": entry}))
        document = graded.get("credential")
        self.say(
            "credential",
            capability=skill_id,
            skill=manifest.name,
            examined=True,
            exam_id=attempt_id,
            passed=graded["passed"],
            credential_id=graded["credential_id"],
            score={"earned": graded["earned"], "possible": graded["possible"]},
            valid_until=document.get("validUntil") if isinstance(document, dict) else None,
            wrong=[
                {"item_id": grade["item_id"], "reason": grade["reason"]}
                for grade in graded.get("grades", [])
                if grade["earned"] < grade["possible"]
            ],
            regrade=regraded(manifest, started, own_nonce, answers, graded),
        )
        return graded

    def bind_payout(self) -> str:
        """Bind the payout account to the DID (both keys sign). Raises ApiError."""
        info = self.client.get(f"/agents/{_segment(self.did)}/next-seq")
        binding = bind_payout_address(
            self.signer,
            self.payout,
            int(info["chain_id"]),
            secrets.token_hex(16),
            parse_time(str(info["server_time"])),
        )
        entry = self.client.entry("payout.bound", self.did, {"binding": binding})
        bound = self.client.post(f"/agents/{_segment(self.did)}/payout", {"entry": entry})
        self.say("payout", address=bound["address"])
        return str(bound["address"])

    def _now(self) -> datetime:
        info = self.client.get(f"/agents/{_segment(self.did)}/next-seq")
        return parse_time(str(info["server_time"])) if "server_time" in info else datetime.now(UTC)

    # -- the market ------------------------------------------------------------------------

    def run_until(self, stopping: threading.Event, poll_seconds: float = 0.5) -> None:
        """Bid, reveal and lead until `stopping` is set; a notice wakes it early. A round
        the service refuses or cannot answer is logged and tried again."""
        while not stopping.is_set():
            try:
                self.step()
            except (AccordError, OSError) as exc:
                self.say("retry", reason=str(exc)[:300])
            self.wake.wait(poll_seconds)
            self.wake.clear()
        for thread in self._threads:
            if thread.name.startswith("lead-"):
                thread.join(timeout=60)

    def step(self) -> None:
        """One round: commit on new calls in our capabilities, reveal once bidding closed,
        lead each task won. Raises ApiError when the service cannot be reached."""
        if self.strategy is not None:
            self._commit_new()
        self._reveal_and_lead()
        if self.wallet is not None and time.monotonic() - self._credit_checked >= CREDIT_EVERY:
            self._credit_checked = time.monotonic()
            self.withdraw()

    def withdraw(self) -> Wei:
        """Pull whatever the escrow credits the payout account (its own key signs, and pays
        the gas); returns the amount (0: nothing to pull). Raises WalletError, EscrowError,
        ChainError."""
        if self.wallet is None:
            raise WalletError("withdrawing needs the agent's wallet (its payout account)")
        credit = self.wallet.credit()
        if credit == 0:
            return credit
        sent = self.wallet.withdraw()
        self.say("withdrew", amount=str(credit), address=self.wallet.address, tx_hash=sent.tx_hash)
        return credit

    def _commit_new(self) -> None:
        assert self.strategy is not None
        seen: dict[str, Mapping[str, Any]] = {}
        for capability in self.capabilities:
            for row in self.client.tasks(state="bidding", capability=capability):
                seen[str(row["task_id"])] = row
        for task_id, task in seen.items():
            with self._lock:
                if task_id in self._bids.done or task_id in self._bids.pending:
                    continue
            if not set(task["spec"]["capabilities"]) <= set(self.capabilities):
                continue
            if task["requester"] == self.did:
                continue
            price = self.strategy(task)
            if price is None:
                continue
            salt = secrets.token_bytes(32)
            commitment = commit_bid(self.signer, task_id, price, salt).to_json()
            try:
                self.client.commit(task_id, commitment)
            except ApiError as exc:
                self.say("refused", task_id=task_id, status=exc.status, detail=str(exc)[:300])
                with self._lock:
                    self._bids.done.add(task_id)
                continue
            with self._lock:
                self._bids.pending[task_id] = (price, salt)
            self.say("committed", task_id=task_id, price=str(price))

    def _reveal_and_lead(self) -> None:
        with self._lock:
            pending = dict(self._bids.pending)
        for task_id, (price, salt) in pending.items():
            state = self.client.task(task_id).get("state")
            if state == "bidding":
                continue
            if state == "revealing":
                shown = reveal_bid(self.signer, task_id, price, salt).to_json()
                try:
                    self.client.post(f"/tasks/{_segment(task_id)}/reveals", shown)
                except ApiError as exc:
                    if exc.status == 409 and "early" in str(exc):
                        continue
                    self.say("refused", task_id=task_id, status=exc.status, detail=str(exc)[:300])
                else:
                    self.say("revealed", task_id=task_id, price=str(price))
            with self._lock:
                del self._bids.pending[task_id]
                self._bids.done.add(task_id)
        for task in self.client.tasks(state="awarded"):
            if task.get("winner") == self.did:
                self._lead_in_thread(str(task["task_id"]))

    def _lead_in_thread(self, task_id: str) -> None:
        with self._lock:
            if task_id in self._bids.leading:
                return
            self._bids.leading.add(task_id)
        thread = threading.Thread(target=self._lead, args=(task_id,), name=f"lead-{task_id}")
        thread.start()
        self._threads.append(thread)

    def _lead(self, task_id: str) -> None:
        self.say("leading", task_id=task_id)
        known: dict[str, CheckResult] = {}  # the team's machine verdicts, before it delivers
        try:
            conversation = lead(
                self.client,
                self.signer,
                _OwnParts(self._telling, task_id),
                task_id,
                policy=self.policy,
                settings=self.run_settings,
                allow_private=self.allow_private,
                verdicts=known.update,
            )
        except (AccordError, CoordinatorError, OSError) as exc:
            self.say("lead-failed", task_id=task_id, reason=str(exc)[:500])
            return
        shown = {
            check_id: "inconclusive" if r.inconclusive else ("pass" if r.passed else "fail")
            for check_id, r in known.items()
        }
        self.say("delivered", task_id=task_id, conv_id=conversation.conv_id, verdicts=shown)
