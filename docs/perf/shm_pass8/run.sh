#!/bin/bash
# Eighth pass (docs/performance.md): run from the repository root after a
# Release build in ./build. BASE: the bin/ of a Release build of the commit
# before the pass (0b49aca), for the before/after rows. Writes
# docs/perf/shm_pass8/; report.py summarizes it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass8; B=./build/bin; BASE=${BASE:-/tmp/oldbin}

# 1. memcpy against 512 KiB pieces (common/copy.hpp).
$B/copy_bench 20 > $out/copy_bench.txt

# 2. AllReduce, the automatic choice, before and after, alternating:
#    out of place and in place, 256 KiB to 4 MiB.
for rep in 1 2 3; do for p in 2 4; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE
  $bin/allreduce_perf --np $p -b 256K -e 4M -f 2 -n 50 -w 5 -c 0 --csv $out/auto_p${p}_${which}_$rep.csv >/dev/null 2>&1
  $bin/allreduce_perf --np $p -b 256K -e 4M -f 2 -n 50 -w 5 -c 0 --rewrite --csv $out/auto_rewrite_p${p}_${which}_$rep.csv >/dev/null 2>&1
done; done; done

# 3. AllReduce beside Open MPI (ob1 + vader), 512 KiB to 4 MiB.
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 512K -e 4M -f 2 -n 50 -w 5 --mpi -X ucx --csv $out/allreduce_mpi_p${p}_$rep.csv >/dev/null 2>&1
done; done

# 4. The collectives whose copies changed most (allgather, alltoall), 1 and
#    64 MiB, before and after, alternating.
for rep in 1 2 3; do for t in allgather alltoall; do for which in base new; do
  bin=$B; [ $which = base ] && bin=$BASE
  $bin/${t}_perf --np 2 -b 1M -e 1M -n 100 -w 10 -c 0 --csv $out/${t}_1M_${which}_$rep.csv >/dev/null 2>&1
  $bin/${t}_perf --np 2 -b 64M -e 64M -n 10 -w 3 -c 0 --csv $out/${t}_64M_${which}_$rep.csv >/dev/null 2>&1
done; done; done
echo finished
