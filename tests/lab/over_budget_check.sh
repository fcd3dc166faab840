#!/usr/bin/env bash
# A lab case that outlasts its budget (lab_tests.sh's LAB_BUDGET) fails by
# itself, saying so, and leaves no lab behind: no network namespace (its
# ranks ran in the hosts' pid namespaces, which end with them) and no state
# directory.
#
#   over_budget_check.sh BIN_DIR WORKER
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LAB_BUDGET=8 LAB_TIME_SCALE=1 bash "$here/lab_tests.sh" "$1" "$2" collectives tcp >"${TMPDIR:-/tmp}/over_budget.$$" 2>&1 &
lab_pid=$!
wait "$lab_pid"
rc=$?
out=$(cat "${TMPDIR:-/tmp}/over_budget.$$")
rm -f "${TMPDIR:-/tmp}/over_budget.$$"
[ "$rc" = 77 ] && { echo "$out"; exit 77; }  # no lab can be made here: skipped
echo "$out" | head -3
[ "$rc" = 1 ] || { echo "FAILED: exit status $rc, not 1"; exit 1; }
echo "$out" | grep -q "took longer than its budget of 8 s" || { echo "FAILED: no word of the budget"; exit 1; }
left=$(ip netns list | grep "^nl-t$lab_pid-" || true)
[ -z "$left" ] || { echo "FAILED: namespaces left: $left"; exit 1; }
[ ! -e "/run/netlab/t$lab_pid" ] || { echo "FAILED: /run/netlab/t$lab_pid left"; exit 1; }
echo "PASSED: over its budget, the case failed and took its lab down"
