#!/bin/bash
# Tenth pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the build/ of a Release build of the
# commit before the pass (028c3d2), for the before/after rows (its bin/
# and src/libchorus_pmpi.so). Writes docs/perf/shm_pass10/; report.py
# summarizes it. Steps 1-3 ran on 1085f6b (in place by turns, the probe),
# steps 4-5 on df99f92 (the biased run lock too).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass10; B=./build/bin; BASE=${BASE:-/tmp/basesrc/build}
L=$PWD/build/src/libchorus_pmpi.so; LBASE=$BASE/src/libchorus_pmpi.so
STEPS=${STEPS:-12345}  # which steps below to run

# 1. In place against out of place, every AllReduce algorithm (-A all runs
#    each in turn, then auto), with and without --rewrite, before and after
#    (the parts summed taking turns by call), alternating. -w 20, not the
#    ninth pass's 3: without the probe's variant timing, a communicator's
#    first few milliseconds of messages over UCX run slow here (a 256-byte
#    ring call 55 us over its first 20 calls, 4-6 us after), which -w 3
#    left in the first cell measured (64 KiB, ring, out of place).
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3; do for p in 2 4; do for rewrite in "" --rewrite; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE/bin
  kind=all; [ -n "$rewrite" ] && kind=all_rewrite
  $bin/allreduce_perf --np $p -A all -b 64K -e 16M -f 4 -n 20 -w 20 -c 0 $rewrite --csv $out/${kind}_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done; done
fi

# 2. Start-up: a whole one-call run (the communicator's creation and its
#    cost model's probe), seconds, before and after, alternating.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for p in 2 3 4; do for x in tcp ucx; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE/bin
  /usr/bin/time -f "$which $p $x %e" -a -o $out/startup.txt \
    $bin/allreduce_perf --np $p -X $x -b 8 -e 8 -n 1 -w 0 -c 0 >/dev/null 2>&1
done; done; done; done
fi

# 3. The cells of step 1 above 1.05 after, again: 5 launches of more calls,
#    each algorithm alone at its p (after only).
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3 4 5; do
  $B/allreduce_perf --np 2 -A direct -b 4M -e 16M -f 4 -n 30 -w 10 -c 0 --csv $out/again_direct_p2_$rep.csv >/dev/null 2>&1
  $B/allreduce_perf --np 2 -A ring -b 256K -e 1M -f 4 -n 50 -w 20 -c 0 --csv $out/again_ring_p2_$rep.csv >/dev/null 2>&1
  $B/allreduce_perf --np 2 -A ring -b 256K -e 1M -f 4 -n 50 -w 20 -c 0 --rewrite --csv $out/again_ring_rewrite_p2_$rep.csv >/dev/null 2>&1
  for a in ring tree shm; do
    $B/allreduce_perf --np 4 -A $a -b 1M -e 1M -n 50 -w 20 -c 0 --csv $out/again_${a}_p4_$rep.csv >/dev/null 2>&1
  done
done
fi

# 4. Small calls beside Open MPI (ob1 + vader), before and after (the run
#    lock biased to its first thread), alternating: AllReduce, broadcast and
#    reduce at 8-128 B, p = 2 and 4.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for t in allreduce broadcast reduce; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE/bin
  mpirun --oversubscribe -np $p $bin/${t}_perf -b 8 -e 128 -f 4 -n 20000 -w 1000 --mpi -X ucx --csv $out/mpi_${t}_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done; done
fi

# 5. Through libchorus_pmpi (CHORUS_MPI_MIN_BYTES=0, every call on Chorus):
#    MPI alone, the library before and after, alternating; the mpi_time
#    column, at the sizes below the default threshold (1 KiB).
if [[ $STEPS == *5* ]]; then
for rep in 1 2 3; do for p in 2 4; do for t in allreduce broadcast reduce; do
  args="-b 8 -e 512 -f 4 -n 5000 -w 500 --mpi -X ucx -c 0"
  mpirun --oversubscribe -np $p $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_mpi_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p -x LD_PRELOAD=$LBASE -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_base_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p -x LD_PRELOAD=$L -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_new_$rep.csv >/dev/null 2>&1
done; done; done
fi

echo finished
