#!/bin/bash
# Sixteenth pass (docs/performance.md): every target of issue 17 measured
# again on one build, in one series. Run from the repository root after a
# Release build in ./build. BASE: the build directory of a Release build of
# the commit before the pass (ccd0f68), for step 7's before column. Writes
# docs/perf/shm_pass16/; report.py summarizes it. (Steps 1, 2, 5 and 6 ran
# on 4e4be55, again after the ring change, the first run of 1, 2 and 6 is
# in ring64/; steps 3, 4 and 7 on 84c33f0. ring_depth/ has its own run.sh.)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass16; B=$PWD/build/bin; NEW=$PWD/build; BASE=${BASE:-/tmp/base/build}
STEPS=${STEPS:-1234567}  # which steps below to run
mpicxx -O2 -o $out/call_loops docs/perf/shm_pass15/call_loops.cpp
preload() { echo -x LD_LIBRARY_PATH=$1/src -x LD_PRELOAD=$1/src/libchorus_pmpi.so; }

# 1. AllReduce, every power of two from 8 B to 64 MiB, p = 2 and 4, Open
#    MPI timed in the same launch out of place and in place; 3 runs. Two
#    launches a run: up to 64 KiB 2000 calls a size (20 left a tenth of a
#    microsecond to one interrupt), from 64 KiB 20 (report.py takes 64 KiB
#    from the first); each from a size before the first reported (a run's
#    first size pays start-up effects on both sides).
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 4 -e 64K -f 2 -n 2000 -w 200 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_small_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 32K -e 64M -f 2 -n 20 -w 3 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_large_$rep.csv >/dev/null 2>&1
done; done
fi

# 2. Every other collective at 8 B (per rank; at p = 4 32 B for the ones
#    whose size is all p blocks), 1 MiB and 64 MiB, p = 2 and 4; 3 runs.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for p in 2 4; do for tool in allgather alltoall broadcast reduce reduce_scatter; do
  small=8; [ $p = 4 ] && [[ $tool == all* || $tool == reduce_scatter ]] && small=32
  for size in $small 1M 64M; do
    # (At 64 MiB one warm-up call left the first timed calls of allgather
    # 1.8x slower: three.)
    n=20000 w=1000; [ $size = 1M ] && n=50 w=5; [ $size = 64M ] && n=10 w=3
    mpirun --oversubscribe -np $p $B/${tool}_perf -b $size -e $size -n $n -w $w --mpi -X ucx -c 0 \
      --csv $out/${tool}_${size}_p${p}_$rep.csv >/dev/null 2>&1
  done
done; done; done
fi

# 3. In place against out of place, every AllReduce algorithm forced and
#    the automatic choice, 1-64 MiB, p = 2 and 4; 3 runs.
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 1M -e 64M -f 4 -n 10 -w 3 -c 0 --csv $out/inplace_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 4. The automatic choice against every forced algorithm, 10 launches (5 at
#    p = 2, 5 at p = 4) at 2, 8 and 32 MiB.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do
  $B/allreduce_perf --np $p -b 2M -e 32M -f 4 -A all -n 8 -w 2 -c 0 --csv $out/choice_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 5. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2; 3 runs.
if [[ $STEPS == *5* ]]; then
for rep in 1 2 3; do
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_$rep.txt 2>&1
done
fi

# 6. Every kind of call_loops.cpp at 8 B, p = 2, as an MPI program with the
#    preload: Open MPI alone, the library with its defaults, and with
#    CHORUS_MPI_MIN_BYTES=0; alternating, 3 runs.
if [[ $STEPS == *6* ]]; then
for rep in 1 2 3; do
  mpirun -np 2 $out/call_loops 30000 > $out/loops_mpi_$rep.csv 2>/dev/null
  mpirun -np 2 $(preload $NEW) $out/call_loops 30000 > $out/loops_default_$rep.csv 2>/dev/null
  mpirun -np 2 $(preload $NEW) -x CHORUS_MPI_MIN_BYTES=0 $out/call_loops 30000 > $out/loops_zero_$rep.csv 2>/dev/null
done
fi

# 7. MPI_Gatherv and MPI_Scatterv of 8 B (kinds 16-17, taken over at every
#    size by default) before and after this pass, and Open MPI alone,
#    alternating, 5 runs.
if [[ $STEPS == *7* ]]; then
for rep in 1 2 3 4 5; do
  mpirun -np 2 $out/call_loops 30000 2 16,17 > $out/vforms_mpi_$rep.csv 2>/dev/null
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun -np 2 $(preload $b) $out/call_loops 30000 2 16,17 > $out/vforms_${which}_$rep.csv 2>/dev/null
  done
done
fi

rm -f $out/call_loops
echo finished
