#!/bin/bash
# Twenty-third pass (docs/performance.md). Run from the repository root
# after a Release build in ./build; report.py prints the tables from what
# it writes. Every figure is call_loops' (docs/perf/shm_pass15/call_loops.cpp):
# microseconds a call, the slowest rank's mean, the better of rounds 2-3.
#
# Steps 1, 4 and 5 compare this build's library with one of 129ae98 (BEFORE: a
# directory holding that build's libchorus.so.0.1, libchorus_mpi.so.0.1 and
# libchorus_pmpi.so). Steps 2-3 run this build against Open MPI alone.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=docs/perf/shm_pass23
out=${OUT:-$here}; LIB=$PWD/build/src
STEPS=${STEPS:-12345678}
mkdir -p "$out"
mpicxx -O2 -o /tmp/call_loops docs/perf/shm_pass15/call_loops.cpp

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

# 1. The nonblocking calls at 8 B, p = 2 and 4, before and after 7495829
#    (a call's state without a mutex of its own): Open MPI alone, 129ae98
#    and this build alternating, 5 runs.
if [[ $STEPS == *1* ]]; then
  : "${BEFORE:?BEFORE must name the library directory of a build of 129ae98}"
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for rep in 1 2 3 4 5; do
      launch ompi ompi $p $n 2 0,1,2,3,11,12,13
      launch before $BEFORE $p $n 2 0,1,2,3,11,12,13
      launch after $LIB $p $n 2 0,1,2,3,11,12,13
    done > $out/nonblocking_p${p}.csv
  done
fi

# 2. The calls that kept the 1 KiB threshold and might go to Chorus at every
#    size (MPI_Ibcast, MPI_Iallgather, MPI_Ialltoall, MPI_Allgatherv) at
#    p = 2 and 4, 8, 128 and 512 B, with CHORUS_MPI_MIN_BYTES=0 against Open
#    MPI alone, alternating, 5 runs.
if [[ $STEPS == *2* ]]; then
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for ints in 2 32 128; do
      for rep in 1 2 3 4 5; do
        launch ompi ompi $p $n $ints 0,3,12,18
        launch chorus $LIB $p $n $ints 0,3,12,18
      done > $out/candidates_p${p}_$((ints * 4))B.csv
    done
  done
fi

# 3. Every call at 8 B, p = 2, with CHORUS_MPI_MIN_BYTES=0 against Open MPI
#    alone: where the default threshold stands; 5 runs.
if [[ $STEPS == *3* ]]; then
  for rep in 1 2 3 4 5; do
    launch ompi ompi 2 30000 2 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18
    launch chorus $LIB 2 30000 2 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18
  done > $out/every_call_8B.csv
fi

# A two-rank program of this directory (SOURCE, no MPI: it forks its second
# rank, and the two meet at a TCP store on a free loopback port), built
# against this build, run 5 times with each library in turn (BEFORE's, then
# this build's); each output line prefixed with "before," or "after,".
before_after() {  # SOURCE ARGS...
  : "${BEFORE:?BEFORE must name the library directory of a build of 129ae98}"
  local source=$1 rep which dir port
  shift
  g++ -O2 -std=c++20 -Iinclude -Ibuild/include $here/$source -Lbuild/src -lchorus \
    -Wl,-rpath,$LIB -o /tmp/${source%.cpp}
  for rep in 1 2 3 4 5; do
    for which in before after; do
      dir=$LIB; [ $which = before ] && dir=$BEFORE
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      LD_LIBRARY_PATH=$dir timeout 300 /tmp/${source%.cpp} "$@" tcp://127.0.0.1:$port 2>/dev/null |
        sed "s/^/$which,/"
    done
  done
}

# 4. Chorus's engine alone (async_loop.cpp): 8-byte allgathers at p = 2,
#    blocking and async-then-waited in turn, 6 rounds of 100000; the
#    libraries of 129ae98 and this build alternating, 5 launches each;
#    lines: who,kind,us.
if [[ $STEPS == *4* ]]; then
  before_after async_loop.cpp 100000 | sed 's/ /,/' > $out/engine_alone.csv
fi

# 5. The first 64 MiB in-place AllReduce by halving_doubling at p = 2
#    without the host segment (its incoming buffer is scratch), before and
#    after a7d9cda (scratch populated when allocated), alternating, 5
#    launches each; lines: who,first ms,second ms.
if [[ $STEPS == *5* ]]; then
  CHORUS_SHM=0 CHORUS_ALGO=halving_doubling before_after first_call.cpp $((64 << 20)) \
    > $out/first_call.csv
fi

# 6. AllReduce at 16 and 64 MiB, p = 2, beside Open MPI alone in the same
#    launch (the twenty-second pass's step 5), 5 rounds of 6 calls; 5
#    launches.
if [[ $STEPS == *6* ]]; then
  mkdir -p $out/large
  for rep in 1 2 3 4 5; do
    mpirun -np 2 build/bin/allreduce_perf -b 16M -e 64M -f 4 -n 6 -w 3 --rounds 5 --mpi -X ucx \
      -c 0 --csv $out/large/allreduce_$rep.csv >/dev/null 2>&1
  done
fi

# 7. Every other collective beside Open MPI at 8 B (at p = 4 32 B for the
#    ones whose size is all p blocks), 1 MiB and 64 MiB, p = 2 and 4; 5
#    rounds a cell (Chorus and MPI in turn); 3 runs (the seventeenth pass's
#    step 3). Into $out/targets/.
if [[ $STEPS == *7* ]]; then
  mkdir -p $out/targets
  for rep in 1 2 3; do for p in 2 4; do for tool in allgather alltoall broadcast reduce reduce_scatter; do
    small=8; [ $p = 4 ] && [[ $tool == all* || $tool == reduce_scatter ]] && small=32
    for size in $small 1M 64M; do
      n=4000 w=500; [ $size = 1M ] && n=50 w=5; [ $size = 64M ] && n=4 w=3
      mpirun --oversubscribe -np $p build/bin/${tool}_perf -b $size -e $size -n $n -w $w --rounds 5 \
        --mpi -X ucx -c 0 --csv $out/targets/${tool}_${size}_p${p}_$rep.csv >/dev/null 2>&1
    done
  done; done; done
fi

# 8. AllReduce beside Open MPI (out of place and in place), every power of
#    two from 8 B to 64 MiB, p = 2 and 4, 5 rounds a cell; 3 runs (the
#    seventeenth pass's step 4). Into $out/targets/.
if [[ $STEPS == *8* ]]; then
  mkdir -p $out/targets
  for rep in 1 2 3; do for p in 2 4; do
    mpirun --oversubscribe -np $p build/bin/allreduce_perf -b 4 -e 64K -f 2 -n 400 -w 100 --rounds 5 \
      --mpi -X ucx -c 0 --csv $out/targets/allreduce_p${p}_small_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p build/bin/allreduce_perf -b 32K -e 64M -f 2 -n 4 -w 3 --rounds 5 \
      --mpi -X ucx -c 0 --csv $out/targets/allreduce_p${p}_large_$rep.csv >/dev/null 2>&1
  done; done
fi
