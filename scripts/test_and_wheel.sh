#!/usr/bin/env bash
# `make test`'s last two steps side by side: the pytest suite, and the wheel checked on its own
# (scripts/check_wheel.sh) in the background, its output kept in a file and printed after
# pytest's. Much of the wheel check waits on pip's downloads and on its devnet, time in which
# the suite's workers use the cores; run one after the other they added up.
# Exit status: 0 when both pass, else pytest's status, else the wheel check's.
#
#   scripts/test_and_wheel.sh [PYTEST ARGS...]   extra arguments go to pytest
set -uo pipefail
cd "$(dirname "$0")/.."

LOG="$(mktemp "${TMPDIR:-/tmp}/accord-check-wheel.XXXXXX")"
scripts/check_wheel.sh >"$LOG" 2>&1 &
WHEEL_PID=$!
stop_wheel() { kill -TERM "$WHEEL_PID" 2>/dev/null; wait "$WHEEL_PID" 2>/dev/null; rm -f "$LOG"; }
trap 'stop_wheel; exit 130' INT TERM
echo "==> scripts/check_wheel.sh started beside pytest (its output follows pytest's)"

START=$SECONDS
scripts/with_postgres.sh .venv/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile \
  --durations=10 "$@"
TESTS=$?
echo "==> pytest finished in $((SECONDS - START)) s (exit $TESTS)"

wait "$WHEEL_PID"
WHEEL=$?
trap - INT TERM
echo
echo "==> scripts/check_wheel.sh (ran beside pytest; exit $WHEEL, done $((SECONDS - START)) s after the start)"
cat "$LOG"
rm -f "$LOG"

if [[ $TESTS -ne 0 ]]; then exit "$TESTS"; fi
exit "$WHEEL"
