#!/usr/bin/env bash
# AllReduce across the hosts of scripts/netlab, beside Open MPI in the same
# lab: Chorus's automatic choice, Chorus's flat ring, and MPI_Allreduce
# (Open MPI's default ob1: tcp between hosts, vader within), runs
# alternating; then bench/lab_report.py's table and plot.
#
#   bench/lab_bench.sh HOSTS RANKS_PER_HOST RUNS OUT_DIR [RATE] [MAX_BYTES]
#   e.g. bench/lab_bench.sh 2 2 3 docs/perf/lab_2x2 1gbit
#
# Needs root; brings the lab (NETLAB_NAME, default "chorus") up at RATE
# (default 1gbit) and down again. CHORUS_TRANSPORT (default tcp) and other
# CHORUS_* variables reach every rank. LAB_SMALL=0 skips the small sizes,
# LAB_LARGE=0 the large ones; LAB_ALGOS (default "auto ring") lists the
# Chorus algorithms run, each beside MPI_Allreduce. ALLREDUCE_PERF names
# another perf tool (build/bin/broadcast_perf: beside MPI_Bcast); LAB_MAP=node
# places ranks round-robin over the hosts (default slot: consecutive ranks
# on a host).
set -euo pipefail
hosts=$1 per_host=$2 runs=$3 out=$4 rate=${5:-1gbit} max=${6:-64M}
root=$(cd "$(dirname "$0")/.." && pwd)
netlab=$root/scripts/netlab
perf=${ALLREDUCE_PERF:-$root/build/bin/allreduce_perf}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CHORUS_TRANSPORT=${CHORUS_TRANSPORT:-tcp}

mkdir -p "$out"
"$netlab" up "$hosts" --rate "$rate"
trap '"$netlab" down' EXIT
subnet=$("$netlab" hosts | awk 'NR==1 {split($2, a, "."); print a[1] "." a[2] "." a[3] ".0/24"}')
host0=$("$netlab" hosts | awk 'NR==1 {print $2}')
hostfile=$out/hostfile
"$netlab" hosts | awk -v n="$per_host" '{print $1 " slots=" n}' >"$hostfile"

lab_mpirun() {
  local exports=()
  for v in $(env | grep -o '^CHORUS_[A-Z_]*'); do exports+=(-x "$v"); done
  mpirun --hostfile "$hostfile" -np $((hosts * per_host)) --map-by "${LAB_MAP:-slot}" \
    --mca plm_rsh_agent "$netlab" --mca plm_rsh_args rsh \
    --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" \
    --mca btl self,vader,tcp --mca pml ob1 --mca mpi_yield_when_idle 1 \
    -x CHORUS_STORE="tcp://$host0:$((20000 + RANDOM % 20000))" "${exports[@]}" "$@"
}

for run in $(seq "$runs"); do
  for algo in ${LAB_ALGOS:-auto ring}; do
    # Small sizes: many iterations; large: few (64 MiB takes ~0.5 s at 1 Gbit/s).
    if [ "${LAB_SMALL:-1}" != 0 ]; then
      lab_mpirun "$perf" -b 8 -e 64K -f 8 -n 200 -w 10 -c 1 -A "$algo" --mpi \
        --csv "$out/${algo}_small_$run.csv" >"$out/${algo}_small_$run.txt"
    fi
    if [ "${LAB_LARGE:-1}" != 0 ]; then
      lab_mpirun "$perf" -b 256K -e "$max" -f 4 -n 5 -w 1 -c 1 -A "$algo" --mpi \
        --csv "$out/${algo}_large_$run.csv" >"$out/${algo}_large_$run.txt"
    fi
  done
done
/usr/bin/python3 "$root/bench/lab_report.py" --hosts "$hosts" --rate "$rate" --plot "$out/busbw.png" "$out" |
  tee "$out/report.txt"
