#!/bin/bash
# Thirteenth pass (docs/performance.md): run from the repository root after
# a Release build in ./build. BASE: the build directory of a Release build
# of the commit before the pass (1a25376), for the before columns (its src/
# goes first in LD_LIBRARY_PATH: libchorus_pmpi finds its libchorus by
# RUNPATH otherwise). Writes docs/perf/shm_pass13/; report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass13; NEW=$PWD/build; BASE=${BASE:-/tmp/base/build}
STEPS=${STEPS:-12}  # which steps below to run

# 1. Every collective libchorus_pmpi takes over, as a plain MPI program sees
#    it (mpi_collectives_bench; nonblocking calls timed with their
#    MPI_Wait): Open MPI alone, the library before and after with its
#    default settings, and before and after with CHORUS_MPI_MIN_BYTES=1024
#    (the nonblocking collectives taken over from 1 KiB too), alternating.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do
  mpirun --oversubscribe -np $p $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_mpi_$rep.csv >/dev/null 2>&1
  for which in base new base1k new1k; do
    b=$NEW; [[ $which == base* ]] && b=$BASE
    min=(); [[ $which == *1k ]] && min=(-x CHORUS_MPI_MIN_BYTES=1024)
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src -x LD_PRELOAD=$b/src/libchorus_pmpi.so "${min[@]}" \
      $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done
fi

# 2. Chorus's own async call waited at once (allreduce_perf --async,
#    self-launched), before and after, alternating: Work::wait() returns
#    without a lock or a clock read when the call has ended.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for which in base new; do
  b=$NEW; [ $which = base ] && b=$BASE
  $b/bin/allreduce_perf --np $p -b 8 -e 1K -f 128 -n 5000 -w 200 --async -c 0 \
    --csv $out/async_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done
fi

echo finished
