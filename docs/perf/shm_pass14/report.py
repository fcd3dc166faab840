#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass14 (run.sh): medians over the runs."""
import csv, glob, os, re, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def runs(pattern):
    """size -> [(chorus us, MPI us)], one pair per file matching `pattern`."""
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(path)):
            out[int(r["size"])].append((float(r["oop_time_us"]), float(r["mpi_time_us"])))
    return out


def spread(values, digits=2):
    return f"{st.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


print("1. speedup = Open MPI's time / Chorus's, each pair measured in one launch: median of the"
      " runs (range); Chorus's and Open MPI's median times in us. before -> after")
for p in (2, 4):
    for tool in ("reduce", "broadcast", "allreduce"):
        base, new = runs(f"{tool}_p{p}_base_*.csv"), runs(f"{tool}_p{p}_new_*.csv")
        for size in sorted(base):
            ratio = lambda pairs: [m / c for c, m in pairs]
            time = lambda pairs, i: st.median(x[i] for x in pairs)
            print(f"  p = {p} {tool:9s} {size:>4} B  {spread(ratio(base[size]))} -> "
                  f"{spread(ratio(new[size]))}   Chorus {time(base[size], 0):.3f} -> "
                  f"{time(new[size], 0):.3f} us, MPI {time(base[size], 1):.3f} / "
                  f"{time(new[size], 1):.3f} us")

print("\n2. allreduce_tail, 10^5 8-byte calls at p = 2: p50 / p99 us and p99/p50, per run")
for which in ("base", "new"):
    for path in sorted(glob.glob(f"tail_{which}_*.txt")):
        text = open(path).read()
        print(f"  {which} {path[-5]}: " + " | ".join(
            line.strip() for line in text.splitlines() if re.match(r"\s*(chorus|mpi|MPI|Chorus)", line)))

print("\n3. mpi_collectives_bench with CHORUS_MPI_MIN_BYTES=0: speedup = Open MPI alone / with the"
      " library, median of the per-run ratios (range); Open MPI's median time in us. before -> after")
call = lambda r: (r["call"], int(r["bytes"]))
for p in (2, 4):
    mpi = defaultdict(list)
    runs = {w: defaultdict(list) for w in ("base", "new")}
    for path in sorted(glob.glob(f"collectives_p{p}_mpi_*.csv")):
        for r in csv.DictReader(open(path)):
            mpi[call(r)].append(float(r["time_us"]))
    for w in runs:
        for path in sorted(glob.glob(f"collectives_p{p}_{w}_*.csv")):
            for r in csv.DictReader(open(path)):
                runs[w][call(r)].append(float(r["time_us"]))
    if not mpi:
        continue
    print(f"p = {p}")
    for key in sorted(mpi, key=lambda k: (not k[0].startswith("MPI_I"), k)):
        ratio = {w: [a / b for a, b in zip(mpi[key], runs[w][key])] for w in runs}
        print(f"  {key[0]:27s} {key[1]:>8} B  MPI {st.median(mpi[key]):8.2f} us  "
              f"{spread(ratio['base'])} -> {spread(ratio['new'])}")

print("\n4a. call_loops (p = 2, 8 B, CHORUS_MPI_MIN_BYTES=0): us per call, median of the runs"
      " (range); Open MPI | the library before -> after")


def loop_times(pattern):
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for line in open(path):
            name, size, us = line.strip().split(",")
            out[(name, int(size))].append(float(us))
    return out


loops = {w: loop_times(f"loops_{w}_*.csv") for w in ("mpi", "base", "new")}
for key in loops["mpi"]:
    print(f"  {key[0]:27s} {spread(loops['mpi'][key], 3)} | {spread(loops['base'][key], 3)} -> "
          f"{spread(loops['new'][key], 3)}")

print("\n4b. call_loops, the library's default settings: speedup = Open MPI alone / with the"
      " library, median of the per-run ratios (range)")
for p in (2, 4):
    for ints in (2, 32):
        mpi = loop_times(f"exchange_p{p}_{ints}_mpi_*.csv")
        new = loop_times(f"exchange_p{p}_{ints}_new_*.csv")
        for key in mpi:
            print(f"  p = {p} {key[0]:27s} {key[1]:>4} B  {spread([a / b for a, b in zip(mpi[key], new[key])])}"
                  f"  (Open MPI {st.median(mpi[key]):.3f} us)")
