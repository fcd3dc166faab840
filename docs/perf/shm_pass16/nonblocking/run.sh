#!/bin/bash
# Sixteenth pass: the nonblocking calls that keep the 1 KiB threshold, on
# the final build (eb3ab41), at p = 2 and 4, 8 B, 128 B and 1 KiB: Open MPI
# alone and the library with CHORUS_MPI_MIN_BYTES=0, alternating, 3 runs
# (the fifteenth pass's step 2). Run from the repository root after a
# Release build in ./build; report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass16/nonblocking; NEW=$PWD/build
mpicxx -O2 -o $out/call_loops docs/perf/shm_pass15/call_loops.cpp
for rep in 1 2 3; do for p in 2 4; do for ints in 2 32 256; do
  n=30000; [ $p = 4 ] && n=5000
  mpirun --oversubscribe -np $p $out/call_loops $n $ints 0,1,3,11,12 > $out/p${p}_${ints}_mpi_$rep.csv 2>/dev/null
  mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$NEW/src -x LD_PRELOAD=$NEW/src/libchorus_pmpi.so -x CHORUS_MPI_MIN_BYTES=0 \
    $out/call_loops $n $ints 0,1,3,11,12 > $out/p${p}_${ints}_new_$rep.csv 2>/dev/null
done; done; done
rm -f $out/call_loops
echo finished
