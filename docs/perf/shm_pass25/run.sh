#!/bin/bash
# Twenty-fifth pass (docs/performance.md): the small slots. Run from the
# repository root after a Release build in ./build; report.py prints the
# tables from what it writes. call_loops (docs/perf/shm_pass15/call_loops.cpp)
# through the preload with CHORUS_MPI_MIN_BYTES=0: microseconds a call, the
# slowest rank's mean, the better of rounds 2-3.
#
# Open MPI alone, a build before the small slots (BEFORE: a directory
# holding that build's libchorus.so.0.1, libchorus_mpi.so.0.1 and
# libchorus_pmpi.so) and this build, alternating, 5 runs.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${BEFORE:?BEFORE must name the library directory of a build before the small slots}"
here=docs/perf/shm_pass25
out=${OUT:-$here}; LIB=$PWD/build/src
STEPS=${STEPS:-12}
mkdir -p "$out"
mpicxx -O2 -o /tmp/call_loops docs/perf/shm_pass15/call_loops.cpp

launch() {  # name dir p N INTS KINDS
  local name=$1 dir=$2 p=$3
  shift 3
  if [ "$dir" = ompi ]; then
    mpirun -np $p --oversubscribe /tmp/call_loops "$@"
  else
    mpirun -np $p --oversubscribe -x LD_LIBRARY_PATH=$dir -x LD_PRELOAD=$dir/libchorus_pmpi.so \
      -x CHORUS_MPI_MIN_BYTES=0 /tmp/call_loops "$@"
  fi | sed "s/^/$name,/"
}

series() {  # file p N INTS KINDS
  local file=$1
  shift
  for rep in 1 2 3 4 5; do
    launch ompi ompi "$@"
    launch before $BEFORE "$@"
    launch after $LIB "$@"
  done > $out/$file
}

# 1. The rooted calls (MPI_Ibcast, MPI_Bcast, MPI_Reduce, MPI_Gather,
#    MPI_Scatter, MPI_Gatherv, MPI_Scatterv) at p = 4 and 2, blocks of 128
#    B (a scatter's root writes 512), 512 B, 1 KiB and 4 KiB.
if [[ $STEPS == *1* ]]; then
  for p in 4 2; do
    n=30000; [ $p = 4 ] && n=5000
    for ints in 32 128 256 1024; do
      series rooted_p${p}_$((ints * 4))B.csv $p $n $ints 0,4,5,14,15,16,17
    done
  done
fi

# 2. AllReduce, blocking and nonblocking (MPI_Allreduce, MPI_Iallreduce),
#    and allgather at p = 2 and 4, 512 B to 4 KiB: the calls whose data
#    moved from the large slots to the small ones without running ahead.
if [[ $STEPS == *2* ]]; then
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for ints in 128 256 1024; do
      series allreduce_p${p}_$((ints * 4))B.csv $p $n $ints 2,6,7
    done
  done
fi
