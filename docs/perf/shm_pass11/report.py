#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass11 (run.sh): medians of the runs."""
import csv, glob, os, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def column(pattern, name):
    """size -> the column's values, one per file matching `pattern` (sorted by name)."""
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(path)):
            out[int(r["size"])].append(float(r[name]))
    return out


def spread(values):
    return f"{st.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


print("1. Beside Open MPI under mpirun: speedup = MPI time / Chorus's (out of place), median of the"
      " per-run ratios (range); Chorus's time in us; before -> after")
for p in (2, 4):
    for t in ("allreduce", "broadcast", "reduce"):
        cells = []
        for size in sorted(column(f"mpi_{t}_p{p}_new_*.csv", "oop_time_us")):
            ratio, time = {}, {}
            for w in ("base", "new"):
                chorus = column(f"mpi_{t}_p{p}_{w}_*.csv", "oop_time_us")[size]
                mpi = column(f"mpi_{t}_p{p}_{w}_*.csv", "mpi_time_us")[size]
                ratio[w] = [m / c for m, c in zip(mpi, chorus)]
                time[w] = st.median(chorus)
            cells.append(f"{size} B {spread(ratio['base'])} -> {spread(ratio['new'])}"
                         f" [{time['base']:.3f} -> {time['new']:.3f} us]")
        print(f"  p = {p} {t}: " + "; ".join(cells))
        if t == "broadcast":
            continue  # one buffer: no in-place column
        in_place = []
        for size in sorted(column(f"mpi_{t}_p{p}_new_*.csv", "ip_time_us")):
            ratio = {}
            for w in ("base", "new"):
                ip = column(f"mpi_{t}_p{p}_{w}_*.csv", "ip_time_us")[size]
                mpi = column(f"mpi_{t}_p{p}_{w}_*.csv", "mpi_time_us")[size]
                ratio[w] = [m / c for m, c in zip(mpi, ip)]
            in_place.append(f"{size} B {spread(ratio['base'])} -> {spread(ratio['new'])}")
        print(f"  p = {p} {t}, in place: " + "; ".join(in_place))

print("\n2. Through libchorus_pmpi (CHORUS_MPI_MIN_BYTES=0): Open MPI alone / the library, median of"
      " the per-run ratios (range); before -> after")
for p in (2, 4):
    for t in ("allreduce", "broadcast", "reduce"):
        alone = column(f"pmpi_{t}_p{p}_mpi_*.csv", "mpi_time_us")
        base = column(f"pmpi_{t}_p{p}_base_*.csv", "mpi_time_us")
        new = column(f"pmpi_{t}_p{p}_new_*.csv", "mpi_time_us")
        cells = [f"{s} B {spread([a / b for a, b in zip(alone[s], base[s])])} -> "
                 f"{spread([a / n for a, n in zip(alone[s], new[s])])}" for s in sorted(alone)]
        print(f"  p = {p} {t}: " + "; ".join(cells))

print("\n3. The tail at p = 2 (allreduce_tail -n 100000 -b 8 --mpi): p50 / p99 us, p99/p50; runs")
for w in ("base", "new"):
    for path in sorted(glob.glob(f"tail_p2_{w}_*.txt")):
        for line in open(path):
            f = line.split()
            if f and f[0] in ("chorus", "mpi"):
                print(f"  {w} {path[-5]} {f[0]:6} p50 {f[2]} p99 {f[4]} p99/p50 {f[7]}")

print("\n4. mpi_collectives_bench with the library's default settings: Open MPI alone / the library,"
      " median of the per-run ratios (range); before -> after; (time us: MPI alone, library after)")
for p in (2, 4):
    def load(which):
        out = defaultdict(list)
        for path in sorted(glob.glob(f"collectives_p{p}_{which}_*.csv")):
            for r in csv.DictReader(open(path)):
                out[(r["call"], int(r["bytes"]))].append(float(r["time_us"]))
        return out
    alone, base, new = load("mpi"), load("base"), load("new")
    for key in sorted(alone):
        b = [a / x for a, x in zip(alone[key], base[key])]
        n = [a / x for a, x in zip(alone[key], new[key])]
        print(f"  p = {p} {key[0]} {key[1]} B: {spread(b)} -> {spread(n)}"
              f" ({st.median(alone[key]):.2f}, {st.median(new[key]):.2f} us)")
