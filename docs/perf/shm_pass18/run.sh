#!/bin/bash
# Eighteenth pass (docs/performance.md): two-shot AllReduce reduces each
# round's own piece straight into the output (851226d, and in place above
# rank 1 via scratch: 3d36e9c) and runs from past 8 KiB at p = 2, 64 KiB
# from 3 ranks (34f3fab); issue 17's AllReduce targets measured again as
# the seventeenth pass did (its steps 1, 2, 4 and 5, the same commands).
# Run from the repository root after a Release build in ./build (all on
# 3d36e9c); BEFORE: a bin/ directory of the build before (449e9b5), for
# step 3. report.py summarizes the data written here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=docs/perf/shm_pass18; B=$PWD/build/bin
STEPS=${STEPS:-12345678}  # which steps below to run

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

# 3. Two-shot before and after, forced, 256 KiB-64 MiB, p = 2 (5 rounds)
#    and 4 (3 rounds) of 6 calls a cell; the two builds alternating, 3 runs.
if [[ $STEPS == *3* && -n $BEFORE ]]; then
mkdir -p $out/two_shot
for rep in 1 2 3; do for which in before after; do
  bin=$B; [ $which = before ] && bin=$BEFORE
  $bin/allreduce_perf --np 2 -A shm_two_shot -b 256K -e 64M -f 4 -n 6 -w 2 --rounds 5 -c 0 \
    --csv $out/two_shot/${which}_p2_$rep.csv >/dev/null 2>&1
  $bin/allreduce_perf --np 4 -A shm_two_shot -b 256K -e 64M -f 4 -n 6 -w 2 --rounds 3 -c 0 \
    --csv $out/two_shot/${which}_p4_$rep.csv >/dev/null 2>&1
done; done
fi

# 4. AllReduce beside Open MPI (out of place and in place), every power of
#    two from 8 B to 64 MiB, p = 2 and 4, 5 rounds a cell; 3 runs (as the
#    seventeenth pass's step 4).
if [[ $STEPS == *4* ]]; then
for rep in 1 2 3; do for p in 2 4; do
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 4 -e 64K -f 2 -n 400 -w 100 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_small_$rep.csv >/dev/null 2>&1
  mpirun --oversubscribe -np $p $B/allreduce_perf -b 32K -e 64M -f 2 -n 4 -w 3 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/allreduce_p${p}_large_$rep.csv >/dev/null 2>&1
done; done
fi

# 5. Step 1 with --rewrite (each rank's input written before every call,
#    untimed, as a training step writes its gradients); 3 runs.
if [[ $STEPS == *5* ]]; then
mkdir -p $out/rewrite
for rep in 1 2 3; do for p in 2 4; do
  $B/allreduce_perf --np $p -A all -b 1M -e 64M -f 4 -n 10 -w 3 --rounds 5 -c 0 --rewrite \
    --csv $out/rewrite/inplace_p${p}_$rep.csv >/dev/null 2>&1
done; done
fi

# 6. One-shot against two-shot, forced, where the edge is (the numbers in
#    src/coll/registry.cpp): p = 2 4-64 KiB, 300 calls a series; p = 3 and
#    4 8-256 KiB, 200; 3 rounds a cell; the two alternating, 3 runs.
if [[ $STEPS == *6* ]]; then
mkdir -p $out/edge
for rep in 1 2 3; do for p in 2 3 4; do for algo in shm_one_shot shm_two_shot; do
  range="-b 8K -e 256K -n 200 -w 20"; [ $p = 2 ] && range="-b 4K -e 64K -n 300 -w 30"
  $B/allreduce_perf --np $p -A $algo $range -f 2 --rounds 3 -c 0 \
    --csv $out/edge/${algo}_p${p}_$rep.csv >/dev/null 2>&1
done; done; done
fi

# 7. 16 and 64 MiB at p = 2 beside Open MPI with the buffers on
#    transparent huge pages (glibc's malloc madvises its mmaps with
#    glibc.malloc.hugetlb=1; this machine's THP is "madvise") and without,
#    alternating; 5 rounds of 4 calls a cell; 3 runs.
if [[ $STEPS == *7* ]]; then
mkdir -p $out/huge_pages
for rep in 1 2 3; do for pages in small huge; do
  tunables=""; [ $pages = huge ] && tunables="-x GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
  mpirun -np 2 $tunables $B/allreduce_perf -b 16M -e 64M -f 4 -n 4 -w 3 --rounds 5 --mpi -X ucx -c 0 \
    --csv $out/huge_pages/${pages}_$rep.csv >/dev/null 2>&1
done; done
fi

# 8. The tail: 10^5 back-to-back 8-byte AllReduces at p = 2, Chorus and
#    then Open MPI in one launch; 3 runs.
if [[ $STEPS == *8* ]]; then
mkdir -p $out/tail
for rep in 1 2 3; do
  mpirun -np 2 $B/allreduce_tail -n 100000 -b 8 --mpi > $out/tail/tail_$rep.txt 2>&1
done
fi

echo finished
