#!/bin/bash
# Twelfth pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the build directory of a Release build of
# the commit before the pass (80ee3fa), for the before/after columns (its
# src/, whose libraries LD_LIBRARY_PATH puts first: libchorus_pmpi finds
# its libchorus by RUNPATH otherwise). Writes docs/perf/shm_pass12/;
# report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass12; NEW=$PWD/build; BASE=${BASE:-/tmp/wt80/build}
STEPS=${STEPS:-12}  # which steps below to run

# 1. Every collective libchorus_pmpi takes over, as a plain MPI program sees
#    it (mpi_collectives_bench: blocks of 8 B-1 MiB), with the library's
#    default settings: Open MPI alone, the library before and after (the
#    v-forms and reduce_scatter_v through the host segment, gather and
#    scatter through it up to 64 KiB blocks), alternating.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_mpi_$rep.csv >/dev/null 2>&1
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src -x LD_PRELOAD=$b/src/libchorus_pmpi.so \
      $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done
fi

# 2. Open MPI alone: 8-byte MPI_Ibcast and MPI_Ireduce waited at once, in
#    rounds of 2000 (rooted_nonblocking.cpp): the first round runs several
#    times slower than the later ones, with no Chorus in the process.
if [[ $STEPS == *2* ]]; then
mpicxx -O2 $out/rooted_nonblocking.cpp -o /tmp/rooted_nonblocking
for rep in 1 2 3; do echo "run $rep"; mpirun -np 2 /tmp/rooted_nonblocking; done > $out/rooted_nonblocking.txt
fi

echo finished
