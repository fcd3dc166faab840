#!/bin/bash
# Twentieth pass (docs/performance.md). Run from the repository root after
# a Release build in ./build; report.py summarizes what it writes.
#
# Steps 1-4 measured issue 17's open cells on 8c1b891, with a sign of the
# machine's state before each launch, and a layout with a flag in every
# cache line outside the library (OUT=$here/before). Then one-shot
# AllReduce came to reduce each rank's own input from where it is
# (8e4535e). Steps 5-6 ran on a build that also took one-shot up to 512
# KiB at p = 2 and 128 KiB at p = 3 (OUT=$here/first; BEFORE: a bin/
# directory of a build of 8c1b891), steps 2-3 on the same build
# (OUT=$here/after; the same code as the last below 64 KiB). On the last
# (6e967fe: one-shot up to 64 KiB at every p) ran steps 5, 7, 8 and 9
# (OUT=$here) and step 6 again (OUT=$here/second).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=docs/perf/shm_pass20
out=${OUT:-$here}; B=$PWD/build/bin
STEPS=${STEPS:-123456789}
mkdir -p "$out"
g++ -O2 -march=native -std=c++20 -o /tmp/line_flags $here/line_flags.cpp

# 1. AllReduce p = 2 beside Open MPI, 4 B-64 KiB: the nineteenth pass's
#    step 1 (3 runs), run by its script.
if [[ $STEPS == *1* ]]; then OUT=$out STEPS=1 bash docs/perf/shm_pass19/run.sh; fi

# 2. The 256-byte cell by the launches that found it at 0.91 in the
#    nineteenth pass: 10, bound to cores (mpirun's default) and unbound in
#    turn, each after line_flags' 8-byte exchange (its header time: what one
#    call's round trip between the two cores costs just then).
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3 4 5; do for bind in core none; do
  /tmp/line_flags 8 100000 3 > $out/state_${rep}_$bind.txt
  mpirun --bind-to $bind -np 2 $B/allreduce_perf -b 128 -e 512 -f 2 -n 2000 -w 200 --rounds 5 --mpi \
    -X ucx -c 0 --csv $out/allreduce_256_${rep}_$bind.csv >/dev/null 2>&1
done; done
fi

# 3. The rooted blocking calls at 8 B, p = 2, through libchorus_pmpi with
#    CHORUS_MPI_MIN_BYTES=0 and Open MPI alone, alternating: the nineteenth
#    pass's step 3 (5 runs), run by its script.
if [[ $STEPS == *3* ]]; then OUT=$out STEPS=3 bash docs/perf/shm_pass19/run.sh; fi

# 4. A flag in every line against the segment's header, outside the
#    library (line_flags.cpp); 3 launches of 7 alternating runs a size.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3; do for bytes in 8 64 128 256 448; do
  /tmp/line_flags $bytes 200000 7
done; done > $out/line_flags.txt
fi

# 5. Before and after, p = 2 beside Open MPI, 4 B-1 MiB (step 1's command
#    to 1 MiB), the two builds alternating; 3 runs.
if [[ $STEPS == *5* && -n $BEFORE ]]; then
mkdir -p $out/before_after
for rep in 1 2 3; do for which in before after; do
  bin=$B; [ $which = before ] && bin=$BEFORE
  mpirun -np 2 $bin/allreduce_perf -b 4 -e 1M -f 2 -n 400 -w 20 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/before_after/${which}_$rep.csv >/dev/null 2>&1
done; done
fi

# 6. One-shot against two-shot, forced, around the edge (the numbers in
#    src/coll/registry.cpp): p = 2 64 KiB-1 MiB, p = 3 and 4 32-256 KiB;
#    5 rounds a cell; the two alternating, 3 runs.
if [[ $STEPS == *6* ]]; then
mkdir -p $out/edge
for rep in 1 2 3; do for p in 2 3 4; do for algo in shm_one_shot shm_two_shot; do
  range="-b 32K -e 256K"; [ $p = 2 ] && range="-b 64K -e 1M"
  $B/allreduce_perf --np $p -A $algo $range -f 2 -n 200 -w 20 --rounds 5 -c 0 \
    --csv $out/edge/${algo}_p${p}_$rep.csv >/dev/null 2>&1
done; done; done
fi

# 7. Issue 17's AllReduce targets again (the eighteenth pass's steps 1, 4
#    and 8): in place against out of place, every algorithm forced and the
#    automatic choice, 16 KiB-64 MiB (where one-shot now runs, and beyond);
#    beside Open MPI at every power of two, p = 2 and 4; the tail. 3 runs.
if [[ $STEPS == *7* ]]; then
mkdir -p $out/targets
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 16K -e 64M -f 4 -n 10 -w 3 --rounds 5 -c 0 \
    --csv $out/targets/inplace_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 4 -e 64K -f 2 -n 400 -w 100 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/targets/allreduce_p${p}_small_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 32K -e 64M -f 2 -n 4 -w 3 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/targets/allreduce_p${p}_large_$rep.csv >/dev/null 2>&1
done
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/targets/tail_$rep.txt 2>&1
done
fi

# 8. The automatic choice against every forced algorithm where it changed
#    (16 KiB-1 MiB at p = 2; p = 4 for comparison): 10 launches each, 3
#    rounds of 20 calls a cell.
if [[ $STEPS == *8* ]]; then
mkdir -p $out/choice
for rep in 01 02 03 04 05 06 07 08 09 10; do for p in 2 4; do
  $B/allreduce_perf --np $p -b 16K -e 1M -f 4 -A all -n 20 -w 3 --rounds 3 -c 0 \
    --csv $out/choice/choice_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 9. 16 MiB at p = 2 beside Open MPI alone (step 7's cell that moved), 5
#    rounds of 6 calls; 5 runs.
if [[ $STEPS == *9* ]]; then
mkdir -p $out/16mib
for rep in 1 2 3 4 5; do
  mpirun -np 2 $B/allreduce_perf -b 16M -e 16M -n 6 -w 3 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/16mib/allreduce_16m_$rep.csv >/dev/null 2>&1
done
fi
