#!/bin/bash
# Twenty-sixth pass (docs/performance.md): the segment's rings mapped in at
# attach. Run from the repository root after a Release build in ./build;
# report.py prints the tables from what it writes. BEFORE: a directory
# holding a build's libchorus.so.0.1, libchorus_mpi.so.0.1 and
# libchorus_pmpi.so from before the change; this build's are build/src.
# Before and after alternate, 5 launches each.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${BEFORE:?BEFORE must name the library directory of a build before the change}"
here=docs/perf/shm_pass26
out=${OUT:-$here}; LIB=$PWD/build/src
mkdir -p "$out"
mpicxx -O2 -o /tmp/first_calls $here/first_calls.cpp

# 0. A process's first access to a page of shared memory, by how it was
#    prepared (page_first_touch.cpp), 3 runs of each mode.
g++ -O2 -o /tmp/page_first_touch $here/page_first_touch.cpp
for rep in 1 2 3; do for mode in 0 1 2 3; do /tmp/page_first_touch $mode; done; done \
  | sort > $out/page_first_touch.txt

# 1. Creation with the first call, the rest of the first pass through the
#    ring, the calls after (first_calls.cpp: 5 communicators a launch).
for p in 2 4; do
  for rep in 1 2 3 4 5; do
    for who in before after; do
      dir=$BEFORE; [ $who = after ] && dir=$LIB
      echo "$who,$(mpirun -np $p --oversubscribe -x LD_LIBRARY_PATH=$dir \
        -x LD_PRELOAD=$dir/libchorus_pmpi.so /tmp/first_calls 5)"
    done
  done > $out/first_calls_p$p.csv
done

# 2. README's main job (allreduce_perf --np 4) at 8 B, as 16 cells of 32
#    calls one after the other with no warm-up: its first cells are the
#    first pass.
for rep in 1 2 3 4 5; do
  for who in before after; do
    dir=$BEFORE; [ $who = after ] && dir=$LIB
    echo "$who,$(LD_LIBRARY_PATH=$dir build/bin/allreduce_perf --np 4 -b 8 -e 8 -n 32 -w 0 -N 16 -c 0 \
      | awk '/shm/{printf "%s%s,%s", sep, $6, $10; sep=","}')"
  done
done > $out/perf_cells_p4.csv
