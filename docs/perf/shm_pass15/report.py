#!/usr/bin/env python3
"""Fifteenth pass (docs/performance.md): the tables of run.sh's data.
Run from this directory: python3 report.py"""
import glob
import statistics


def read(pattern):
    """{call: [us per call, one per run]} of the files matching pattern."""
    times = {}
    for name in sorted(glob.glob(pattern)):
        for line in open(name):
            fields = line.strip().split(",")
            if len(fields) == 3:
                times.setdefault(fields[0], []).append(float(fields[2]))
    return times


def median_range(values):
    return "%.2f (%.2f-%.2f)" % (statistics.median(values), min(values), max(values))


def speedups(mpi, chorus):
    """Per-run speedups (Open MPI's time / Chorus's), runs paired in order."""
    return [m / c for m, c in zip(mpi, chorus)]


print("Step 1: every kind at 8 B, p = 2, us per call (medians of the runs) and speedup, median (range)")
mpi, base, new = (read("loops_%s_*.csv" % w) for w in ("mpi", "base", "new"))
print("| call | Open MPI | before | after | speedup before | after |")
print("| --- | --- | --- | --- | --- | --- |")
for call in mpi:
    if call not in new:
        continue
    m, b, n = (statistics.median(x[call]) for x in (mpi, base, new))
    print("| %s | %.3f | %.3f | %.3f | %s | %s |" % (
        call, m, b, n, median_range(speedups(mpi[call], base[call])),
        median_range(speedups(mpi[call], new[call]))))

print("\nStep 2: the nonblocking calls, speedup median (range) over 3 runs")
sizes = ((2, "8 B"), (32, "128 B"), (256, "1 KiB"))
print("| call | " + " | ".join("p = %d: %s" % (p, s) for p in (2, 4) for _, s in sizes) + " |")
print("| --- |" + " --- |" * 6)
rows = {}
for p in (2, 4):
    for ints, _ in sizes:
        mpi = read("nonblocking_p%d_%d_mpi_*.csv" % (p, ints))
        new = read("nonblocking_p%d_%d_new_*.csv" % (p, ints))
        for call in mpi:
            rows.setdefault(call, []).append(median_range(speedups(mpi[call], new[call])))
for call, cells in rows.items():
    print("| %s | %s |" % (call, " | ".join(cells)))
