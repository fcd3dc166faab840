#!/bin/bash
# Fifteenth pass (docs/performance.md): run from the repository root after
# a Release build in ./build. BASE: the build directory of a Release build
# of the commit before the pass (6763732), for the before columns. Writes
# docs/perf/shm_pass15/; report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass15; NEW=$PWD/build; BASE=${BASE:-/tmp/base/build}
STEPS=${STEPS:-12}  # which steps below to run
mpicxx -O2 -o $out/call_loops $out/call_loops.cpp
preload() { echo -x LD_LIBRARY_PATH=$1/src -x LD_PRELOAD=$1/src/libchorus_pmpi.so; }

# 1. Every kind of call_loops.cpp at 8 B, p = 2: Open MPI alone, the
#    library before and after with CHORUS_MPI_MIN_BYTES=0, alternating, 5 runs.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3 4 5; do
  mpirun -np 2 $out/call_loops 30000 > $out/loops_mpi_$rep.csv 2>/dev/null
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun -np 2 $(preload $b) -x CHORUS_MPI_MIN_BYTES=0 $out/call_loops 30000 > $out/loops_${which}_$rep.csv 2>/dev/null
  done
done
fi

# 2. The nonblocking calls (kinds 0-3, 11-13) at p = 2 and 4, 8 B, 128 B
#    and 1 KiB: Open MPI alone and the library after with
#    CHORUS_MPI_MIN_BYTES=0, alternating, 3 runs (the default threshold).
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for p in 2 4; do for ints in 2 32 256; do
  n=30000; [ $p = 4 ] && n=5000
  mpirun --oversubscribe -np $p $out/call_loops $n $ints 0,1,2,3,11,12,13 > $out/nonblocking_p${p}_${ints}_mpi_$rep.csv 2>/dev/null
  mpirun --oversubscribe -np $p $(preload $NEW) -x CHORUS_MPI_MIN_BYTES=0 $out/call_loops $n $ints 0,1,2,3,11,12,13 \
    > $out/nonblocking_p${p}_${ints}_new_$rep.csv 2>/dev/null
done; done; done
fi

rm -f $out/call_loops
echo finished
