#!/bin/bash
# Sixteenth pass (docs/performance.md): the host segment's ring depth.
# RING64, RING128, RING256: build directories of Release builds of
# 84c33f0 (rings of 64 calls), the same with kRingDepth = 128 in
# src/shm/segment.hpp, and 4e4be55 (256). Small broadcast, reduce and
# AllReduce beside Open MPI at p = 2 and 4, and the blocking calls of
# call_loops through libchorus_pmpi at p = 2 with CHORUS_MPI_MIN_BYTES=0;
# alternating, 3 runs. Writes into this directory; report.py reads it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass16/ring_depth
declare -A build=([cur]=${RING64:-/tmp/cur/build} [ring128]=${RING128:-/tmp/ring128/build} [ring256]=${RING256:-/tmp/ring256/build})
mpicxx -O2 -o $out/call_loops docs/perf/shm_pass15/call_loops.cpp
for rep in 1 2 3; do for p in 2 4; do for t in broadcast reduce allreduce; do for w in cur ring128 ring256; do
  n=20000; [ $p = 4 ] && n=10000
  mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=${build[$w]}/src ${build[$w]}/bin/${t}_perf -b 8 -e 128 -f 16 -n $n -w 1000 --mpi -X ucx -c 0 \
    --csv $out/${t}_p${p}_${w}_$rep.csv >/dev/null 2>&1
done; done; done; done
for rep in 1 2 3; do for w in cur ring128 ring256; do
  mpirun -np 2 -x LD_LIBRARY_PATH=${build[$w]}/src -x LD_PRELOAD=${build[$w]}/src/libchorus_pmpi.so -x CHORUS_MPI_MIN_BYTES=0 \
    $out/call_loops 30000 2 4,5,6,14,15 > $out/loops_${w}_$rep.csv 2>/dev/null
done; done
rm -f $out/call_loops
echo finished
