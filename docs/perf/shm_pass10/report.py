#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass10 (run.sh): medians of the runs."""
import csv, glob, os, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def rows(pattern):
    """size -> list of rows, one per file matching `pattern` (sorted by name)."""
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(path)):
            out[int(r["size"])].append(r)
    return out


def size_name(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1024 else f"{s} B"


print("1. In-place time / out-of-place time, every AllReduce algorithm (-A all), medians of 3 launches;"
      " before -> after")
for kind, label in (("all", "without --rewrite (nccl-tests' loop)"),
                    ("all_rewrite", "with --rewrite (the input written before every call)")):
    for p in (2, 4):
        ratio = {w: defaultdict(lambda: defaultdict(list)) for w in ("base", "new")}
        for w in ratio:
            for path in sorted(glob.glob(f"{kind}_p{p}_{w}_*.csv")):
                for r in csv.DictReader(open(path)):
                    ratio[w][r["algo"]][int(r["size"])].append(float(r["ip_time_us"]) / float(r["oop_time_us"]))
        sizes = sorted({s for a in ratio["new"] for s in ratio["new"][a]})
        print(f"  p = {p}, {label}:\n    | algorithm | " + " | ".join(size_name(s) for s in sizes) + " |")
        print("    | --- |" + " ---: |" * len(sizes))
        for a in sorted(ratio["new"], key=lambda x: (x.startswith("auto"), x)):
            def cell(w, s):  # "-": this variant did not run at this size in those launches
                return f"{st.median(ratio[w][a][s]):.2f}" if ratio[w][a].get(s) else "-"
            cells = [f"{cell('base', s)} -> {cell('new', s)}" for s in sizes]
            print(f"    | {a} | " + " | ".join(cells) + " |")

print("\n2. Start-up: a one-call allreduce_perf run, seconds, median of 3 (runs); before -> after")
times = defaultdict(list)
for line in open("startup.txt"):
    which, p, x, seconds = line.split()
    times[(int(p), x, which)].append(float(seconds))
for p in (2, 3, 4):
    for x in ("tcp", "ucx"):
        b, n = times[(p, x, "base")], times[(p, x, "new")]
        print(f"  p = {p} {x}: {st.median(b):.2f} -> {st.median(n):.2f}"
              f" ({' '.join(f'{v:.2f}' for v in b)} -> {' '.join(f'{v:.2f}' for v in n)})")

print("\n3. The cells of step 1 above 1.05, again (5 launches, more calls): in place / out of place, median (runs)")
for name in ("direct_p2", "ring_p2", "ring_rewrite_p2", "ring_p4", "tree_p4", "shm_p4"):
    by_size = defaultdict(list)
    for path in sorted(glob.glob(f"again_{name}_*.csv")):
        for r in csv.DictReader(open(path)):
            by_size[(int(r["size"]), r["algo"])].append(float(r["ip_time_us"]) / float(r["oop_time_us"]))
    for (s, a), v in sorted(by_size.items()):
        print(f"  {name} {a} {size_name(s)}: {st.median(v):.2f} ({' '.join(f'{x:.2f}' for x in sorted(v))})")


print("\n4. Small calls beside Open MPI: speedup = MPI time / Chorus's better column, medians of 5 runs"
      " (runs); before -> after")
for p in (2, 4):
    for c in ("allreduce", "broadcast", "reduce"):
        base, new = rows(f"mpi_{c}_p{p}_base_*.csv"), rows(f"mpi_{c}_p{p}_new_*.csv")
        cells = []
        for s in sorted(new):
            b = sorted(float(r["speedup"]) for r in base[s])
            n = sorted(float(r["speedup"]) for r in new[s])
            cells.append(f"{size_name(s)} {st.median(b):.2f} -> {st.median(n):.2f} ({n[0]:.2f}-{n[-1]:.2f})")
        print(f"  p = {p} {c:9}: " + "; ".join(cells))

print("\n5. Through libchorus_pmpi, CHORUS_MPI_MIN_BYTES=0 (mpi_time us): MPI alone | library before | after;"
      " x = MPI alone / after (median of per-run ratios)")
for p in (2, 4):
    for c in ("allreduce", "broadcast", "reduce"):
        alone, base, new = (rows(f"pmpi_{c}_p{p}_{w}_*.csv") for w in ("mpi", "base", "new"))
        cells = []
        for s in sorted(new):
            a = [float(r["mpi_time_us"]) for r in alone[s]]
            b = [float(r["mpi_time_us"]) for r in base[s]]
            n = [float(r["mpi_time_us"]) for r in new[s]]
            cells.append(f"{size_name(s)} {st.median(a):.2f} | {st.median(b):.2f} | {st.median(n):.2f}"
                         f" x{st.median([x / y for x, y in zip(a, n)]):.2f}")
        print(f"  p = {p} {c:9}: " + "; ".join(cells))
