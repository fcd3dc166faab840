#!/usr/bin/env python3
"""Nineteenth pass (docs/performance.md): run.sh's data. Run from this
directory: python3 report.py"""
import csv
import glob
import statistics


def spread(values):
    values = sorted(values)
    return "%.2f (%.2f-%.2f)" % (statistics.median(values), values[0], values[-1])


def number(text):
    """A time, 0 where the tool printed NA (a broadcast has no in-place column)."""
    return 0.0 if text == "NA" else float(text)


def cells(pattern):
    """size -> [(chorus oop, chorus ip, mpi oop, mpi ip)], one per file."""
    by = {}
    for name in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(name)):
            by.setdefault(int(r["size"]), []).append(
                tuple(number(r[k]) for k in ("oop_time_us", "ip_time_us", "mpi_time_us", "mpi_ip_time_us")))
    return by


def beside_mpi(title, pattern):
    """Speedup = Open MPI's better column / Chorus's (out of place), per run."""
    print("## %s (us, medians of 3 runs; speedup = Open MPI's better column / Chorus's out of place, "
          "median (range))\n" % title)
    print("| size | Chorus out of place / in place | Open MPI out of place / in place | speedup |")
    print("| ---: | --- | --- | --- |")
    for size, runs in sorted(cells(pattern).items()):
        med = [statistics.median(r[i] for r in runs) for i in range(4)]
        speedups = [min(r[2], r[3]) / r[0] if r[3] > 0 else r[2] / r[0] for r in runs]
        column = lambda t: "%.2f" % t if t > 0 else "-"
        print("| %d | %s / %s | %s / %s | %s |" % (
            size, column(med[0]), column(med[1]), column(med[2]), column(med[3]), spread(speedups)))
    print()


def loops():
    print("## Step 3: rooted calls at 8 B, p = 2, through libchorus_pmpi with CHORUS_MPI_MIN_BYTES=0 "
          "(us per call, medians of 5 alternating runs; speedup = Open MPI alone / the library, median (range))\n")
    per = {}
    for side in ("mpi", "chorus"):
        for rep, name in enumerate(sorted(glob.glob("loops_%s_*.csv" % side))):
            for line in open(name):
                call, _, us = line.strip().split(",")
                per.setdefault(call, {}).setdefault(side, {})[rep] = float(us)
    print("| call | Open MPI | library, 0 | speedup |")
    print("| --- | --- | --- | --- |")
    for call, sides in per.items():
        mpi, lib = sides["mpi"], sides["chorus"]
        print("| %s | %.3f | %.3f | %s |" % (call, statistics.median(mpi.values()), statistics.median(lib.values()),
                                             spread([mpi[k] / lib[k] for k in lib])))
    print()


if __name__ == "__main__":
    beside_mpi("Step 1: AllReduce p = 2 beside Open MPI", "allreduce_p2_small_*.csv")
    for p in (2, 4):
        beside_mpi("Step 2: broadcast 8 B, p = %d" % p, "broadcast_8_p%d_*.csv" % p)
    loops()
