#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass7 (run.sh): medians of the runs."""
import csv, glob, os, statistics as st
from collections import defaultdict

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def rows(pattern):
    """size -> list of rows, one per file matching `pattern`."""
    out = defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(path)):
            out[int(r["size"])].append(r)
    return out


def med(values):
    return st.median(values) if values else float("nan")


def size_name(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1024 else f"{s} B"


print("1. AllReduce, forced variants and auto, medians of 3 launches: out of place / in place us")
for p in (2, 3, 4, 8):
    algos = ("shm_one_shot", "shm_two_shot", "ring", "auto")
    data = {a: rows(f"forced_p{p}_{a}_*.csv") for a in algos}
    print(f"  p = {p}: size | " + " | ".join(algos) + " | auto ran")
    for s in sorted(data["auto"]):
        cells = []
        for a in algos:
            rs = data[a].get(s, [])
            cells.append(f"{med([float(r['oop_time_us']) for r in rs]):.1f} / {med([float(r['ip_time_us']) for r in rs]):.1f}"
                         if rs else "-")
        ran = ",".join(sorted({r["algo"].removeprefix("auto:") for r in data["auto"][s]}))
        best = min(med([float(r[c]) for r in data[a].get(s, [])]) for a in algos[:3] for c in ("oop_time_us", "ip_time_us")
                   if data[a].get(s))
        print(f"    {size_name(s):>8} | " + " | ".join(cells) + f" | {ran}")

print("\n2. The automatic choice before and after, alternating: medians, out of place / in place us")
for p in (2, 4):
    base, new = rows(f"auto_p{p}_base_*.csv"), rows(f"auto_p{p}_new_*.csv")
    print(f"  p = {p}: size | before | after | after / before time (oop, ip)")
    for s in sorted(new):
        b, n = base[s], new[s]
        ratio = lambda c: med([float(y[c]) / float(x[c]) for x, y in zip(b, n)])
        print(f"    {size_name(s):>8} | {med([float(r['oop_time_us']) for r in b]):.1f} / {med([float(r['ip_time_us']) for r in b]):.1f}"
              f" ({b[0]['algo'].removeprefix('auto:')}) | {med([float(r['oop_time_us']) for r in n]):.1f} /"
              f" {med([float(r['ip_time_us']) for r in n]):.1f} ({n[0]['algo'].removeprefix('auto:')}) |"
              f" {ratio('oop_time_us'):.2f}, {ratio('ip_time_us'):.2f}")

print("\n3. AllReduce beside Open MPI: Chorus (better of out of place and in place) and MPI us, speedup = MPI / Chorus")
for p in (2, 4):
    for kind in ("small", "mid", "large"):
        data = rows(f"allreduce_{kind}_p{p}_*.csv")
        if not data:
            continue
        print(f"  p = {p}, {kind} sweep: size: chorus oop / ip, mpi, speedup (runs)")
        for s in sorted(data):
            rs = data[s]
            sp = sorted(float(r["speedup"]) for r in rs)
            print(f"    {size_name(s):>8}: {med([float(r['oop_time_us']) for r in rs]):.2f} / {med([float(r['ip_time_us']) for r in rs]):.2f},"
                  f" {med([float(r['mpi_time_us']) for r in rs]):.2f}, {med(sp):.2f} ({' '.join(f'{x:.2f}' for x in sp)}) {rs[0]['algo']}")

print("\n4. Through libchorus_pmpi, CHORUS_MPI_MIN_BYTES=0 (mpi_time us): MPI alone | library before | after;"
      " speedup = MPI alone / after (median of per-run ratios)")
for p in (2, 4):
    for t in ("allreduce", "broadcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
        alone, base, new = (rows(f"pmpi_{t}_p{p}_{w}_*.csv") for w in ("mpi", "base", "new"))
        cells = []
        for s in sorted(new):
            m = [float(r["mpi_time_us"]) for r in alone[s]]
            b = [float(r["mpi_time_us"]) for r in base[s]]
            n = [float(r["mpi_time_us"]) for r in new[s]]
            cells.append(f"{size_name(s)} {med(m):.2f} | {med(b):.2f} | {med(n):.2f} x{med([x / y for x, y in zip(m, n)]):.2f}")
        if cells:
            print(f"  p = {p} {t:15}: " + "; ".join(cells))

print("\n5. Other collectives beside Open MPI: speedup = MPI / Chorus, median of 3 (runs)")
for p in (2, 4):
    for t in ("broadcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
        cells = []
        for size in ("8", "1M", "64M"):
            rs = [r for v in rows(f"{t}_{size}_p{p}_*.csv").values() for r in v]
            sp = sorted(float(r["speedup"]) for r in rs)
            cells.append(f"{size}: {med(sp):.2f} ({' '.join(f'{x:.2f}' for x in sp)})" if sp else f"{size}: -")
        print(f"  p = {p} {t:15}: " + "; ".join(cells))

print("\n6. Tail, 8 B, p = 2, 100000 calls: p50 / p99 us (p99/p50)")
for f in sorted(glob.glob("tail_p2_*.txt")):
    lines = [l.split() for l in open(f) if l.startswith(("chorus", "mpi"))]
    print("  " + "; ".join(f"{l[0]} {l[2]} / {l[4]} ({l[-1]})" for l in lines))
