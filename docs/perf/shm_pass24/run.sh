#!/bin/bash
# Twenty-fourth pass (docs/performance.md). Run from the repository root
# after a Release build in ./build; report.py prints the tables from what
# it writes. Steps 1-2 are call_loops' (docs/perf/shm_pass15/call_loops.cpp):
# microseconds a call, the slowest rank's mean, the better of rounds 2-3.
#
# Steps 1 and 3 compare this build's library with one of 5cdf827 (BEFORE: a
# directory holding that build's libchorus.so.0.1, libchorus_mpi.so.0.1 and
# libchorus_pmpi.so). Step 2 runs this build against Open MPI alone.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=docs/perf/shm_pass24
out=${OUT:-$here}; LIB=$PWD/build/src
STEPS=${STEPS:-1234}
mkdir -p "$out"
mpicxx -O2 -o /tmp/call_loops docs/perf/shm_pass15/call_loops.cpp
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One launch: who (ompi, or a library directory) at p ranks, N calls a
# round of INTS ints a block, KINDS; each line prefixed with `name`.
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

# 1. The nonblocking calls at 8 B, p = 2 and 4, before and after 55af892
#    and ef90674 (the hand-off slot, the state not zeroed): Open MPI
#    alone, 5cdf827 and this build alternating, 5 runs.
if [[ $STEPS == *1* ]]; then
  : "${BEFORE:?BEFORE must name the library directory of a build of 5cdf827}"
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for rep in 1 2 3 4 5; do
      launch ompi ompi $p $n 2 0,1,2,3,11,12,13
      launch before $BEFORE $p $n 2 0,1,2,3,11,12,13
      launch after $LIB $p $n 2 0,1,2,3,11,12,13
    done > $out/nonblocking_p${p}.csv
  done
fi

# 2. The calls that kept the 1 KiB threshold (MPI_Ibcast, MPI_Iallgather,
#    MPI_Ialltoall, MPI_Allgatherv, and the rooted blocking ones:
#    MPI_Bcast, MPI_Reduce, MPI_Gather, MPI_Scatter) at p = 2 and 4, 8, 128
#    and 512 B, CHORUS_MPI_MIN_BYTES=0 against Open MPI alone, alternating,
#    5 runs.
if [[ $STEPS == *2* ]]; then
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for ints in 2 32 128; do
      for rep in 1 2 3 4 5; do
        launch ompi ompi $p $n $ints 0,3,12,18,4,5,14,15
        launch chorus $LIB $p $n $ints 0,3,12,18,4,5,14,15
      done > $out/candidates_p${p}_$((ints * 4))B.csv
    done
  done
fi

# 3. The engine alone (async_loop.cpp): 8-byte allgathers made async and
#    waited for at once, p = 1 and p = 2 (bound to a core each), 6 rounds
#    of N; 5cdf827's library and this build's alternating, 5 launches each.
#    Lines: who,p,kind,time (ns at p = 1, us at p = 2).
if [[ $STEPS == *3* ]]; then
  : "${BEFORE:?BEFORE must name the library directory of a build of 5cdf827}"
  g++ -O2 -std=c++20 -Iinclude -Ibuild/include $here/async_loop.cpp -Lbuild/src -lchorus \
    -Wl,-rpath,$LIB -o /tmp/async_loop24
  for p in 1 2; do
    n=1000000; [ $p = 2 ] && n=200000
    for rep in 1 2 3 4 5; do
      for which in before after; do
        dir=$LIB; [ $which = before ] && dir=$BEFORE
        LD_LIBRARY_PATH=$dir timeout 300 /tmp/async_loop24 $n $p tcp://127.0.0.1:$(free_port) 2>/dev/null |
          sed "s/^/$which,$p,/"
      done
    done
  done > $out/engine_alone.csv
fi

# 4. Alltoall at 1 MiB beside Open MPI in the same launch (5 rounds of 50
#    calls, Chorus and MPI in turn), p = 2 and 4, 7 launches each: issue
#    17's one cell under 1.0 in the twenty-third pass. Into alltoall_1M/.
if [[ $STEPS == *4* ]]; then
  mkdir -p $out/alltoall_1M
  for rep in 1 2 3 4 5 6 7; do for p in 2 4; do
    mpirun --oversubscribe -np $p build/bin/alltoall_perf -b 1M -e 1M -n 50 -w 5 --rounds 5 --mpi -X ucx \
      -c 0 --csv $out/alltoall_1M/a2a_p${p}_$rep.csv >/dev/null 2>&1
  done; done
fi
