#!/bin/bash
# Twenty-second pass (docs/performance.md). Run from the repository root
# after a Release build in ./build; report.py prints the tables from what
# it writes. Every figure is call_loops' (docs/perf/shm_pass15/call_loops.cpp):
# microseconds a call, the slowest rank's mean, the better of rounds 2-3.
#
# Step 1 compares the library of this build with one of a946461 (BEFORE: a
# directory holding that build's libchorus.so.0.1, libchorus_mpi.so.0.1 and
# libchorus_pmpi.so). Steps 2-4 run this build against Open MPI alone.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=docs/perf/shm_pass22
out=${OUT:-$here}; LIB=$PWD/build/src
STEPS=${STEPS:-1234567}
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

# KINDS at p = 2 and 4, 8, 128 and 512 B, Open MPI alone and this build
# alternating, 5 runs; into $out/NAME_p<p>_<bytes>B.csv.
by_size() {  # KINDS NAME
  local p ints rep n
  for p in 2 4; do
    n=30000; [ $p = 4 ] && n=5000
    for ints in 2 32 128; do
      for rep in 1 2 3 4 5; do
        launch ompi ompi $p $n $ints $1
        launch chorus $LIB $p $n $ints $1
      done > $out/$2_p${p}_$((ints * 4))B.csv
    done
  done
}

# 1. The v-forms' roots before and after db4d176 (their layouts without a
#    use count): MPI_Gatherv and MPI_Scatterv of 8 B at p = 2, Open MPI
#    alone, a946461 and this build alternating, 7 runs.
if [[ $STEPS == *1* ]]; then
  : "${BEFORE:?BEFORE must name the library directory of a build of a946461}"
  for rep in 1 2 3 4 5 6 7; do
    launch ompi ompi 2 30000 2 16,17
    launch before $BEFORE 2 30000 2 16,17
    launch after $LIB 2 30000 2 16,17
  done > $out/vforms.csv
fi

# 2. The barriers and broadcasts at p = 2 and 4, 8, 128 and 512 B, with
#    CHORUS_MPI_MIN_BYTES=0 against Open MPI alone, alternating, 5 runs.
if [[ $STEPS == *2* ]]; then
  by_size 0,4,10,11 barriers
  # ... and the barriers at p = 3 and 8, 3 runs.
  for p in 3 8; do
    for rep in 1 2 3; do
      launch ompi ompi $p 2000 2 10,11
      launch chorus $LIB $p 2000 2 10,11
    done > $out/barriers_p${p}_8B.csv
  done
fi

# 3. Every call at 8 B, p = 2, with CHORUS_MPI_MIN_BYTES=0 against Open MPI
#    alone: where the default threshold stands; 5 runs.
if [[ $STEPS == *3* ]]; then
  for rep in 1 2 3 4 5; do
    launch ompi ompi 2 30000 2 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
    launch chorus $LIB 2 30000 2 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
  done > $out/every_call_8B.csv
fi

# 4. The rooted blocking calls from 24 to 256 B at p = 2 (a root whose
#    copy or reduce waits for the peer's second line), 3 runs.
if [[ $STEPS == *4* ]]; then
  for ints in 6 8 24 32 40 64; do
    for rep in 1 2 3; do
      launch ompi ompi 2 30000 $ints 4,5,14
      launch chorus $LIB 2 30000 $ints 4,5,14
    done
  done > $out/rooted_sizes.csv
fi

# 5. AllReduce at 16 and 64 MiB, p = 2, beside Open MPI alone in the same
#    launch (the twentieth pass's step 9, with 64 MiB), 5 rounds of 6
#    calls; 5 launches.
if [[ $STEPS == *5* ]]; then
  mkdir -p $out/large
  for rep in 1 2 3 4 5; do
    mpirun -np 2 build/bin/allreduce_perf -b 16M -e 64M -f 4 -n 6 -w 3 --rounds 5 --mpi -X ucx \
      -c 0 --csv $out/large/allreduce_$rep.csv >/dev/null 2>&1
  done
fi

# 6. What a communicator's creation costs: a program whose first MPI call
#    after MPI_Init is MPI_Barrier (first_barrier.c), the library of the
#    commit before the probe's buffers were populated (BEFORE_PROBE: a
#    library directory of 1350608) and this build alternating, p = 2 and 4,
#    5 runs; each line: who, p, the first barrier's ms, the probe's ms.
if [[ $STEPS == *6* ]]; then
  : "${BEFORE_PROBE:?BEFORE_PROBE must name the library directory of a build of 1350608}"
  mpicc -O2 -o /tmp/first_barrier $here/first_barrier.c
  for p in 2 4; do
    for rep in 1 2 3 4 5; do
      for which in before after; do
        dir=$LIB; [ $which = before ] && dir=$BEFORE_PROBE
        mpirun -np $p --oversubscribe -x LD_LIBRARY_PATH=$dir -x LD_PRELOAD=$dir/libchorus_pmpi.so \
          -x CHORUS_DEBUG=INFO /tmp/first_barrier 2>&1 |
          awk -v who=$which -v p=$p '/first barrier/ {b = $3} /rank 0 of .*probe, [0-9]+ ms/ {
               match($0, /probe, [0-9]+ ms/); m = substr($0, RSTART + 7, RLENGTH - 10) }
               END {print who "," p "," b "," m}'
      done
    done
  done > $out/first_barrier.csv
fi

# 7. MPI_Allgatherv beside MPI_Allgather (call_loops kinds 7 and 18) at
#    p = 2 and 4, 8, 128 and 512 B, with CHORUS_MPI_MIN_BYTES=0 against Open
#    MPI alone, alternating, 5 runs. (allgatherv_dense_*.csv: the same at
#    p = 2, 8 and 128 B, with the build before b4d2706 in turn.)
if [[ $STEPS == *7* ]]; then
  by_size 7,18 allgatherv
fi
