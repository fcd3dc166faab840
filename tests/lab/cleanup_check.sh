#!/usr/bin/env bash
# lab_tests.sh leaves no lab behind: a lab that a killed run left (named
# for that run's pid, now gone) is taken down by the next run, and a case
# that outlasts its budget (LAB_BUDGET) fails by itself, saying so, and
# takes its own lab down: no network namespace (its ranks ran in the
# hosts' pid namespaces, which end with them) and no state directory.
#
#   cleanup_check.sh BIN_DIR WORKER
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netlab=$here/../../scripts/netlab
log=${TMPDIR:-/tmp}/lab_cleanup.$$

# A lab as a run killed before its cleanup leaves it: its script's pid gone.
bash -c 'exit 0' &
dead=$!
wait "$dead"
[ "$(id -u)" = 0 ] && NETLAB_NAME=t$dead "$netlab" up 2 >/dev/null 2>&1
trap 'NETLAB_NAME=t$dead "$netlab" down >/dev/null 2>&1; rm -f "$log"' EXIT

LAB_BUDGET=8 LAB_TIME_SCALE=1 bash "$here/lab_tests.sh" "$1" "$2" collectives tcp >"$log" 2>&1 &
lab_pid=$!
wait "$lab_pid"
rc=$?
out=$(cat "$log")
[ "$rc" = 77 ] && { echo "$out"; exit 77; }  # no lab can be made here: skipped
echo "$out" | head -3
failed() { echo "FAILED: $*"; exit 1; }
[ "$rc" = 1 ] || failed "exit status $rc, not 1"
echo "$out" | grep -q "taking down lab t$dead, left by a killed run" || failed "the stale lab t$dead was not named"
echo "$out" | grep -q "took longer than its budget of 8 s" || failed "no word of the budget"
for name in "t$dead" "t$lab_pid"; do
  left=$(ip netns list | grep "^nl-$name-" || true)
  [ -z "$left" ] || failed "namespaces left: $left"
  [ ! -e "/run/netlab/$name" ] || failed "/run/netlab/$name left"
done
echo "PASSED: the stale lab was taken down, and the case over its budget failed and took its own down"
