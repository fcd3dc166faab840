#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass13 (run.sh): medians over the runs."""
import csv, glob, os, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def times(pattern, key_of, column):
    """key -> the column's values, one per file matching `pattern`."""
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(path)):
            out[key_of(r)].append(float(r[column]))
    return out


def spread(values):
    return f"{st.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


print("1. mpi_collectives_bench: speedup = Open MPI alone / with the library, median of the per-run"
      " ratios (range); Open MPI's time in us. before -> after, default settings | with"
      " CHORUS_MPI_MIN_BYTES=1024")
call = lambda r: (r["call"], int(r["bytes"]))
for p in (2, 4):
    mpi = times(f"collectives_p{p}_mpi_*.csv", call, "time_us")
    runs = {w: times(f"collectives_p{p}_{w}_*.csv", call, "time_us")
            for w in ("base", "new", "base1k", "new1k")}
    print(f"p = {p}")
    for key in sorted(mpi, key=lambda k: (not k[0].startswith("MPI_I"), k)):
        ratio = {w: [a / b for a, b in zip(mpi[key], runs[w][key])] for w in runs}
        print(f"  {key[0]:27s} {key[1]:>8} B  MPI {st.median(mpi[key]):8.2f} us  "
              f"{spread(ratio['base'])} -> {spread(ratio['new'])} | "
              f"{spread(ratio['base1k'])} -> {spread(ratio['new1k'])}")

print("\n2. allreduce_perf --async (self-launched): Chorus's time in us, median (range); before -> after")
size = lambda r: int(r["size"])
for p in (2, 4):
    base = times(f"async_p{p}_base_*.csv", size, "oop_time_us")
    new = times(f"async_p{p}_new_*.csv", size, "oop_time_us")
    print(f"  p = {p}: " + "; ".join(f"{s} B {spread(base[s])} -> {spread(new[s])}" for s in sorted(base)))
