#!/bin/bash
# Seventh pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: a Release build of the commit before the
# pass (525f84c), for the before/after rows. Writes docs/perf/shm_pass7/;
# report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass7; B=./build/bin; BASE=${BASE:-/tmp/base/build}
L=$PWD/build/src/libchorus_pmpi.so; LBASE=$BASE/src/libchorus_pmpi.so

# 1. AllReduce's shared-memory variants and the ring, forced, and the
#    automatic choice: where one-shot's edge lies at p = 2, 3, 4, 8.
for rep in 1 2 3; do for p in 2 3 4 8; do for a in shm_one_shot shm_two_shot ring auto; do
  range="-b 16K -e 4M -n 100"; [ $p -ge 3 ] && range="-b 16K -e 4M -n 50"; [ $p = 8 ] && range="-b 4K -e 1M -n 20"
  $B/allreduce_perf --np $p -A $a $range -f 2 -w 10 -c 0 --csv $out/forced_p${p}_${a}_$rep.csv >/dev/null 2>&1
done; done; done

# 2. The automatic choice before and after, alternating.
for rep in 1 2 3 4 5; do for p in 2 4; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE/bin
  n=100; [ $p = 4 ] && n=50
  $bin/allreduce_perf --np $p -b 16K -e 2M -f 2 -n $n -w 10 -c 0 --csv $out/auto_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done

# 3. AllReduce beside Open MPI (ob1 + vader), every size, p = 2 and 4.
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 1M -e 64M -f 4 -n 20 -w 3 --mpi -X ucx --csv $out/allreduce_large_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 8 -e 64K -f 4 -n 2000 -w 100 --mpi -X ucx --csv $out/allreduce_small_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 16K -e 2M -f 2 -n 100 -w 10 --mpi -X ucx --csv $out/allreduce_mid_p${p}_$rep.csv >/dev/null 2>&1
done; done

# 4. Through libchorus_pmpi (CHORUS_MPI_MIN_BYTES=0, every call on Chorus):
#    MPI alone, the library before and after, alternating; the mpi_time column.
for rep in 1 2 3 4 5; do for p in 2 4; do
  [ $p = 4 ] && [ $rep -gt 3 ] && continue
  for t in allreduce broadcast reduce allgather alltoall reduce_scatter; do
    b=8; case $t in allgather|alltoall|reduce_scatter) b=$((4 * p));; esac
    args="-b $b -e 2K -f 4 -n 5000 -w 500 --mpi -X ucx -c 0"
    mpirun --oversubscribe -np $p $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_mpi_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p -x LD_PRELOAD=$LBASE -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_base_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p -x LD_PRELOAD=$L -x CHORUS_MPI_MIN_BYTES=0 $B/${t}_perf $args --csv $out/pmpi_${t}_p${p}_new_$rep.csv >/dev/null 2>&1
  done
done; done

# 5. The other collectives beside Open MPI at 8 B (4p B where the size is
#    all p blocks), 1 MiB and 64 MiB.
for rep in 1 2 3; do for p in 2 4; do for t in broadcast reduce allgather alltoall reduce_scatter; do
  b=8; case $t in allgather|alltoall|reduce_scatter) b=$((4 * p));; esac
  mpirun --oversubscribe -np $p $B/${t}_perf -b $b -e $b -n 20000 -w 1000 --mpi -X ucx --csv $out/${t}_8_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/${t}_perf -b 1M -e 1M -n 100 -w 10 --mpi -X ucx --csv $out/${t}_1M_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/${t}_perf -b 64M -e 64M -n 10 -w 3 --mpi -X ucx --csv $out/${t}_64M_p${p}_$rep.csv >/dev/null 2>&1
done; done; done

# 6. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2.
for rep in 1 2 3 4; do
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_p2_$rep.txt 2>&1
done
echo finished
