#!/usr/bin/env bash
# The wheel works on its own: build it, install it with its dependencies into a fresh venv
# outside the repository, and from an empty folder run a short accord flow with that venv's
# `accord` (devnet up, an agent onboarded, a task posted, bid on, awarded, run,
# settled, anchored and audited, devnet down). Fails loudly at the first error; `make test`
# runs it after pytest.
#
#   scripts/check_wheel.sh            anvil: $ACCORD_ANVIL, else the repository's node_modules
#                                     (`npm ci`), else whatever `accord` finds itself
#   KEEP=1 scripts/check_wheel.sh     keep the temp folder (its path is printed)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
# The repository's venv (made by `make setup`) has pip; a bare Debian python3 may not.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/accord-wheel.XXXXXX")"
case "$WORK" in "$REPO"/*) echo "check_wheel: temp folder $WORK is inside the repository" >&2; exit 1 ;; esac
STARTED=$SECONDS
VENV="$WORK/venv"
ACCORD="$VENV/bin/accord"

step() { printf '\n==> [%3ds] %s\n' $((SECONDS - STARTED)) "$*"; }
fail() { echo "check_wheel: FAILED: $*" >&2; exit 1; }

cleanup() {
  local status=$?
  if [[ -x "$ACCORD" && -d "$WORK/home" ]]; then
    (cd "$WORK/run" && "$ACCORD" devnet down >/dev/null 2>&1) || true
  fi
  if [[ "${KEEP:-}" == 1 ]]; then echo "check_wheel: kept $WORK"; else rm -rf "$WORK"; fi
  [[ $status -eq 0 ]] || echo "check_wheel: FAILED (exit $status) after $((SECONDS - STARTED)) s" >&2
}
trap cleanup EXIT

# -- 1. build the wheel from a clean copy of the sources (no stale build/ folder can leak in) --
step "building the wheel (pip wheel --no-deps) from a clean copy of the sources"
mkdir -p "$WORK/src" "$WORK/dist"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$WORK/src"
# -v shows the build backend's own output, so its warnings can be checked.
if ! "$PYTHON" -m pip wheel --no-deps -v --disable-pip-version-check -w "$WORK/dist" "$WORK/src" \
  >"$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log" >&2
  fail "pip wheel"
fi
if grep -niE "deprecat|BuildBackendWarning|SetuptoolsWarning" "$WORK/build.log" >&2; then
  fail "the build warns (above); pyproject.toml should build without warnings"
fi
WHEEL="$(ls "$WORK"/dist/accord-*.whl)"
echo "built $(basename "$WHEEL")"
for data in accord/ledger/artifacts/AnchorRegistry.json accord/ledger/artifacts/TaskEscrow.json \
  accord/coordinator/prompts/leader_system.txt accord/identity/challenges/templates/arithmetic.txt; do
  "$PYTHON" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' \
    "$WHEEL" "$data" || fail "the wheel lacks $data"
done
# One top-level package, accord, with its PEP 561 marker (or a user's mypy sees no types), and
# every folder of the source tree that is a package inside it (setuptools' package mapping).
"$PYTHON" - "$WHEEL" "$WORK/src" <<'EOF' || fail "the wheel's packages are not accord.* with py.typed"
import sys, zipfile
from pathlib import Path

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
top = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
assert top == ["accord"], f"top-level names in the wheel: {top}"
assert "accord/py.typed" in names, "no accord/py.typed"
src = Path(sys.argv[2])
expected = {
    f"accord/{init.parent.relative_to(src)}/__init__.py"
    for base in ("api", "audit", "coordinator", "identity", "ledger", "market")
    for init in (src / base).rglob("__init__.py")
}
missing = sorted(expected - names)
assert not missing, f"packages of the source tree missing from the wheel: {missing}"
print("one top-level package, accord, with py.typed and", len(expected), "mapped packages")
EOF

# -- 2. a fresh venv outside the repository, the wheel and its dependencies (from the cache) ----
# With uv (`make setup` puts it in the repository's venv) the install takes seconds from uv's
# cache instead of minutes of pip unpacking a hundred wheels; either resolves the wheel's
# declared dependencies from the index, which is what this checks.
UV_BIN="${UV:-$(dirname "$PYTHON")/uv}"
if [[ -x "$UV_BIN" ]]; then
  step "installing the wheel and its dependencies into a fresh venv in $WORK (uv)"
  "$PYTHON" -m venv --without-pip "$VENV"
  INSTALL=("$UV_BIN" pip install --compile-bytecode --python "$VENV/bin/python" "$WHEEL")
else
  step "installing the wheel and its dependencies into a fresh venv in $WORK (pip)"
  "$PYTHON" -m venv "$VENV"
  INSTALL=("$VENV/bin/python" -m pip install --disable-pip-version-check "$WHEEL")
fi
if ! "${INSTALL[@]}" >"$WORK/install.log" 2>&1; then
  tail -40 "$WORK/install.log" >&2
  fail "installing the wheel"
fi
grep -E "^(Successfully installed|Installed)" "$WORK/install.log" | cut -c1-200

# -- 3. from an empty folder, with nothing of the repository on the path ------------------------
mkdir -p "$WORK/run"
cd "$WORK/run"
unset PYTHONPATH ACCORD_RPC_URL ACCORD_DB_URL ACCORD_SERVER
export ACCORD_HOME="$WORK/home"
step "accord devnet up with no anvil anywhere: one clear line, nothing left running"
if NO_ANVIL="$(env -u ACCORD_ANVIL PATH="$VENV/bin" XDG_CACHE_HOME="$WORK/empty-cache" \
  ACCORD_DEVNET_PORT=1 "$ACCORD" devnet up 2>&1)"; then
  fail "devnet up started without anvil: $NO_ANVIL"
fi
echo "$NO_ANVIL"
grep -q "accord devnet install" <<<"$NO_ANVIL" || fail "the message does not name \`accord devnet install\`"
grep -q "Traceback" <<<"$NO_ANVIL" && fail "devnet up without anvil ends in a traceback"

if [[ -z "${ACCORD_ANVIL:-}" ]]; then
  for candidate in "$REPO"/node_modules/@foundry-rs/anvil-*/bin/anvil; do
    [[ -x "$candidate" ]] && export ACCORD_ANVIL="$candidate" && break
  done
fi
echo "anvil: ${ACCORD_ANVIL:-(found by accord)}"

step "import accord"
"$VENV/bin/python" -c 'import accord; print("accord", accord.__version__)'
"$VENV/bin/python" - "$REPO" <<'EOF' || fail "the installed package reads files of the repository"
import sys
from pathlib import Path

import accord
import accord.coordinator.llm_policy as llm
import accord.ledger as ledger
from accord.identity.challenges.base import TEMPLATES_DIR
from accord.ledger.contracts import load_artifact

repo = Path(sys.argv[1]).resolve()
assert accord.__version__ != "0+unknown", "accord is not installed"
installed = Path(ledger.__file__).resolve()
assert repo not in installed.parents, f"ledger imported from the repository: {installed}"
for name in ("AnchorRegistry", "TaskEscrow"):
    assert load_artifact(name).bytecode
for name in llm.TEMPLATES:
    assert llm.load_template(name).strip()
assert any(TEMPLATES_DIR.glob("*.txt"))
assert issubclass(accord.LedgerError, accord.AccordError)
for bare in ("api", "audit", "coordinator", "identity", "ledger", "market"):
    try:
        __import__(bare)
    except ModuleNotFoundError:
        continue
    raise AssertionError(f"the wheel installs a top-level package {bare!r}: only accord.* belongs")
print("accord.* only: no top-level api, audit, coordinator, identity, ledger or market")
print("package data: contract artifacts, prompt and capability templates")
EOF
step "a user's mypy --strict reads accord's types from the installed wheel"
# The repository's mypy, pointed at the fresh venv's site-packages (PEP 561 lookup), from a
# folder with no mypy configuration: one script that must pass, one that must be refused.
cat >"$WORK/run/uses_accord.py" <<'EOF'
import accord
from accord import AuditReport, Home, Task, TaskPage


def open_work(home: Home, capability: str) -> list[str]:
    page: TaskPage = home.tasks(state="bidding", capability=capability, limit=20)
    ids = [task.task_id for task in page.tasks]
    while page.next_cursor is not None:
        page = home.tasks(state="bidding", capability=capability, cursor=page.next_cursor)
        ids += [task.task_id for task in page.tasks]
    return ids


def verdict(home: Home, task_id: str) -> bool:
    task: Task = home.task(task_id)
    report: AuditReport = home.audit(task.task_id)
    return report.ok and home.deliverable(task_id).sha256 is not None


def main() -> None:
    with accord.open_home("./.accord") as home:
        print(open_work(home, "arithmetic"))
        print(accord.format_eth(accord.parse_amount("0.1eth")))
EOF
printf 'import accord\n\nwith accord.open_home() as home:\n    budget: str = home.task("t").spec.budget\n' \
  >"$WORK/run/misuses_accord.py"
# A cache of its own, fresh in $WORK: the second run reuses what the first read of accord and
# its dependencies, and nothing of an earlier check can leak in.
MYPY=("$PYTHON" -m mypy --strict --cache-dir "$WORK/mypy-cache" --python-executable "$VENV/bin/python")
(cd "$WORK/run" && "${MYPY[@]}" uses_accord.py) || fail "mypy --strict refuses a script using accord"
if MISUSE="$(cd "$WORK/run" && "${MYPY[@]}" misuses_accord.py 2>&1)"; then
  fail "mypy --strict accepts a Wei budget as str: it does not see accord's types"
fi
grep -q 'Incompatible types in assignment' <<<"$MISUSE" || fail "mypy said: $MISUSE"
echo "mypy --strict: accord's types are seen (a misuse is refused)"

export ACCORD_DEVNET_PORT="$("$VENV/bin/python" -c 'from accord.ledger.devnet import find_free_port; print(find_free_port())')"

field() { "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
# The market's clock runs ahead of the real time by the seconds this file holds (README: no
# test waits for a window by the wall clock); `advance` closes a window without waiting for it,
# so a slow machine makes the check slower, never a bid late.
export ACCORD_TEST_CLOCK="$WORK/market-clock" ACCORD_ALLOW_TEST_CLOCK=1
advance() {
  "$VENV/bin/python" -c '
import sys
from pathlib import Path
clock = Path(sys.argv[1])
clock.write_text(repr((float(clock.read_text()) if clock.exists() else 0.0) + float(sys.argv[2])))' \
    "$ACCORD_TEST_CLOCK" "$1"
}

step "accord devnet up"
"$ACCORD" devnet up
step "accord agent new alice / agent onboard alice -c arithmetic"
"$ACCORD" agent new alice
"$ACCORD" agent onboard alice -c arithmetic
step "accord task post (flag form)"
POSTED="$("$ACCORD" task post --title "Add these" --budget 0.5eth --capability arithmetic \
  --input '{"kind":"figures","figures":["1.50","2.25"],"operation":"sum"}' --expect '"3.75"' \
  --bidding 1h --reveal 1h --delivery 1h --json)"
TASK="$(field task_id <<<"$POSTED")"
echo "posted $TASK"
step "accord bid commit / reveal"
"$ACCORD" bid commit "$TASK" --agent alice --price 0.2eth
# Windows of an hour, closed by moving the clock an hour on: the real time the commands take
# in between (seconds, or minutes on a loaded machine) never decides whether a bid is late.
advance 3601  # past the hour of bidding
"$ACCORD" bid reveal "$TASK" --agent alice
advance 3601  # past the hour of reveal
step "accord task award"
"$ACCORD" task award "$TASK"
step "accord task run"
"$ACCORD" task run "$TASK"
step "accord task settle (after the review window)"
# The flag form's --expect is the task's one check, a machine's: with no judge configured, a
# task no machine can decide is refused at posting. Settlement waits for the review window.
advance 3601  # past the hour of review
"$ACCORD" task settle "$TASK"
step "accord ledger anchor / audit $TASK"
"$ACCORD" ledger anchor
"$ACCORD" audit "$TASK"
step "accord devnet down"
"$ACCORD" devnet down
[[ "$(cd "$WORK/run" && "$ACCORD" devnet status --json | field running)" == False ]] \
  || fail "the devnet still runs after devnet down"

step "the wheel works on its own ($((SECONDS - STARTED)) s)"
