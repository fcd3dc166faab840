#!/bin/bash
# Nineteenth pass (docs/performance.md): issue 17's cells still open after
# the eighteenth pass measured again on the same code (87719d5), and the
# rooted MPI calls through libchorus_pmpi beside Open MPI alone. Run from
# the repository root after a Release build in ./build.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=${OUT:-docs/perf/shm_pass19}; B=$PWD/build/bin; L=$PWD/build/src
STEPS=${STEPS:-123}

# 1. AllReduce p = 2 beside Open MPI, 4 B-64 KiB (the eighteenth pass's
#    step 4, its first launch); 3 runs.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3; do
  mpirun -np 2 $B/allreduce_perf -b 4 -e 64K -f 2 -n 400 -w 100 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p2_small_$rep.csv >/dev/null 2>&1
done
fi

# 2. Broadcast 8 B beside Open MPI, p = 2 and 4 (the seventeenth pass's
#    step 3); 3 runs.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/broadcast_perf -b 8 -e 8 -n 4000 -w 500 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/broadcast_8_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 3. The rooted blocking calls at 8 B, p = 2, through libchorus_pmpi with
#    CHORUS_MPI_MIN_BYTES=0 and Open MPI alone, alternating; 5 runs
#    (call_loops: the fifteenth pass's program).
if [[ $STEPS == *3* ]]; then
mpicxx -O2 -o /tmp/call_loops docs/perf/shm_pass15/call_loops.cpp
for rep in 1 2 3 4 5; do
  mpirun -np 2 /tmp/call_loops 30000 2 4,5,14,15,16,17 > $out/loops_mpi_$rep.csv 2>/dev/null
  mpirun -np 2 -x LD_LIBRARY_PATH=$L -x LD_PRELOAD=$L/libchorus_pmpi.so -x CHORUS_MPI_MIN_BYTES=0 \
    /tmp/call_loops 30000 2 4,5,14,15,16,17 > $out/loops_chorus_$rep.csv 2>/dev/null
done
fi
