"""The CLI's exit status of an expected failure comes from the status the service answers it
with (`accord.api.problems.domain_problem`): 2 when the request is at fault (400, 404, 413, 422),
1 for every other failure. No command maps class names to codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from accord.api.market_cli import read_market
from accord.api.output import BAD_INPUT_STATUSES, exit_code, exit_code_of
from accord.api.problems import domain_problem
from accord.identity.errors import (
    CredentialError,
    ExamConflict,
    ExamError,
    KeyStoreError,
    RateLimitedError,
    RegistryError,
)
from accord.ledger.errors import (
    AccordError,
    ChainUnavailableError,
    MalformedError,
    ProofError,
    QueryError,
    SequenceError,
    StoreError,
)
from accord.ledger.settings import Settings
from accord.ledger.wiring import open_store
from accord.market.blobs import BlobError, MissingBlob, QuotaExceeded
from accord.market.errors import (
    AmountError,
    AuctionError,
    BidRejected,
    EscrowError,
    IdempotencyConflict,
    LimitError,
    SettlementWaits,
    TaskError,
    TransitionError,
    WorkError,
)

API = Path(__file__).resolve().parents[2] / "api"

CASES: list[tuple[AccordError, int]] = [
    # bad input: exit 2
    (AmountError("1.5 wei is not a whole number of wei"), 2),
    (TaskError("no task 'task-nope'"), 2),
    (WorkError("an input breaks its schema", path="$.parts[0].input"), 2),
    (LimitError("a window beyond the limit", 10), 2),
    (QuotaExceeded("a file over the size limit", limit="file-size", retry_after=None), 2),
    (MissingBlob("no file stored under that sha256"), 2),
    (MalformedError("not an entry"), 2),
    (QueryError("limit", "the limit is 1..200"), 2),
    (BidRejected("malformed", "the commitment is not 32 bytes"), 2),
    (BidRejected("wrong-task", "a bid for another task"), 2),
    (RegistryError("no agent named 'zed'"), 2),
    (ProofError("the proof does not hold"), 2),
    # the request was fine, the world was not: exit 1
    (TransitionError("task-1", "awarded", "bid"), 1),
    (IdempotencyConflict("key-1", "task-2"), 1),
    (BidRejected("late", "the bidding window has closed"), 1),
    (BidRejected("second-bid", "this agent already bid"), 1),
    (AuctionError("the reveal window is still open"), 1),
    (EscrowError("the escrow contract refused"), 1),
    (SettlementWaits("a review window is open"), 1),
    (QuotaExceeded("over your bytes", limit="bytes-per-caller", retry_after=30.0), 1),
    (BlobError("a stored file no longer hashes to its name"), 1),
    (SequenceError("did:key:z", 1, 1), 1),
    (StoreError("the database refused the write"), 1),
    (ChainUnavailableError("http://127.0.0.1:1", "connection refused"), 1),
    (KeyStoreError("the key file is not private"), 1),
    (RateLimitedError("too many attempts", 30.0), 1),
    (ExamConflict("exam e-1 is already graded"), 1),
    (ExamError("an exam.answered body is {exam_id, item_id, answer}"), 2),
]


@pytest.mark.parametrize(("error", "code"), CASES, ids=lambda v: type(v).__name__)
def test_the_exit_code_follows_the_problem_status(error: AccordError, code: int) -> None:
    status = domain_problem(error).status
    assert exit_code_of(error) == code, f"{type(error).__name__} is answered {status}"
    assert (status in BAD_INPUT_STATUSES) == (code == 2)


def test_a_credential_that_fails_a_step_is_bad_input() -> None:
    assert exit_code_of(CredentialError("3", "the proof does not verify")) == 2


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, 2), (404, 2), (413, 2), (422, 2), (401, 1), (409, 1), (429, 1), (500, 1), (503, 1)],
)
def test_a_remote_answer_exits_by_its_status(status: int, code: int) -> None:
    assert exit_code(status) == code
    assert exit_code(None) == 1  # no answer at all


def test_no_command_maps_class_names_to_exit_codes() -> None:
    names = re.compile(r"__name__\s+(not\s+)?in\b|\{\s*\"[A-Z]\w*(Error|Exceeded)\"")
    for path in sorted(API.glob("*.py")):
        assert not names.search(path.read_text()), f"{path.name} maps class names to codes"


def test_a_market_command_exits_by_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the market commands' own handler: a quota that frees up later is no bad input
    (exit 1); a file that can never fit is (exit 2)."""
    home = tmp_path / "home"
    open_store(Settings.from_env({"ACCORD_HOME": str(home)}))
    monkeypatch.setenv("ACCORD_HOME", str(home))
    for retry_after, code in ((12.0, 1), (None, 2)):
        with pytest.raises(typer.Exit) as caught, read_market():
            raise QuotaExceeded("over the quota", limit="bytes-total", retry_after=retry_after)
        assert caught.value.exit_code == code


def test_an_exam_graded_already_is_a_conflict_not_bad_input() -> None:
    problem = domain_problem(ExamConflict("exam e-1's answers kept changing; ask again"))
    assert (problem.status, problem.kind) == (409, "exam-conflict")
