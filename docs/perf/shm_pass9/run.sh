#!/bin/bash
# Ninth pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the build/ of a Release build of the
# commit before the pass (b42a2c0), for the before/after rows (its bin/ and
# src/libchorus_pmpi.so). Writes docs/perf/shm_pass9/; report.py
# summarizes it. Step 2 ran on 27f8469 (nothing it runs changed after);
# the others on the pass's last code commit.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass9; B=./build/bin; BASE=${BASE:-/tmp/basesrc/build}
L=$PWD/build/src/libchorus_pmpi.so; LBASE=$BASE/src/libchorus_pmpi.so
STEPS=${STEPS:-123456}  # which steps below to run

# 1. Small calls before and after (a small call's data lines prefetched, up
#    to 32 bytes on the header's line), alternating: broadcast, reduce and
#    AllReduce, 8-512 B.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for t in broadcast reduce allreduce; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE/bin
  $bin/${t}_perf --np $p -b 8 -e 512 -f 4 -n 20000 -w 1000 -c 0 --csv $out/small_${t}_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done; done
fi

# 2. In place against out of place, every AllReduce algorithm (-A all runs
#    each in turn, then auto), with and without --rewrite.
if [[ $STEPS == *2* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 64K -e 16M -f 4 -n 20 -w 3 -c 0 --rewrite --csv $out/all_rewrite_p${p}_$rep.csv >/dev/null 2>&1
  $B/allreduce_perf --np $p -A all -b 64K -e 16M -f 4 -n 20 -w 3 -c 0 --csv $out/all_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 3. AllReduce beside Open MPI (ob1 + vader), small sizes, p = 2 and 4.
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 8 -e 64K -f 4 -n 2000 -w 100 --mpi -X ucx --csv $out/allreduce_small_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 4. The other collectives beside Open MPI at 8 B (4p B where the size is
#    all p blocks; 32 B at p = 4 is 8 B a block), as the seventh pass.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3 4 5; do for p in 2 4; do for t in broadcast reduce allgather alltoall reduce_scatter; do
  b=8; case $t in allgather|alltoall|reduce_scatter) b=$((4 * p));; esac
  mpirun --oversubscribe -np $p $B/${t}_perf -b $b -e $b -n 20000 -w 1000 --mpi -X ucx --csv $out/${t}_8_p${p}_$rep.csv >/dev/null 2>&1
done; done; done
fi

# 5. Through libchorus_pmpi (CHORUS_MPI_MIN_BYTES=0, every call on Chorus):
#    MPI alone, the library before and after, alternating; the mpi_time column.
if [[ $STEPS == *5* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  for t in allreduce broadcast reduce allgather alltoall reduce_scatter; do
    b=8; case $t in allgather|alltoall|reduce_scatter) b=$((4 * p));; esac
    args="-b $b -e 2K -f 4 -n 5000 -w 500 --mpi -X ucx -c 0"
    mpirun --oversubscribe -np $p $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_mpi_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p -x LD_PRELOAD=$LBASE -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_base_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p -x LD_PRELOAD=$L -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_new_$rep.csv >/dev/null 2>&1
  done
done; done
fi

# 6. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2.
if [[ $STEPS == *6* ]]; then
for rep in 1 2 3; do
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_p2_$rep.txt 2>&1
done
fi

echo finished
