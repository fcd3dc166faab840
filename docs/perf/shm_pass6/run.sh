#!/bin/bash
# Sixth pass (docs/performance.md): run from the repository root after a
# Release build in ./build; BASE: a Release build of the commit before the
# pass (afbab58) for the before/after rows. Writes docs/perf/shm_pass6/.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass6; B=./build/bin; BASE=${BASE:-/tmp/base/build/bin}
# AllReduce p = 2 at 8, 32 and 128 bytes, before and after alternating, each beside Open MPI
for rep in 1 2 3 4 5; do for size in 8 32 128; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE
  mpirun -np 2 $bin/allreduce_perf -b $size -e $size -n 20000 -w 1000 --mpi -X ucx --csv $out/allreduce_${size}_p2_${which}_$rep.csv >/dev/null 2>&1
done; done; done
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 8 -e 64K -f 4 -n 1000 -w 100 --mpi -X ucx --csv $out/allreduce_small_p${p}_$rep.csv >/dev/null 2>&1
  for t in broadcast reduce allgather alltoall reduce_scatter; do
    b=8; [ $p = 4 ] && [ $t != broadcast ] && [ $t != reduce ] && b=32
    mpirun --oversubscribe -np $p $B/${t}_perf -b $b -e $b -n 2000 -w 100 --mpi -X ucx --csv $out/${t}_small_p${p}_$rep.csv >/dev/null 2>&1
    mpirun --oversubscribe -np $p $B/${t}_perf -b $b -e $b -n 20000 -w 1000 --mpi -X ucx --csv $out/${t}_small_long_p${p}_$rep.csv >/dev/null 2>&1
  done
done; done
for rep in 1 2 3 4; do
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/tail_p2_$rep.txt 2>&1
done
# The ring in place and out of place, p = 2, with and without --rewrite
for rep in 1 2 3; do
  $B/allreduce_perf --np 2 -A ring -b 1M -e 64M -f 4 -n 10 -w 2 -c 0 --csv $out/ring_inplace_p2_$rep.csv >/dev/null 2>&1
  $B/allreduce_perf --np 2 -A ring -b 1M -e 64M -f 4 -n 10 -w 2 -c 0 --rewrite --csv $out/ring_inplace_rewrite_p2_$rep.csv >/dev/null 2>&1
done
echo finished
