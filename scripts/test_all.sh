#!/usr/bin/env bash
# `make test` after setup: the pytest suite in the foreground, and beside it, in the background,
# the checks that do not need it: lint (`make lint`: ruff, ruff format, mypy, vulture) and the
# wheel checked on its own (scripts/check_wheel.sh). The committed contract artifacts are
# compared with a fresh compile by the suite (tests/contracts/test_artifacts.py). Each
# background check's output is kept in a file and printed after pytest's. Run one after the
# other they kept a core idle: mypy is one process, and the wheel check waits on its installs
# and its devnet, time in which the suite's workers use the cores.
# Exit status: 0 when all pass, else pytest's status, else the first failing check's.
#
#   scripts/test_all.sh [PYTEST ARGS...]   extra arguments go to pytest
set -uo pipefail
cd "$(dirname "$0")/.."

CHECKS=(
  "lint|make --no-print-directory lint"
  "wheel|scripts/check_wheel.sh"
)
LOGS=()
PIDS=()
stop_checks() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -f "${LOGS[@]}"
}
trap 'stop_checks; exit 130' INT TERM

for check in "${CHECKS[@]}"; do
  name="${check%%|*}"
  log="$(mktemp "${TMPDIR:-/tmp}/accord-check-$name.XXXXXX")"
  # each check times itself: the waits below come in order, not as the checks end
  bash -c "${check#*|}"'; code=$?; echo "(took $SECONDS s)"; exit $code' >"$log" 2>&1 &
  PIDS+=("$!")
  LOGS+=("$log")
  echo "==> $name (${check#*|}) started beside pytest; its output follows pytest's"
done

START=$SECONDS
scripts/with_postgres.sh .venv/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile \
  --durations=10 "$@"
STATUS=$?
echo "==> pytest finished in $((SECONDS - START)) s (exit $STATUS)"

for i in "${!CHECKS[@]}"; do
  name="${CHECKS[$i]%%|*}"
  wait "${PIDS[$i]}"
  code=$?
  echo
  echo "==> $name (exit $code)"
  cat "${LOGS[$i]}"
  rm -f "${LOGS[$i]}"
  if [[ $STATUS -eq 0 && $code -ne 0 ]]; then STATUS=$code; fi
done
trap - INT TERM
exit "$STATUS"
