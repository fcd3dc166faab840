#!/bin/bash
# Fourteenth pass (docs/performance.md): run from the repository root after
# a Release build in ./build. BASE: the build directory of a Release build
# of the commit before the pass (1864324), for the before columns (steps 1
# and 2 ran on da9f616, the digests' commit). Writes
# docs/perf/shm_pass14/; report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass14; NEW=$PWD/build; BASE=${BASE:-/tmp/base/build}
STEPS=${STEPS:-12}  # which steps below to run

# 1. Small reduce, broadcast and AllReduce beside Open MPI (its time
#    measured in the same launch), before and after, alternating, 5 runs.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for tool in reduce broadcast allreduce; do
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    n=20000; [ $p = 4 ] && n=10000
    mpirun --oversubscribe -np $p $b/bin/${tool}_perf -b 8 -e 128 -f 4 -n $n -w 1000 --mpi -X ucx -c 0 \
      --csv $out/${tool}_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done; done
fi

# 2. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2, before and
#    after, alternating, 3 runs.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for which in base new; do
  b=$NEW; [ $which = base ] && b=$BASE
  mpirun -np 2 $b/bin/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_${which}_$rep.txt 2>&1
done; done
fi

# 3. Every collective libchorus_pmpi takes over, with CHORUS_MPI_MIN_BYTES=0
#    (8-byte calls too), as a plain MPI program sees it
#    (mpi_collectives_bench): Open MPI alone, the library before and after,
#    alternating, 3 runs. BASE's src/ goes first in LD_LIBRARY_PATH:
#    libchorus_pmpi finds its libchorus by RUNPATH otherwise.
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_mpi_$rep.csv >/dev/null 2>&1
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src -x LD_PRELOAD=$b/src/libchorus_pmpi.so -x CHORUS_MPI_MIN_BYTES=0 \
      $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done
fi

# 4. call_loops.cpp (a plain MPI program: each kind of call in a loop,
#    nonblocking ones waited at once; the fifteenth pass's, whose kinds
#    0-13 are this pass's), 3 alternating runs:
#    a. p = 2, 8 B, kinds 0-13: Open MPI alone, the library before and
#       after with CHORUS_MPI_MIN_BYTES=0 (the worker woken once);
#    b. p = 2 and 4, 8 and 128 B, MPI_Allreduce, _Allgather, _Alltoall and
#       _Reduce_scatter_block: Open MPI alone, and the library after with
#       its default settings (which send them to Chorus at every size).
if [[ $STEPS == *4* ]]; then
mpicxx -O2 -o $out/call_loops docs/perf/shm_pass15/call_loops.cpp
every_kind=0,1,2,3,4,5,6,7,8,9,10,11,12,13
preload() { echo -x LD_LIBRARY_PATH=$1/src -x LD_PRELOAD=$1/src/libchorus_pmpi.so; }
for rep in 1 2 3; do
  mpirun -np 2 $out/call_loops 30000 2 $every_kind > $out/loops_mpi_$rep.csv 2>/dev/null
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun -np 2 $(preload $b) -x CHORUS_MPI_MIN_BYTES=0 $out/call_loops 30000 2 $every_kind > $out/loops_${which}_$rep.csv 2>/dev/null
  done
  for p in 2 4; do for ints in 2 32; do
    n=30000; [ $p = 4 ] && n=3000
    mpirun --oversubscribe -np $p $out/call_loops $n $ints 6,7,8,9 > $out/exchange_p${p}_${ints}_mpi_$rep.csv 2>/dev/null
    mpirun --oversubscribe -np $p $(preload $NEW) $out/call_loops $n $ints 6,7,8,9 > $out/exchange_p${p}_${ints}_new_$rep.csv 2>/dev/null
  done; done
done
rm -f $out/call_loops
fi

echo finished
