#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass9 (run.sh): medians of the runs."""
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


def med(values):
    return st.median(values) if values else float("nan")


def size_name(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1024 else f"{s} B"


def t(r, column="oop_time_us"):
    return float(r[column])


print("1. Small calls, time us (out of place, then in place), medians of 5 alternating runs; after / before per run")
for p in (2, 4):
    for c in ("broadcast", "reduce", "allreduce"):
        base, new = rows(f"small_{c}_p{p}_base_*.csv"), rows(f"small_{c}_p{p}_new_*.csv")
        cells = [f"{size_name(s)} {med([t(r) for r in base[s]]):.3f} -> {med([t(r) for r in new[s]]):.3f}"
                 f" ({med([t(y) / t(x) for x, y in zip(base[s], new[s])]):.2f})" for s in sorted(new)]
        print(f"  p = {p} {c:9}: " + "; ".join(cells))
        if c != "broadcast":  # broadcast has no in-place column
            cells = [f"{size_name(s)} {med([t(r, 'ip_time_us') for r in base[s]]):.3f} -> "
                     f"{med([t(r, 'ip_time_us') for r in new[s]]):.3f}"
                     f" ({med([t(y, 'ip_time_us') / t(x, 'ip_time_us') for x, y in zip(base[s], new[s])]):.2f})"
                     for s in sorted(new)]
            print(f"  p = {p} {c:9} in place: " + "; ".join(cells))

print("\n2. In-place time / out-of-place time, every AllReduce algorithm (-A all), medians of 3 launches")
for kind, label in (("all_rewrite", "with --rewrite (the input written before every call)"),
                    ("all", "without (nccl-tests' loop)")):
    for p in (2, 4):
        data = defaultdict(lambda: defaultdict(list))
        for path in sorted(glob.glob(f"{kind}_p{p}_*.csv")):
            for r in csv.DictReader(open(path)):
                data[r["algo"]][int(r["size"])].append(t(r, "ip_time_us") / t(r))
        sizes = sorted({s for a in data for s in data[a]})
        print(f"  p = {p}, {label}: | algorithm | " + " | ".join(size_name(s) for s in sizes) + " |")
        for a in sorted(data, key=lambda x: (x.startswith("auto"), x)):
            print(f"    | {a} | " + " | ".join(f"{med(data[a][s]):.2f}" if data[a].get(s) else "-"
                                           for s in sizes) + " |")

print("\n3. AllReduce beside Open MPI: Chorus oop / ip, MPI us; speedup = MPI / Chorus's better (runs)")
for p in (2, 4):
    data = rows(f"allreduce_small_p{p}_*.csv")
    for s in sorted(data):
        rs = data[s]
        sp = sorted(float(r["speedup"]) for r in rs)
        print(f"  p = {p} {size_name(s):>7}: {med([t(r) for r in rs]):.2f} / {med([t(r, 'ip_time_us') for r in rs]):.2f},"
              f" {med([t(r, 'mpi_time_us') for r in rs]):.2f}: {med(sp):.2f} ({' '.join(f'{x:.2f}' for x in sp)})")

print("\n4. Other collectives at 8 B (a block) beside Open MPI: speedup = MPI / Chorus, median (runs)")
for p in (2, 4):
    for c in ("broadcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
        rs = [r for v in rows(f"{c}_8_p{p}_*.csv").values() for r in v]
        sp = sorted(float(r["speedup"]) for r in rs)
        print(f"  p = {p} {c:15}: {med(sp):.2f} ({' '.join(f'{x:.2f}' for x in sp)})")

print("\n5. Through libchorus_pmpi, CHORUS_MPI_MIN_BYTES=0 (mpi_time us): MPI alone | library before | after;"
      " x = MPI alone / after (median of per-run ratios)")
for p in (2, 4):
    for c in ("allreduce", "broadcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
        alone, base, new = (rows(f"pmpi_{c}_p{p}_{w}_*.csv") for w in ("mpi", "base", "new"))
        cells = []
        for s in sorted(new):
            m, b, n = ([t(r, "mpi_time_us") for r in x[s]] for x in (alone, base, new))
            cells.append(f"{size_name(s)} {med(m):.2f} | {med(b):.2f} | {med(n):.2f} x{med([x / y for x, y in zip(m, n)]):.2f}")
        if cells:
            print(f"  p = {p} {c:15}: " + "; ".join(cells))

print("\n6. Tail, 8 B, p = 2, 100000 calls: p50 / p99 us (p99/p50)")
for f in sorted(glob.glob("tail_p2_*.txt")):
    lines = [l.split() for l in open(f) if l.startswith(("chorus", "mpi"))]
    print("  " + "; ".join(f"{l[0]} {l[2]} / {l[4]} ({l[-1]})" for l in lines))
