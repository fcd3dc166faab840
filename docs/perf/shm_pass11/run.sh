#!/bin/bash
# Eleventh pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the build directory of a Release build of
# the commit before the pass (edd8275), for the before/after columns (its
# bin/ and src/, whose libraries LD_LIBRARY_PATH puts first: libchorus_pmpi
# finds its libchorus by RUNPATH otherwise). Writes docs/perf/shm_pass11/;
# report.py summarizes it. Steps 1-3 and 5 ran on c16c39d, step 4 on
# a8b9bbb (nonblocking collectives taken over from 64 KiB by default).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass11; NEW=$PWD/build; BASE=${BASE:-/tmp/basesrc/build}
STEPS=${STEPS:-12345}  # which steps below to run

# 1. Small calls beside Open MPI (ob1 + vader), before and after,
#    alternating: AllReduce, broadcast and reduce at 8-128 B; p = 2 (mpirun
#    binds each rank to a core of its own) and p = 4 (oversubscribed).
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3 4 5 6 7; do for p in 2 4; do for t in allreduce broadcast reduce; do
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src $b/bin/${t}_perf -b 8 -e 128 -f 4 \
      -n 20000 -w 1000 --mpi -X ucx -c 0 --csv $out/mpi_${t}_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done; done
fi

# 2. Through libchorus_pmpi (CHORUS_MPI_MIN_BYTES=0: every call on Chorus):
#    Open MPI alone, the library before and after, alternating; the mpi_time
#    column at the sizes below the default threshold (1 KiB).
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for t in allreduce broadcast reduce; do
  args="-b 8 -e 512 -f 4 -n 20000 -w 1000 --mpi -X ucx -c 0"
  mpirun --oversubscribe -np $p $NEW/bin/${t}_perf $args --csv $out/pmpi_${t}_p${p}_mpi_$rep.csv >/dev/null 2>&1
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src -x LD_PRELOAD=$b/src/libchorus_pmpi.so \
      -x CHORUS_MPI_MIN_BYTES=0 $NEW/bin/${t}_perf $args --csv $out/pmpi_${t}_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done; done
fi

# 3. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2 under mpirun,
#    before and after, alternating (the waits no longer yield there).
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3 4 5; do for which in base new; do
  b=$NEW; [ $which = base ] && b=$BASE
  mpirun -np 2 -x LD_LIBRARY_PATH=$b/src $b/bin/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_p2_${which}_$rep.txt 2>&1
done; done
fi

# 4. Every collective libchorus_pmpi takes over, as a plain MPI program
#    sees it (mpi_collectives_bench: blocks of 8 B-1 MiB; nonblocking calls
#    timed with their MPI_Wait), with the library's default settings: Open
#    MPI alone, the library before and after (a wait on an async call that
#    is next in the queue runs it), alternating.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_mpi_$rep.csv >/dev/null 2>&1
  for which in base new; do
    b=$NEW; [ $which = base ] && b=$BASE
    mpirun --oversubscribe -np $p -x LD_LIBRARY_PATH=$b/src -x LD_PRELOAD=$b/src/libchorus_pmpi.so \
      $NEW/bin/mpi_collectives_bench --iters 2000 --csv $out/collectives_p${p}_${which}_$rep.csv >/dev/null 2>&1
  done
done; done
fi

# 5. An async AllReduce waited at once (async_wait.cpp, through libchorus.so),
#    before and after (a wait on the call next in the queue runs it),
#    alternating, with each rank bound to a core (mpirun's default at p = 2)
#    and unbound.
if [[ $STEPS == *5* ]]; then
g++ -O2 -std=c++20 $out/async_wait.cpp -I include -I build/include $(mpicxx --showme:compile) \
  -L build/src -lchorus_mpi -lchorus $(mpicxx --showme:link) -o /tmp/async_wait
for rep in 1 2 3 4 5; do for bind in core none; do for which in base new; do
  b=$NEW; [ $which = base ] && b=$BASE
  echo "$which $bind $(mpirun -np 2 --bind-to $bind -x LD_LIBRARY_PATH=$b/src /tmp/async_wait)" >> $out/async_wait.txt
done; done; done
fi

echo finished
