#!/usr/bin/env python3
"""Sixteenth pass, the nonblocking calls with CHORUS_MPI_MIN_BYTES=0 (run.sh
here): speedup = Open MPI alone's time / the library's, median (range) of
3 runs, run i against run i. Run from this directory: python3 report.py"""
import glob
import statistics


def read(pattern):
    times = {}
    for name in sorted(glob.glob(pattern)):
        for line in open(name):
            f = line.strip().split(",")
            if len(f) == 3:
                times.setdefault(f[0], []).append(float(f[2]))
    return times


cells = [(p, ints) for p in (2, 4) for ints in (2, 32, 256)]
columns = {}
for p, ints in cells:
    mpi, new = read("p%d_%d_mpi_*.csv" % (p, ints)), read("p%d_%d_new_*.csv" % (p, ints))
    for call in mpi:
        r = [m / c for m, c in zip(mpi[call], new.get(call, []))]
        if r:
            columns.setdefault(call, []).append("%.2f (%.2f-%.2f)" % (statistics.median(r), min(r), max(r)))
print("| call | " + " | ".join("p = %d: %d B" % (p, 4 * ints) for p, ints in cells) + " |")
print("| --- |" + " --- |" * len(cells))
for call, row in columns.items():
    print("| %s | %s |" % (call, " | ".join(row)))
