#!/usr/bin/env bash
# A store server out of file descriptors (issue 19, finding 11): with more
# connections waiting than it may open, accept() fails with EMFILE while
# the listener stays readable. The server must say why (once per pause),
# stop polling the listener for a moment instead of spinning on it, and
# serve again as soon as descriptors are free.
#
#   out_of_descriptors.sh STORE_SERVER WORKER
#
# The server runs with at most 16 descriptors; this script opens 40
# connections to it and measures the server's CPU time over 2 s (a
# spinning loop takes all of it: about 200 ticks), then closes them and
# runs one rank of a job against the same server.
set -uo pipefail
server=$1 worker=$2
out=$(mktemp -d /tmp/chorus-emfile.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; echo "--- server's log"; cat "$out/server.err"; exit 1; }

(ulimit -n 16 && exec "$server" 127.0.0.1:0) >"$out/server.out" 2>"$out/server.err" &
pid=$!
for _ in $(seq 100); do grep -q "^tcp://" "$out/server.out" && break; sleep 0.05; done
url=$(head -1 "$out/server.out")
port=${url##*:}
[ -n "$port" ] || fail "the server printed no address"

# CPU ticks (user + system) the server has used.
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

fds=()
for _ in $(seq 40); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$port" || fail "connecting"
  fds+=("$fd")
done
sleep 0.5
before=$(ticks)
sleep 2
used=$(($(ticks) - before))
hz=$(getconf CLK_TCK)
echo "the server used $used ticks of CPU in 2 s with 40 connections waiting (a tick: 1/$hz s)"
grep -q "cannot accept" "$out/server.err" || fail "the server never said why it does not accept"
[ "$used" -le $((hz / 2)) ] || fail "the server spun: $used ticks in 2 s"

for fd in "${fds[@]}"; do exec {fd}>&-; done
CHORUS_STORE="$url" CHORUS_RANK=0 CHORUS_SIZE=1 CHORUS_TIMEOUT=20 \
  timeout -s KILL 60 "$worker" collectives >"$out/worker.out" 2>&1 ||
  { cat "$out/worker.out"; fail "a rank could not use the store once descriptors were free"; }
echo "PASSED: $(grep -c "cannot accept" "$out/server.err") 'cannot accept' lines; a job ran afterwards"
