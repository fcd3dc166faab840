#!/usr/bin/env python3
"""Chorus beside MPI_Allreduce: reads allreduce_perf --mpi --csv files (several
runs of one configuration) and prints per size the median Chorus busbw, MPI
busbw and speedup (MPI time / Chorus out-of-place time) over the runs.

  mpirun -np 2 allreduce_perf -b 8 -e 64M -f 4 --mpi --csv run1.csv   (repeat)
  bench/mpi_report.py run1.csv run2.csv run3.csv
"""
import collections
import csv
import statistics
import sys


def main(paths):
    by_size = collections.defaultdict(lambda: collections.defaultdict(list))
    meta = None
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if not r.get("mpi_time_us"):
                    sys.exit(f"{path}: no MPI columns (run with --mpi)")
                meta = (r["ranks"], r["transport"])
                d = by_size[int(r["size"])]
                d["time"].append(float(r["oop_time_us"]))
                d["busbw"].append(float(r["oop_busbw"]))
                d["mpi_time"].append(float(r["mpi_time_us"]))
                d["mpi_busbw"].append(float(r["mpi_busbw"]))
                d["speedup"].append(float(r["speedup"]))
                d["algo"].append(r["algo"])
    print(f"# {len(paths)} runs, {meta[0]} ranks, chorus over {meta[1]}; medians")
    print(f"{'size':>10} {'chorus_us':>10} {'chorus_busbw':>12} {'mpi_us':>10} {'mpi_busbw':>10} {'speedup':>8}  algo")
    for size in sorted(by_size):
        d = by_size[size]
        m = {k: statistics.median(v) for k, v in d.items() if k != "algo"}
        algo = collections.Counter(d["algo"]).most_common(1)[0][0]
        print(f"{size:>10} {m['time']:>10.2f} {m['busbw']:>12.2f} {m['mpi_time']:>10.2f} "
              f"{m['mpi_busbw']:>10.2f} {m['speedup']:>8.2f}  {algo}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
