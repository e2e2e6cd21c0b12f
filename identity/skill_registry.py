"""Declared skills: `skill.declared` entries on the log, and the skills accord ships.

Any registered DID declares a skill by signing a `skill.declared` event (subject: the skill
id; body: `{"skill_id", "manifest"}`). The service checks the manifest's rules
(`accord.identity.manifests.parse_manifest`) and runs its validity gates in the box
(`accord.identity.skill_exams.check_gates`) before it appends the entry; a skill id is
declared once (the log's once-key refuses a second). Declarations are append-only: a new
version is a new manifest naming the one it `supersedes`, which must be an earlier skill of
the same name declared by the same DID.

The shipped skills need no entry: the four built-in capabilities (`builtin_manifests`) and the
skill library (`library_manifests`), all the operator's. Their names are reserved: only the
operator declares a manifest of one of those names.

`replay_declarations` is the pure rule both the service and the audit fold the log with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache
from typing import Any

from accord.identity.errors import SkillError, UnknownSkill
from accord.identity.exams import check_agent_entry
from accord.identity.graders import JudgeSeat
from accord.identity.item_bank_store import BankStore
from accord.identity.item_banks import check_bank
from accord.identity.manifests import SkillManifest, builtin_manifests, parse_manifest
from accord.identity.skill_capability import ManifestCapability
from accord.identity.skill_exams import GateReport, check_gates
from accord.identity.skill_folders import library_manifests
from accord.ledger.events import Entry, Event
from accord.ledger.service import Ledger
from accord.ledger.signing import Signer

SKILL_DECLARED_KIND = "skill.declared"
MAX_PAGE = 200


@dataclass(frozen=True)
class DeclaredSkill:
    """A skill and who declared it: `index` is its `skill.declared` entry (None for a
    shipped skill, which has none) and `at` the time its declarer signed."""

    manifest: SkillManifest
    declarer: str
    index: int | None
    at: str | None

    def summary(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "id": m.skill_id,
            "name": m.name,
            "version": m.version,
            "description": m.description,
            "declarer": self.declarer,
            "shipped": self.index is None,
            "index": self.index,
            "declared_at": self.at,
            "supersedes": m.supersedes,
            "exam": {"kind": m.exam["kind"], "items": m.item_count, "threshold": str(m.threshold)},
            "graders": [str(g["kind"]) for g in m.graders],
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "manifest": self.manifest.to_json()}


@cache
def shipped_manifests() -> tuple[SkillManifest, ...]:
    """The built-in capabilities and the skill library, as manifests."""
    return builtin_manifests() + library_manifests()


def shipped_skills(operator: str) -> list[DeclaredSkill]:
    return [DeclaredSkill(m, operator, None, None) for m in shipped_manifests()]


def needs_judge(manifest: SkillManifest) -> bool:
    """Whether a grader of `manifest` is model-graded (so it is offered only with a judge)."""
    return any(grader.get("kind") == "model" for grader in manifest.graders)


def declaration_body(manifest: SkillManifest) -> dict[str, Any]:
    """The body of the `skill.declared` event that declares `manifest`."""
    return {"skill_id": manifest.skill_id, "manifest": manifest.to_json()}


def check_declaration(
    manifest: SkillManifest,
    declarer: str,
    known: Mapping[str, DeclaredSkill],
    *,
    operator: str,
) -> None:
    """The rules of who may declare what, given the skills `known` so far (shipped and
    declared, by id). Pure.

    Raises SkillError when the id is already declared, the name is a shipped skill's and the
    declarer not the operator, or `supersedes` names no earlier skill of the same name and
    declarer.
    """
    if manifest.skill_id in known:
        raise SkillError(f"skill {manifest.skill_id} is already declared")
    reserved = {m.name for m in shipped_manifests()}
    if manifest.name in reserved and declarer != operator:
        raise SkillError(f"the name {manifest.name!r} is a shipped skill's: choose another name")
    if manifest.builtin is not None and declarer != operator:
        raise SkillError("only the operator declares a manifest of a built-in capability")
    old_id = manifest.supersedes
    if old_id is not None:
        old = known.get(old_id)
        if old is None:
            raise SkillError(f"it supersedes {old_id}, which is not a declared skill")
        if old.manifest.name != manifest.name or old.declarer != declarer:
            raise SkillError(
                f"it supersedes {old_id}, which is {old.declarer}'s skill "
                f"{old.manifest.name!r}: only its declarer supersedes it, under the same name"
            )


def replay_declarations(
    entries: Iterable[tuple[int, Event]],
    *,
    operator: str,
    registered_at: Mapping[str, int],
) -> dict[str, DeclaredSkill]:
    """Fold `skill.declared` events (with their log indices, in log order) into the known
    skills by id, shipped ones included. Pure: what the audit replays.

    Raises SkillError naming the first entry whose body is not a declaration of the manifest it
    carries (id = the manifest's hash, subject = that id), whose declarer had not registered
    before it (the operator needs not), or that breaks `check_declaration`.
    """
    known: dict[str, DeclaredSkill] = {s.manifest.skill_id: s for s in shipped_skills(operator)}
    for index, event in entries:
        if event.kind != SKILL_DECLARED_KIND:
            continue
        try:
            manifest = parse_manifest(event.body.get("manifest"))
            if dict(event.body) != declaration_body(manifest):
                raise SkillError("its body is not {skill_id, manifest} of its manifest")
            if event.subject != manifest.skill_id:
                raise SkillError(f"its subject is not the skill id {manifest.skill_id}")
            registered = registered_at.get(event.actor)
            if event.actor != operator and (registered is None or registered > index):
                raise SkillError(f"{event.actor} had not registered before declaring")
            check_declaration(manifest, event.actor, known, operator=operator)
        except SkillError as exc:
            raise SkillError(
                f"entry {index}: a skill.declared that does not replay: {exc}"
            ) from exc
        known[manifest.skill_id] = DeclaredSkill(manifest, event.actor, index, event.at)
    return known


class SkillRegistry:
    """Skills on one ledger: declare them (gates first), find them, list them.

    `is_registered(did)` says whether a DID has registered by DID-auth; `judge` is the model
    judge where one is configured (model-graded skills are refused without one).
    """

    def __init__(
        self,
        ledger: Ledger,
        is_registered: Callable[[str], bool],
        *,
        judge: JudgeSeat | None = None,
    ) -> None:
        self.ledger = ledger
        self.is_registered = is_registered
        self.judge = judge
        self.banks = BankStore(ledger.store.engine)
        """The bank exams' items, kept off the log (`accord.identity.item_banks`)."""

    @property
    def operator(self) -> str:
        return self.ledger.operator.did

    def offered(self) -> list[DeclaredSkill]:
        """The shipped skills this service offers: a model-graded one (`summarise`) only where
        a judge is configured."""
        return [
            skill
            for skill in shipped_skills(self.operator)
            if self.judge is not None or not needs_judge(skill.manifest)
        ]

    def _stored(self, skill: str) -> DeclaredSkill | None:
        found = self.ledger.store.find(kind=SKILL_DECLARED_KIND, subject=skill, limit=1)
        if not found:
            return None
        event = Entry.from_bytes(found[0].data).event
        manifest = parse_manifest(event.body.get("manifest"))
        return DeclaredSkill(manifest, event.actor, found[0].index, event.at)

    def capability_of(self, skill_id: str) -> ManifestCapability | None:
        """The declared or library skill `skill_id` as a capability, or None (the loader
        `get_capability` asks, `accord.identity.challenges.registry.set_capability_loader`)."""
        try:
            found = self.get(skill_id)
        except SkillError:
            return None
        if found.manifest.builtin is not None:
            return None
        return ManifestCapability(found.manifest)

    def get(self, name_or_id: str) -> DeclaredSkill:
        """A shipped skill by id or name, or a declared one by id.

        Raises UnknownSkill when there is none, and for a model-graded shipped skill where no
        judge is configured.
        """
        for skill in shipped_skills(self.operator):
            if name_or_id in (skill.manifest.skill_id, skill.manifest.name):
                if self.judge is None and needs_judge(skill.manifest):
                    raise UnknownSkill(
                        f"{skill.manifest.name} is model-graded: this service offers it only "
                        "where a judge is configured (ACCORD_JUDGE_URL), and none is"
                    )
                return skill
        found = self._stored(name_or_id) if len(name_or_id) == 64 else None
        if found is None:
            raise UnknownSkill(
                f"no skill {name_or_id!r}: name a declared skill by its id (GET /skills lists "
                "them), or a shipped one by its name"
            )
        return found

    def page(self, *, after: int = -1, limit: int = MAX_PAGE) -> list[DeclaredSkill]:
        """The shipped skills (on the first page, `after` < 0) then declared ones in log
        order after entry `after`, at most `limit` declared ones."""
        shipped = self.offered() if after < 0 else []
        found = self.ledger.store.find(
            kind=SKILL_DECLARED_KIND, after=after, limit=max(1, min(limit, MAX_PAGE))
        )
        declared = []
        for stored in found:
            event = Entry.from_bytes(stored.data).event
            manifest = parse_manifest(event.body.get("manifest"))
            declared.append(DeclaredSkill(manifest, event.actor, stored.index, event.at))
        return shipped + declared

    def _keep_bank(self, manifest: SkillManifest, bank: object) -> None:
        """Keep a bank exam's items (checked by its gates) before its declaration is logged."""
        if manifest.exam["kind"] == "bank":
            self.banks.put(manifest.skill_id, check_bank(manifest.exam, bank))

    def _admit(self, manifest: SkillManifest, declarer: str, bank: object = None) -> GateReport:
        if declarer != self.operator and not self.is_registered(declarer):
            raise SkillError(f"{declarer} has not registered: register before declaring skills")
        known: dict[str, DeclaredSkill] = {
            s.manifest.skill_id: s for s in shipped_skills(self.operator)
        }
        for skill_id in filter(None, (manifest.skill_id, manifest.supersedes)):
            stored = self._stored(skill_id)
            if stored is not None:
                known[skill_id] = stored
        check_declaration(manifest, declarer, known, operator=self.operator)
        return check_gates(manifest, judge=self.judge, bank=bank)

    def declare(
        self,
        signer: Signer,
        document: object,
        *,
        bank: object = None,
        lock: AbstractContextManager[object] | None = None,
    ) -> tuple[DeclaredSkill, GateReport]:
        """Check `document`, run its gates and log its `skill.declared` entry signed by
        `signer` (a key the service holds: the operator's or a hosted agent's). The gates run
        first, outside `lock`; only the append holds it. A bank exam's items are `bank`.

        Raises ManifestError for a broken manifest rule, GateFailed for a failed gate,
        SkillError for a declarer or supersession the rules refuse, SandboxUnavailable when
        the box cannot be made, AlreadyLoggedError when the id was declared meanwhile.
        """
        manifest = parse_manifest(document)
        report = self._admit(manifest, signer.did, bank)
        self._keep_bank(manifest, bank)
        with lock or nullcontext():
            index, entry = self.ledger.append(
                signer,
                SKILL_DECLARED_KIND,
                subject=manifest.skill_id,
                body=declaration_body(manifest),
                once_key=manifest.skill_id,
            )
        return DeclaredSkill(manifest, signer.did, index, entry.event.at), report

    def declare_signed(
        self,
        entry: Entry,
        *,
        bank: object = None,
        lock: AbstractContextManager[object] | None = None,
    ) -> tuple[DeclaredSkill, GateReport]:
        """Log a `skill.declared` entry its declarer signed itself, after the same checks as
        `declare` and that the entry is exactly the declaration of the manifest it carries,
        signed within the service's clock skew.

        Raises ExamError when the entry is not such a declaration, and what `declare` raises.
        """
        manifest = parse_manifest(entry.event.body.get("manifest"))
        check_agent_entry(
            entry,
            actor=entry.event.actor,
            kind=SKILL_DECLARED_KIND,
            subject=manifest.skill_id,
            body=declaration_body(manifest),
            now=self.ledger.clock(),
        )
        report = self._admit(manifest, entry.event.actor, bank)
        self._keep_bank(manifest, bank)
        with lock or nullcontext():
            (index,) = self.ledger.append_entries([entry], once_keys=[manifest.skill_id])
        return DeclaredSkill(manifest, entry.event.actor, index, entry.event.at), report
