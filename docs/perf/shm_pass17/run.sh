#!/bin/bash
# Seventeenth pass (docs/performance.md): issue 17's AllReduce, in-place,
# choice and other-collective targets measured again with allreduce_perf
# --rounds, so that the cells compared are timed in turn within a launch
# and each is its median series. Run from the repository root after a
# Release build in ./build (all on 940bf46); report.py summarizes the data
# written here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass17; B=$PWD/build/bin
STEPS=${STEPS:-123456}  # which steps below to run

# 1. In place against out of place, every AllReduce algorithm forced and
#    the automatic choice, 1-64 MiB, p = 2 and 4; 5 rounds of 10 calls a
#    cell; 3 runs.
if [[ $STEPS == *1* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 1M -e 64M -f 4 -n 10 -w 3 --rounds 5 -c 0 \
    --csv $out/inplace_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 2. The automatic choice against every forced algorithm: 10 launches at
#    p = 2 and 10 at p = 4, at 2, 8 and 32 MiB; 3 rounds of 6 calls a cell.
if [[ $STEPS == *2* ]]; then
for rep in 01 02 03 04 05 06 07 08 09 10; do for p in 2 4; do
  $B/allreduce_perf --np $p -b 2M -e 32M -f 4 -A all -n 6 -w 2 --rounds 3 -c 0 \
    --csv $out/choice_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 3. Every other collective beside Open MPI at 8 B (at p = 4 32 B for the
#    ones whose size is all p blocks), 1 MiB and 64 MiB, p = 2 and 4; 5
#    rounds a cell (Chorus and MPI in turn); 3 runs. SIZES: which of the
#    three (the 1 MiB cells were first run with -n 10 -w 3, 0.5-2 ms a
#    series: 0.76-0.99x for allgather and alltoall, against 1.02-1.19x in
#    the sixteenth pass's -n 50; run again with its -n 50 -w 5).
SIZES=${SIZES:-"small 1M 64M"}
if [[ $STEPS == *3* ]]; then
for rep in 1 2 3; do for p in 2 4; do for tool in allgather alltoall broadcast reduce reduce_scatter; do
  small=8; [ $p = 4 ] && [[ $tool == all* || $tool == reduce_scatter ]] && small=32
  for size in ${SIZES/small/$small}; do
    n=4000 w=500; [ $size = 1M ] && n=50 w=5; [ $size = 64M ] && n=4 w=3
    mpirun --oversubscribe -np $p $B/${tool}_perf -b $size -e $size -n $n -w $w --rounds 5 --mpi -X ucx -c 0 \
      --csv $out/${tool}_${size}_p${p}_$rep.csv >/dev/null 2>&1
  done
done; done; done
fi

# 4. AllReduce beside Open MPI (out of place and in place), every power of
#    two from 8 B to 64 MiB, p = 2 and 4, 5 rounds a cell; 3 runs. Two
#    launches a run, each from a size before the first reported, as the
#    sixteenth pass's step 1 (its report.py reads them alike): up to 64 KiB
#    400 calls a series, in the second launch (from 32 KiB) 4.
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 4 -e 64K -f 2 -n 400 -w 100 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_small_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 32K -e 64M -f 2 -n 4 -w 3 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_large_$rep.csv >/dev/null 2>&1
done; done
fi

# 5. Step 1 with --rewrite (each rank's input written before every call,
#    untimed, as a training step writes its gradients), where out of place
#    no longer reads an input its peer still holds in its cache from the
#    call before (docs/allreduce_perf.md); 3 runs.
if [[ $STEPS == *5* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 1M -e 64M -f 4 -n 10 -w 3 --rounds 5 -c 0 --rewrite \
    --csv $out/rewrite/inplace_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 6. The ring's in place at p = 2, the one cell of step 1 below 0.95: 9
#    rounds of 20 calls, 1-16 MiB; 3 runs.
if [[ $STEPS == *6* ]]; then
for rep in 1 2 3; do
  $B/allreduce_perf --np 2 -A ring -b 1M -e 16M -f 4 -n 20 -w 3 --rounds 9 -c 0 \
    --csv $out/ring_4M/ring_p2_$rep.csv >/dev/null 2>&1
done
fi

echo finished
