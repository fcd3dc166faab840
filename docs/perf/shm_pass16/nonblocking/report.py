#!/usr/bin/env python3
"""Sixteenth pass, the nonblocking calls with CHORUS_MPI_MIN_BYTES=0 (run.sh
here): speedup = Open MPI alone's time / the library's, median (range) of
3 runs, run i against run i. Run from this directory: python3 report.py"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from report import read_loops as read, spread  # noqa: E402  (the pass's report.py)

cells = [(p, ints) for p in (2, 4) for ints in (2, 32, 256)]
columns = {}
for p, ints in cells:
    mpi, new = read("p%d_%d_mpi_*.csv" % (p, ints)), read("p%d_%d_new_*.csv" % (p, ints))
    for call in mpi:
        r = [m / c for m, c in zip(mpi[call], new.get(call, []))]
        if r:
            columns.setdefault(call, []).append(spread(r))
print("| call | " + " | ".join("p = %d: %d B" % (p, 4 * ints) for p, ints in cells) + " |")
print("| --- |" + " --- |" * len(cells))
for call, row in columns.items():
    print("| %s | %s |" % (call, " | ".join(row)))
