#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass12 (run.sh step 1): per call and block, the
median time of Open MPI alone and of the library before and after, and the
speedup (Open MPI's time / the library's, median of the per-run ratios,
runs paired by their number)."""
import csv, glob, os, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def times(p, which):
    """(call, bytes) -> times in us, one per run, in run order."""
    out, order = defaultdict(list), []
    for path in sorted(glob.glob(f"collectives_p{p}_{which}_*.csv")):
        for r in csv.DictReader(open(path)):
            key = (r["call"], int(r["bytes"]))
            if key not in out:
                order.append(key)
            out[key].append(float(r["time_us"]))
    return out, order


def size_name(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


for p in (2, 4):
    mpi, order = times(p, "mpi")
    base, _ = times(p, "base")
    new, _ = times(p, "new")
    print(f"\np = {p}; medians of {len(next(iter(mpi.values())))} runs; speedup = Open MPI's time / the library's\n")
    print("| call | block | Open MPI us | before us | after us | speedup before | speedup after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in order:
        ratio = {w: st.median(m / t for m, t in zip(mpi[key], d[key])) for w, d in (("base", base), ("new", new))}
        print(f"| {key[0]} | {size_name(key[1])} | {st.median(mpi[key]):.2f} | {st.median(base[key]):.2f} | "
              f"{st.median(new[key]):.2f} | {ratio['base']:.2f} | {ratio['new']:.2f} |")
