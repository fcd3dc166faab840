#!/usr/bin/env bash
# A store named by a host name whose name server never answers (issue 19,
# finding 11): the rank must fail at CHORUS_TIMEOUT naming the store and
# the name, not wait for the resolver's own timeout (30 s here; minutes in
# some resolv.conf).
#
#   unanswered_name_server.sh WORKER
#
# Runs WORKER in a network namespace of its own whose resolv.conf
# (ip netns exec mounts /etc/netns/NAME/resolv.conf) names a server that
# silently drops every query (a fixed neighbour entry on a veth pair that
# nothing answers). Exit 77 (skipped) where that cannot be made (not root,
# no network namespaces).
set -uo pipefail
worker=$1
ns=chorus-dns-$$
skip() { echo "SKIPPED: $*"; exit 77; }
cleanup() {
  ip netns delete "$ns" 2>/dev/null
  rm -rf "/etc/netns/$ns"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
ip netns add "$ns" 2>/dev/null || skip "network namespaces cannot be created here"
ip -n "$ns" link set lo up &&
  ip -n "$ns" link add v0 type veth peer name v1 &&
  ip -n "$ns" link set v0 up && ip -n "$ns" link set v1 up &&
  ip -n "$ns" addr add 10.203.0.1/24 dev v0 &&
  ip -n "$ns" neigh add 10.203.0.2 lladdr 02:00:00:00:00:02 dev v0 nud permanent ||
  skip "a veth pair cannot be made in a namespace here"
mkdir -p "/etc/netns/$ns"
printf 'nameserver 10.203.0.2\noptions timeout:30 attempts:1\n' >"/etc/netns/$ns/resolv.conf"

start=$(date +%s%3N)
output=$(CHORUS_STORE=tcp://chorus-store.invalid:29500 CHORUS_RANK=1 CHORUS_SIZE=2 CHORUS_TIMEOUT=2 \
  timeout -s KILL 40 ip netns exec "$ns" "$worker" mismatch 2>&1)
took=$(($(date +%s%3N) - start))
echo "$output"
echo "took $took ms"
[ "$took" -le 8000 ] || { echo "FAILED: the rank waited $took ms, past CHORUS_TIMEOUT=2 s"; exit 1; }
echo "$output" | grep -q "resolving host 'chorus-store.invalid' did not finish within the timeout" ||
  { echo "FAILED: the error does not say that the store's name was not resolved in time"; exit 1; }
echo "PASSED"
