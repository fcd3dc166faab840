#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass6 (run.sh): medians of the runs."""
import csv, glob, os, re, statistics as st

os.chdir(os.path.dirname(os.path.abspath(__file__)))

def first_row(path):
    return list(csv.DictReader(open(path)))[0]

print("AllReduce p = 2, -n 20000, 5 launches each (speedup = Open MPI time / Chorus time, out of place)")
for size in (8, 32, 128):
    for which in ("base", "new"):
        rows = [first_row(f) for f in sorted(glob.glob(f"allreduce_{size}_p2_{which}_*.csv"))]
        sp = sorted(float(r["speedup"]) for r in rows)
        ch = st.median(float(r["oop_time_us"]) for r in rows)
        mp = st.median(float(r["mpi_time_us"]) for r in rows)
        print(f"  {size:>4} B {which:4}: chorus {ch:.3f} us, mpi {mp:.3f} us, speedup median {st.median(sp):.2f} "
              f"(runs {', '.join(f'{x:.2f}' for x in sp)})")

print("\nOther collectives, 8 B (32 B at p = 4 for allgather, alltoall, reduce_scatter), 3 runs")
for t in ("broadcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
    for p in (2, 4):
        for kind, pattern in (("-n 2000", f"{t}_small_p{p}_*.csv"), ("-n 20000", f"{t}_small_long_p{p}_*.csv")):
            rows = [first_row(f) for f in sorted(glob.glob(pattern))]
            sp = sorted(float(r["speedup"]) for r in rows)
            print(f"  {t:15} p={p} {kind:8}: speedup {st.median(sp):.2f} ({', '.join(f'{x:.2f}' for x in sp)}), "
                  f"chorus {st.median(float(r['oop_time_us']) for r in rows):.2f} / mpi "
                  f"{st.median(float(r['mpi_time_us']) for r in rows):.2f} us, {rows[0]['algo']}")

print("\nTail, 8 B, p = 2, 100000 calls: p50 / p99 us (p99/p50)")
for f in sorted(glob.glob("tail_p2_*.txt")):
    lines = [l.split() for l in open(f) if l.startswith(("chorus", "mpi"))]
    print("  " + "; ".join(f"{l[0]} {l[2]} / {l[4]} ({l[-1]})" for l in lines))

print("\nRing at p = 2, out of place / in place time (>= 1: in place as fast), 3 runs")
for kind in ("ring_inplace_p2", "ring_inplace_rewrite_p2"):
    by_size = {}
    for f in sorted(glob.glob(f"{kind}_*.csv")):
        for r in csv.DictReader(open(f)):
            by_size.setdefault(int(r["size"]), []).append(float(r["oop_time_us"]) / float(r["ip_time_us"]))
    print(f"  {kind}: " + "; ".join(f"{s >> 20} MiB {st.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
                                   for s, v in sorted(by_size.items())))
