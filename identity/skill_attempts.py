"""Attempts at a declared skill's exam, from a seed neither side picks, graded in the box.

    1. start    the operator logs `skill.attempt.committed` {attempt_id, skill_id, candidate,
                attempt, items, commitment, deadline}: H(service nonce) and the time the
                answers must be signed by (a minute an item), before it sees anything of
                the candidate's. The service nonce is SHA-256 of the operator's Ed25519
                signature over the attempt id (deterministic, so nothing is stored, and
                nobody without the operator's key can compute it before the reveal).
    2. begin    the candidate logs its own `skill.attempt.nonce` {attempt_id, nonce}; the seed
                is `attempt_seed(service nonce, candidate nonce, skill id, attempt)` and the
                items are generated in the box and handed to the candidate. The items are never
                logged (the log holds what regenerates them).
    3. answer   the candidate logs its own `skill.attempt.answered` {attempt_id, answers}; the
                service grades in the box and logs `skill.attempt.graded` {attempt_id,
                skill_id, service_nonce (the reveal), grades, earned, possible, passed}; on a
                pass the operator issues a credential whose capability is the skill id.

`replay_attempts` is what the audit does with the log alone: for every graded attempt it checks
the reveal against the commitment, recomputes the seed, regenerates the items and re-grades the
logged answers in the box, and holds the logged grades to the result.

Attempts of the built-in capabilities go through `POST /exams` (`accord.identity.exams`), as
before; an attempt here is for declared and library skills.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from typing import Any

from accord.identity.challenges.base import JSON, ExamItem, Grade, JSONObject
from accord.identity.challenges.sandbox import SandboxMode
from accord.identity.errors import ExamError, RateLimitedError, SkillError
from accord.identity.exams import (
    DEFAULT_ATTEMPT_WINDOW,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_SECONDS_PER_ITEM,
    ExamResult,
    check_agent_entry,
)
from accord.identity.issuance import CredentialIssuer
from accord.identity.item_banks import available, draw, exposures, reveal
from accord.identity.item_banks import check_reveal as check_bank_reveal
from accord.identity.skill_exams import (
    attempt_seed,
    draw_bank_exam,
    exam_passes,
    generate_exam,
    grade_exam,
    nonce_commitment,
    regrade,
)
from accord.identity.skill_exams import (
    check_reveal as check_service_reveal,
)
from accord.identity.skill_judge import RecordingJudge, ReplayedJudge
from accord.identity.skill_registry import DeclaredSkill, SkillRegistry, needs_judge
from accord.ledger.events import Entry, Event, format_time, parse_time
from accord.ledger.service import Ledger
from accord.ledger.store import LogStore

ATTEMPT_COMMITTED = "skill.attempt.committed"
ATTEMPT_NONCE = "skill.attempt.nonce"
ATTEMPT_ANSWERED = "skill.attempt.answered"
ATTEMPT_GRADED = "skill.attempt.graded"
ATTEMPT_EXPIRED = "skill.attempt.expired"
ATTEMPT_KINDS = frozenset(
    {ATTEMPT_COMMITTED, ATTEMPT_NONCE, ATTEMPT_ANSWERED, ATTEMPT_GRADED, ATTEMPT_EXPIRED}
)
EXPOSING_KINDS = (ATTEMPT_GRADED, ATTEMPT_EXPIRED)
"""The entries whose `bank` reveal counts as exposures of a bank's items."""
SERVICE_NONCE_DOMAIN = b"accord/skill/service-nonce/v1"
ATTEMPT_ID_DOMAIN = b"accord/skill/attempt-id/v1"
ATTEMPT_PREFIX = "attempt-"
MIN_NONCE_HEX = 32
MAX_NONCE_HEX = 128
MAX_ATTEMPTS_PROBED = 10_000


def attempt_id_for(skill_id: str, candidate: str, attempt: int) -> str:
    """The id of a candidate's `attempt`-th attempt at a skill (32 hex digits)."""
    data = b"\x00".join([ATTEMPT_ID_DOMAIN, skill_id.encode(), candidate.encode(), b"%d" % attempt])
    return ATTEMPT_PREFIX + hashlib.sha256(data).hexdigest()[:32]


def _nonce(value: object) -> bytes:
    if (
        not isinstance(value, str)
        or not MIN_NONCE_HEX <= len(value) <= MAX_NONCE_HEX
        or len(value) % 2
    ):
        raise ExamError(f"a nonce is {MIN_NONCE_HEX} to {MAX_NONCE_HEX} hex digits")
    try:
        return bytes.fromhex(value)
    except ValueError as exc:
        raise ExamError("a nonce is hex digits") from exc


def _grades_json(grades: Iterable[Grade]) -> list[dict[str, Any]]:
    return [
        {"item_id": g.item_id, "earned": g.earned, "possible": g.possible, "reason": g.reason}
        for g in grades
    ]


@dataclass(frozen=True)
class AttemptOutcome:
    """A graded attempt and the credential when it passed. `service_nonce` is the reveal
    (hex): with its commitment and the candidate's nonce, the candidate re-derives the seed
    and re-grades its own answers (`accord.identity.skill_exams.regrade`)."""

    attempt_id: str
    skill_id: str
    earned: int
    possible: int
    passed: bool
    graded_index: int
    grades: tuple[Grade, ...]
    credential_id: str | None
    service_nonce: str

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "skill_id": self.skill_id,
            "earned": self.earned,
            "possible": self.possible,
            "passed": self.passed,
            "graded_index": self.graded_index,
            "grades": _grades_json(self.grades),
            "credential_id": self.credential_id,
            "service_nonce": self.service_nonce,
        }


class _Exposures:
    """The bank reveals of every graded or expired attempt, by skill id, in log order, folded
    from the log as it grows: each read folds only the `EXPOSING_KINDS` entries appended since
    the one before (the first reads them all), under a lock. A bank attempt's open items so
    cost its skill's reveals, not every attempt of every skill in the log."""

    def __init__(self) -> None:
        self._seen = -1
        self._by_skill: dict[str, list[tuple[int, list[Any]]]] = {}
        self._lock = threading.Lock()

    def before(self, store: LogStore, skill_id: str, index: int) -> list[object]:
        """The `bank` reveals of `skill_id`'s graded and expired attempts logged before entry
        `index`. Raises StoreError when the log cannot be read, MalformedError when a stored
        entry does not parse."""
        with self._lock:
            for stored in store.find_each(kinds=EXPOSING_KINDS, after=self._seen):
                body = Entry.from_bytes(stored.data).event.body
                skill, bank = body.get("skill_id"), body.get("bank")
                if isinstance(skill, str) and isinstance(bank, list):
                    self._by_skill.setdefault(skill, []).append((stored.index, bank))
                self._seen = stored.index
            return [bank for at, bank in self._by_skill.get(skill_id, []) if at < index]


class SkillAttempts:
    """Exams of declared skills on one ledger; credentials from `issuer`."""

    def __init__(
        self,
        ledger: Ledger,
        skills: SkillRegistry,
        issuer: CredentialIssuer,
        *,
        mode: SandboxMode | None = None,
    ) -> None:
        self.ledger = ledger
        self.skills = skills
        self.issuer = issuer
        self.mode = mode
        self._exposures = _Exposures()

    def _service_nonce(self, attempt_id: str) -> bytes:
        signature = self.ledger.operator.sign(SERVICE_NONCE_DOMAIN + attempt_id.encode())
        return hashlib.sha256(signature).digest()

    def _event(self, kind: str, attempt_id: str) -> tuple[int, Event] | None:
        found = self.ledger.store.find(kind=kind, subject=attempt_id, limit=1)
        if not found:
            return None
        return found[0].index, Entry.from_bytes(found[0].data).event

    def _committed(self, attempt_id: str) -> tuple[Event, DeclaredSkill]:
        found = self._event(ATTEMPT_COMMITTED, attempt_id)
        if found is None:
            raise ExamError(f"no attempt {attempt_id!r}: start one at POST /skills/{{id}}/attempts")
        event = found[1]
        return event, self.skills.get(str(event.body["skill_id"]))

    def _open_indices(self, attempt_id: str, skill: DeclaredSkill) -> list[int]:
        """The bank indices not retired when the attempt was committed: drawn by fewer than
        `retire_after` of the skill's graded attempts logged before its commitment."""
        found = self._event(ATTEMPT_COMMITTED, attempt_id)
        assert found is not None
        reveals = self._exposures.before(self.ledger.store, skill.manifest.skill_id, found[0])
        exam = skill.manifest.exam
        return available(int(exam["size"]), exposures(reveals), int(exam["retire_after"]))

    def _expire_abandoned(self, skill: DeclaredSkill) -> None:
        """Log `skill.attempt.expired` for each attempt at bank skill `skill` whose items were
        handed out (its nonce given) and whose deadline passed unanswered: the service's nonce
        and the drawn items with their proofs, so the items count as exposed (a candidate who
        looks and never answers cannot read the bank for free)."""
        if skill.manifest.exam["kind"] != "bank":
            return
        now = self.ledger.clock()
        stale: list[Event] = []
        for stored in self.ledger.store.find_each(kind=ATTEMPT_COMMITTED):
            event = Entry.from_bytes(stored.data).event
            if event.body.get("skill_id") == skill.manifest.skill_id and now > parse_time(
                str(event.body["deadline"])
            ):
                stale.append(event)
        for committed in stale:
            attempt_id = committed.subject
            given = self._event(ATTEMPT_NONCE, attempt_id)
            if given is None or any(
                self._event(kind, attempt_id) for kind in (ATTEMPT_ANSWERED, *EXPOSING_KINDS)
            ):
                continue
            revealed, _ = self._drawn(committed, skill, _nonce(given[1].body["nonce"]))
            self.ledger.append(
                self.ledger.operator,
                ATTEMPT_EXPIRED,
                subject=attempt_id,
                body={
                    "attempt_id": attempt_id,
                    "skill_id": skill.manifest.skill_id,
                    "service_nonce": self._service_nonce(attempt_id).hex(),
                    "bank": revealed,
                },
                once_key=attempt_id,
            )

    def start(self, candidate: str, skill_ref: str) -> dict[str, Any]:
        """Commit to the service nonce of the candidate's next attempt at a skill and log it.

        Raises UnknownSkill, SkillError for a built-in capability (examined at `POST /exams`)
        or a candidate that has not registered, RateLimitedError after 3 attempts at the skill
        within an hour.
        """
        skill = self.skills.get(skill_ref)
        if skill.manifest.builtin is not None:
            raise SkillError(
                f"{skill.manifest.name} is a built-in capability: sit its exam at POST /exams"
            )
        if not self.skills.is_registered(candidate):
            raise SkillError(f"{candidate} has not registered: register before an exam")
        skill_id = skill.manifest.skill_id
        now = self.ledger.clock()
        attempt, recent = 1, []
        while found := self._event(ATTEMPT_COMMITTED, attempt_id_for(skill_id, candidate, attempt)):
            if now - parse_time(found[1].at) < DEFAULT_ATTEMPT_WINDOW:
                recent.append(parse_time(found[1].at))
            attempt += 1
            if attempt > MAX_ATTEMPTS_PROBED:
                raise SkillError("too many attempts at this skill")
        if len(recent) >= DEFAULT_MAX_ATTEMPTS:
            wait = (min(recent) + DEFAULT_ATTEMPT_WINDOW - now).total_seconds()
            raise RateLimitedError(
                f"{DEFAULT_MAX_ATTEMPTS} attempts at this skill within an hour already: try "
                f"again in {int(wait) + 1} s",
                wait,
            )
        self._expire_abandoned(skill)  # before this commitment: they count for its draw
        attempt_id = attempt_id_for(skill_id, candidate, attempt)
        body = {
            "attempt_id": attempt_id,
            "skill_id": skill_id,
            "candidate": candidate,
            "attempt": attempt,
            "items": skill.manifest.item_count,
            "commitment": nonce_commitment(self._service_nonce(attempt_id)),
            "deadline": format_time(
                self.ledger.clock()
                + timedelta(seconds=DEFAULT_SECONDS_PER_ITEM * skill.manifest.item_count)
            ),
        }
        index, _ = self.ledger.append(
            self.ledger.operator,
            ATTEMPT_COMMITTED,
            subject=attempt_id,
            body=body,
            once_key=attempt_id,
        )
        return {**body, "index": index}

    def _items(
        self, committed: Event, skill: DeclaredSkill, candidate_nonce: bytes
    ) -> list[ExamItem]:
        return self._drawn(committed, skill, candidate_nonce)[1]

    def _drawn(
        self, committed: Event, skill: DeclaredSkill, candidate_nonce: bytes
    ) -> tuple[list[JSONObject] | None, list[ExamItem]]:
        """(a bank exam's reveal of its drawn items, or None; the items). Raises SkillError
        when this service holds no bank for a bank exam, ExamError when the bank is spent."""
        attempt_id = str(committed.body["attempt_id"])
        seed = attempt_seed(
            self._service_nonce(attempt_id),
            candidate_nonce,
            skill.manifest.skill_id,
            int(committed.body["attempt"]),
        )
        if skill.manifest.exam["kind"] != "bank":
            count = int(committed.body["items"])
            return None, generate_exam(skill.manifest, seed, count, mode=self.mode)
        bank = self.skills.banks.get(skill.manifest.skill_id)
        if bank is None:
            raise SkillError(f"this service holds no bank for skill {skill.manifest.skill_id}")
        open_indices = self._open_indices(attempt_id, skill)
        drawn, items = draw_bank_exam(skill.manifest, seed, bank, open_indices)
        return reveal(bank, drawn), items

    def begin(
        self, entry: Entry, *, lock: AbstractContextManager[object] | None = None
    ) -> list[dict[str, JSON]]:
        """Log the candidate's own `skill.attempt.nonce` entry and return the items it sees.

        Raises ExamError when the entry is not the candidate's nonce for a committed attempt
        of its own (or its nonce was given already), and what `generate_exam` raises.
        """
        attempt_id = entry.event.subject
        committed, skill = self._committed(attempt_id)
        if entry.event.actor != committed.body["candidate"]:
            raise ExamError(f"attempt {attempt_id} is {committed.body['candidate']}'s")
        nonce = _nonce(entry.event.body.get("nonce"))
        check_agent_entry(
            entry,
            actor=entry.event.actor,
            kind=ATTEMPT_NONCE,
            subject=attempt_id,
            body={"attempt_id": attempt_id, "nonce": nonce.hex()},
            now=self.ledger.clock(),
        )
        items = self._items(committed, skill, nonce)  # in the box, outside `lock`
        with lock or nullcontext():
            self.ledger.append_entries([entry], once_keys=[attempt_id])
        return [item.for_agent() for item in items]

    def answer(
        self, entry: Entry, *, lock: AbstractContextManager[object] | None = None
    ) -> AttemptOutcome:
        """Log the candidate's own `skill.attempt.answered` entry, grade it in the box, log
        the grades with the reveal and, on a pass, issue the credential.

        Raises ExamError when the entry is not the candidate's answers (one per item) to an
        attempt whose nonce it gave, signed by the attempt's deadline; SkillError when the
        attempt was answered already; and what the grading and the issuer raise.
        """
        attempt_id = entry.event.subject
        committed, skill = self._committed(attempt_id)
        if self._event(ATTEMPT_ANSWERED, attempt_id) is not None:
            raise SkillError(f"attempt {attempt_id} is answered already: start another")
        if self._event(ATTEMPT_EXPIRED, attempt_id) is not None:
            raise ExamError(f"attempt {attempt_id} expired: start another")
        given = self._event(ATTEMPT_NONCE, attempt_id)
        if given is None:
            raise ExamError(f"attempt {attempt_id} has no nonce of the candidate's yet")
        if parse_time(entry.event.at) > parse_time(str(committed.body["deadline"])):
            raise ExamError(
                f"attempt {attempt_id} closed at {committed.body['deadline']}: start another"
            )
        answers = entry.event.body.get("answers")
        if not isinstance(answers, list) or len(answers) != int(committed.body["items"]):
            raise ExamError(f"send one answer per item ({committed.body['items']})")
        check_agent_entry(
            entry,
            actor=str(committed.body["candidate"]),
            kind=ATTEMPT_ANSWERED,
            subject=attempt_id,
            body={"attempt_id": attempt_id, "answers": answers},
            now=self.ledger.clock(),
        )
        revealed, items = self._drawn(committed, skill, _nonce(given[1].body["nonce"]))
        seat = self.skills.judge
        # each choice of the judge is logged with the grades: the audit replays them
        judged = seat is not None and needs_judge(skill.manifest)
        recorder = RecordingJudge(seat) if seat is not None and judged else None
        judge = recorder.seat if recorder is not None else seat
        grades = grade_exam(skill.manifest, items, answers, judge=judge, mode=self.mode)
        with lock or nullcontext():  # graded in the box above, outside it
            self.ledger.append_entries([entry], once_keys=[attempt_id])
            earned = sum(g.earned for g in grades)
            possible = sum(g.possible for g in grades)
            passed = exam_passes(skill.manifest, grades)
            graded_index, _ = self.ledger.append(
                self.ledger.operator,
                ATTEMPT_GRADED,
                subject=attempt_id,
                body={
                    "attempt_id": attempt_id,
                    "skill_id": skill.manifest.skill_id,
                    "service_nonce": self._service_nonce(attempt_id).hex(),
                    "grades": _grades_json(grades),
                    "earned": earned,
                    "possible": possible,
                    "passed": passed,
                    **({"judge": recorder.record()} if recorder is not None else {}),
                    **({"bank": revealed} if revealed is not None else {}),
                },
                once_key=attempt_id,
            )
            credential_id = None
            if passed:
                result = ExamResult(
                    attempt_id,
                    str(committed.body["candidate"]),
                    skill.manifest.skill_id,
                    earned,
                    possible,
                    True,
                    len(items),
                    str(committed.body["commitment"]),
                    graded_index,
                    tuple(grades),
                )
                credential_id, _ = self.issuer.issue(result)
        return AttemptOutcome(
            attempt_id,
            skill.manifest.skill_id,
            earned,
            possible,
            passed,
            graded_index,
            tuple(grades),
            credential_id,
            self._service_nonce(attempt_id).hex(),
        )


def replay_attempts(
    entries: Iterable[tuple[int, Event]],
    skills: Mapping[str, DeclaredSkill],
    *,
    operator: str,
    mode: SandboxMode | None = None,
    only: Collection[str] | None = None,
) -> int:
    """Re-grade every graded attempt of `entries` (with their log indices, in log order) from
    the log alone, in the box (`only`: just those attempt ids); returns how many. `skills` are
    the known skills by id (`replay_declarations`).

    Raises SkillError naming the first graded entry whose attempt was not committed by the
    operator, whose reveal does not match its commitment, or whose grades (or pass) differ
    from the re-grade; SandboxUnavailable when the box cannot be made.
    """
    by_kind: dict[tuple[str, str], tuple[int, Event]] = {}
    exposed: dict[str, Counter[int]] = {}  # bank skills: each index's draws so far
    open_at: dict[str, list[int]] = {}  # bank attempts: the indices open at their commitment
    graded = 0
    for index, event in entries:
        if event.kind not in ATTEMPT_KINDS:
            continue
        by_kind.setdefault((event.kind, event.subject), (index, event))
        skill = skills.get(str(event.body.get("skill_id")))
        banked = skill is not None and skill.manifest.exam["kind"] == "bank"
        if banked and event.kind == ATTEMPT_COMMITTED and skill is not None:
            exam = skill.manifest.exam
            counts = exposed.get(skill.manifest.skill_id, Counter())
            open_at.setdefault(
                event.subject,
                available(int(exam["size"]), counts, int(exam["retire_after"])),
            )
        if event.kind == ATTEMPT_EXPIRED and skill is not None:
            try:
                _check_expired(event, by_kind, skill, operator, open_at.get(event.subject, []))
            except (SkillError, ExamError, KeyError, ValueError, TypeError) as exc:
                raise SkillError(f"entry {index}: an expiry that does not replay: {exc}") from exc
        if event.kind not in EXPOSING_KINDS:
            continue
        if banked and skill is not None:
            exposed.setdefault(skill.manifest.skill_id, Counter()).update(
                exposures([event.body.get("bank")])
            )
        if event.kind != ATTEMPT_GRADED or (only is not None and event.subject not in only):
            continue
        try:
            _regrade_one(event, by_kind, skills, operator, mode, open_at.get(event.subject))
        except (SkillError, ExamError, KeyError, ValueError, TypeError) as exc:
            raise SkillError(
                f"entry {index}: a skill attempt that does not re-grade: {exc}"
            ) from exc
        graded += 1
    return graded


def _check_expired(
    expired: Event,
    found: Mapping[tuple[str, str], tuple[int, Event]],
    skill: DeclaredSkill,
    operator: str,
    open_indices: list[int],
) -> None:
    """An expiry's reveal: the operator's, of a bank attempt committed and given its nonce,
    its service nonce the committed one, its items the seed's draw, each proven in the bank."""
    attempt_id = expired.subject
    committed = found.get((ATTEMPT_COMMITTED, attempt_id))
    nonce = found.get((ATTEMPT_NONCE, attempt_id))
    if expired.actor != operator or committed is None or nonce is None:
        raise SkillError(f"attempt {attempt_id}'s expiry is not the operator's of a begun attempt")
    if skill.manifest.exam["kind"] != "bank":
        raise SkillError(f"attempt {attempt_id} is not an attempt at a bank exam")
    service_nonce = bytes.fromhex(str(expired.body["service_nonce"]))
    check_service_reveal(str(committed[1].body["commitment"]), service_nonce)
    seed = attempt_seed(
        service_nonce,
        _nonce(nonce[1].body["nonce"]),
        skill.manifest.skill_id,
        int(committed[1].body["attempt"]),
    )
    shown = check_bank_reveal(skill.manifest.exam, expired.body.get("bank"))
    if [i for i, _ in shown] != draw(seed, open_indices, skill.manifest.item_count):
        raise SkillError(f"attempt {attempt_id}'s expiry reveals items the seed did not draw")


def _regrade_one(
    graded: Event,
    found: Mapping[tuple[str, str], tuple[int, Event]],
    skills: Mapping[str, DeclaredSkill],
    operator: str,
    mode: SandboxMode | None,
    open_indices: list[int] | None = None,
) -> None:
    attempt_id = graded.subject
    parts = {
        kind: found.get((kind, attempt_id))
        for kind in (ATTEMPT_COMMITTED, ATTEMPT_NONCE, ATTEMPT_ANSWERED)
    }
    missing = [kind for kind, part in parts.items() if part is None]
    if missing:
        raise SkillError(f"attempt {attempt_id} has no {missing[0]} before its grades")
    committed = parts[ATTEMPT_COMMITTED][1]  # type: ignore[index]
    nonce = parts[ATTEMPT_NONCE][1]  # type: ignore[index]
    answered = parts[ATTEMPT_ANSWERED][1]  # type: ignore[index]
    if graded.actor != operator or committed.actor != operator:
        raise SkillError("an attempt's commitment and grades are the operator's to sign")
    candidate = committed.body["candidate"]
    if nonce.actor != candidate or answered.actor != candidate:
        raise SkillError("an attempt's nonce and answers are its candidate's to sign")
    if parse_time(answered.at) > parse_time(str(committed.body["deadline"])):
        raise SkillError(f"attempt {attempt_id} was answered after its deadline")
    skill = skills.get(str(committed.body["skill_id"]))
    if skill is None or graded.body["skill_id"] != committed.body["skill_id"]:
        raise SkillError(f"attempt {attempt_id} names no declared skill")
    answers = list(answered.body["answers"])
    if len(answers) != int(committed.body["items"]):
        raise SkillError(f"attempt {attempt_id} answered {len(answers)} of its items")
    replayed = ReplayedJudge(graded.body.get("judge")) if needs_judge(skill.manifest) else None
    grades = regrade(
        skill.manifest,
        str(committed.body["commitment"]),
        bytes.fromhex(str(graded.body["service_nonce"])),
        _nonce(nonce.body["nonce"]),
        int(committed.body["attempt"]),
        answers,
        judge=replayed.seat if replayed is not None else None,
        mode=mode,
        bank=(open_indices or [], graded.body.get("bank"))
        if skill.manifest.exam["kind"] == "bank"
        else None,
    )
    if replayed is not None:
        replayed.check_spent()
    if _grades_json(grades) != graded.body["grades"]:
        raise SkillError(f"attempt {attempt_id}'s logged grades are not the re-grade's")
    earned = sum(g.earned for g in grades)
    possible = sum(g.possible for g in grades)
    passed = possible > 0 and Fraction(earned, possible) >= skill.manifest.threshold
    if (graded.body["earned"], graded.body["possible"], graded.body["passed"]) != (
        earned,
        possible,
        passed,
    ):
        raise SkillError(f"attempt {attempt_id}'s logged score is not the re-grade's")
