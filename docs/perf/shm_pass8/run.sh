#!/bin/bash
# Eighth pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the bin/ of a Release build of the commit
# before the pass (0b49aca), for the before/after rows. Writes
# docs/perf/shm_pass8/; report.py summarizes it. (The p = 2 rows of steps
# 2, 3 and 6 were run again after the pass's last commit, one-shot up to a
# slot at p = 2, with the same commands; step 7's reduce_scatter 1 MiB cells
# after the reduce-scatter change.)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass8; B=./build/bin; BASE=${BASE:-/tmp/oldbin}

# 1. memcpy against 512 KiB pieces (common/copy.hpp).
$B/copy_bench 20 > $out/copy_bench.txt

# 2. AllReduce, the automatic choice, before and after, alternating: out of
#    place and in place, 256 KiB to 64 MiB, with and without --rewrite.
for rep in 1 2 3; do for p in 2 4; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE
  $bin/allreduce_perf --np $p -b 256K -e 64M -f 4 -n 20 -w 3 -c 0 --csv $out/auto_p${p}_${which}_$rep.csv >/dev/null 2>&1
  $bin/allreduce_perf --np $p -b 256K -e 64M -f 4 -n 20 -w 3 -c 0 --rewrite --csv $out/auto_rewrite_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done

# 3. AllReduce beside Open MPI (ob1 + vader), every size, p = 2 and 4 (the
#    seventh pass's commands).
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 1M -e 64M -f 4 -n 20 -w 3 --mpi -X ucx --csv $out/allreduce_large_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 16K -e 2M -f 2 -n 100 -w 10 --mpi -X ucx --csv $out/allreduce_mid_p${p}_$rep.csv >/dev/null 2>&1
done; done

# 4. The collectives whose copies changed most (allgather, alltoall), 1 and
#    64 MiB, p = 2, before and after, alternating.
for rep in 1 2 3; do for t in allgather alltoall; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE
  $bin/${t}_perf --np 2 -b 1M -e 1M -n 100 -w 10 -c 0 --csv $out/${t}_1M_${which}_$rep.csv >/dev/null 2>&1
  $bin/${t}_perf --np 2 -b 64M -e 64M -n 10 -w 3 -c 0 --csv $out/${t}_64M_${which}_$rep.csv >/dev/null 2>&1
done; done; done
# 5. The same two at 64 MiB, 5 runs (the 3 above spread by 20%): lines
#    "A|B time" (A: BASE), out of place and in place.
for t in allgather alltoall; do
  for rep in 1 2 3 4 5; do for which in base new; do
    bin=$B; [ $which = base ] && bin=$BASE
    $bin/${t}_perf --np 2 -b 64M -e 64M -n 10 -w 3 -c 0 --csv /tmp/ab.csv >/dev/null 2>&1
    awk -F, -v v=$([ $which = base ] && echo A || echo B) 'NR>1{print v, $1, $9, $13}' /tmp/ab.csv
  done; done > $out/${t}_64M_ab5.txt
done

# 6. The automatic choice against every forced algorithm, same launch.
for p in 2 4; do for rep in 1 2; do
  $B/allreduce_perf --np $p -A all -b 256K -e 64M -f 4 -n 10 -w 2 -c 0 --csv $out/all_p${p}_$rep.csv >/dev/null 2>&1
done; done
# 7. The other collectives beside Open MPI at 8 B (4p B where the size is
#    all p blocks), 1 MiB and 64 MiB (the seventh pass's commands).
for rep in 1 2 3; do for p in 2 4; do for t in broadcast reduce allgather alltoall reduce_scatter; do
  b=8; case $t in allgather|alltoall|reduce_scatter) b=$((4 * p));; esac
  mpirun --oversubscribe -np $p $B/${t}_perf -b $b -e $b -n 20000 -w 1000 --mpi -X ucx --csv $out/${t}_8_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/${t}_perf -b 1M -e 1M -n 100 -w 10 --mpi -X ucx --csv $out/${t}_1M_p${p}_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/${t}_perf -b 64M -e 64M -n 10 -w 3 --mpi -X ucx --csv $out/${t}_64M_p${p}_$rep.csv >/dev/null 2>&1
done; done; done
# 8. The two p = 4 cells whose 3 runs spread most, 5 runs more.
for rep in 4 5 6 7 8; do
  mpirun --oversubscribe -np 4 $B/alltoall_perf -b 1M -e 1M -n 100 -w 10 --mpi -X ucx --csv $out/alltoall_1M_p4_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np 4 $B/broadcast_perf -b 8 -e 8 -n 20000 -w 1000 --mpi -X ucx --csv $out/broadcast_8_p4_$rep.csv >/dev/null 2>&1
done
echo finished
