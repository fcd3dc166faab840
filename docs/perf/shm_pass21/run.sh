#!/bin/bash
# Twenty-first pass (docs/performance.md). Run from the repository root
# after a Release build in ./build; report.py summarizes what it writes.
#
# Scratch buffers came to start on a page boundary (1e74400). Both steps
# run that build ($PWD/build/bin) and one of the commit before (BEFORE: a
# bin/ directory of a build of 2783767) in turn.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=docs/perf/shm_pass21
out=${OUT:-$here}; B=$PWD/build/bin
STEPS=${STEPS:-123}
: "${BEFORE:?BEFORE must name the bin/ directory of a build of 2783767}"
mkdir -p "$out"

# 1. The cells that were below 0.95 in place in the twentieth pass: the
#    ring at p = 2, 64 KiB-4 MiB, and the tree at p = 4, 64 KiB-1 MiB,
#    forced; 5 rounds a cell; the two builds alternating, 3 runs.
if [[ $STEPS == *1* ]]; then
mkdir -p $out/cells
for rep in 1 2 3; do for which in before after; do
  bin=$B; [ $which = before ] && bin=$BEFORE
  $bin/allreduce_perf --np 2 -A ring -b 64K -e 4M -f 2 -n 100 -w 10 --rounds 5 -c 0 \
    --csv $out/cells/${which}_ring_p2_$rep.csv >/dev/null 2>&1
  $bin/allreduce_perf --np 4 -A tree -b 64K -e 1M -f 4 -n 30 -w 5 --rounds 5 -c 0 \
    --csv $out/cells/${which}_tree_p4_$rep.csv >/dev/null 2>&1
done; done
fi

# 2. Every algorithm forced and the automatic choice, in place against out
#    of place, 16 KiB-64 MiB, p = 2 and 4 (the twentieth pass's step 7
#    command); the two builds alternating, 3 runs.
if [[ $STEPS == *2* ]]; then
mkdir -p $out/before $out/after
for rep in 1 2 3; do for p in 2 4; do for which in before after; do
  bin=$B; [ $which = before ] && bin=$BEFORE
  $bin/allreduce_perf --np $p -A all -b 16K -e 64M -f 4 -n 10 -w 3 --rounds 5 -c 0 \
    --csv $out/$which/inplace_p${p}_$rep.csv >/dev/null 2>&1
done; done; done
fi

# 3. The cells below 0.95 in step 2 (either build; at -n 10 a cell of a
#    few microseconds is the scheduler's), with more calls: p = 2 the ring
#    at 64 KiB and the tree at 16 KiB; p = 4 one-shot (shm and direct) at
#    16 KiB, the hierarchical AllReduce at 16 MiB; the two builds
#    alternating, 3 runs.
if [[ $STEPS == *3* ]]; then
mkdir -p $out/again
for rep in 1 2 3; do for which in before after; do
  bin=$B; [ $which = before ] && bin=$BEFORE
  run() { $bin/allreduce_perf "$@" --rounds 5 -c 0 >/dev/null 2>&1; }
  run --np 2 -A ring -b 64K -e 64K -n 300 -w 30 --csv $out/again/${which}_ring_p2_$rep.csv
  run --np 2 -A tree -b 16K -e 16K -n 1000 -w 100 --csv $out/again/${which}_tree_p2_$rep.csv
  for algo in shm_one_shot direct_one_shot; do
    run --np 4 -A $algo -b 16K -e 16K -n 1000 -w 100 --csv $out/again/${which}_${algo}_p4_$rep.csv
  done
  run --np 4 -A hierarchical -b 16M -e 16M -n 10 -w 3 --csv $out/again/${which}_hierarchical_p4_$rep.csv
done; done
fi
