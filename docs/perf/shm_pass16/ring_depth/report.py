#!/usr/bin/env python3
"""Sixteenth pass, the ring depth (run.sh here): us per call and speedup
over Open MPI (its time measured in the same launch), medians of 3 runs.
Run from this directory: python3 report.py"""
import collections
import csv
import glob
import statistics

depths = (("cur", "64"), ("ring128", "128"), ("ring256", "256"))
print("| call | p | size | " + " | ".join("ring %s: us (speedup)" % d for _, d in depths) + " |")
print("| --- | --- | --- |" + " --- |" * len(depths))
for tool in ("broadcast", "reduce", "allreduce"):
    for p in (2, 4):
        cells = collections.defaultdict(dict)
        for w, _ in depths:
            times, speedups = collections.defaultdict(list), collections.defaultdict(list)
            for name in sorted(glob.glob("%s_p%d_%s_*.csv" % (tool, p, w))):
                for r in csv.DictReader(open(name)):
                    times[int(r["size"])].append(float(r["oop_time_us"]))
                    speedups[int(r["size"])].append(float(r["speedup"]))
            for size in times:
                cells[size][w] = "%.3f (%.2f)" % (statistics.median(times[size]), statistics.median(speedups[size]))
        for size in sorted(cells):
            print("| %s | %d | %d B | %s |" % (tool, p, size, " | ".join(cells[size].get(w, "-") for w, _ in depths)))
print()
print("Through libchorus_pmpi, p = 2, 8 B, CHORUS_MPI_MIN_BYTES=0 (call_loops), us per call")
print()
print("| call | " + " | ".join("ring %s" % d for _, d in depths) + " |")
print("| --- |" + " --- |" * len(depths))
loops = collections.defaultdict(lambda: collections.defaultdict(list))
for w, _ in depths:
    for name in glob.glob("loops_%s_*.csv" % w):
        for line in open(name):
            f = line.strip().split(",")
            if len(f) == 3:
                loops[f[0]][w].append(float(f[2]))
for call in loops:
    print("| %s | %s |" % (call, " | ".join("%.3f" % statistics.median(loops[call][w]) for w, _ in depths)))
