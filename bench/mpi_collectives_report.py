#!/usr/bin/env python3
"""Before and after libchorus_pmpi: reads mpi_collectives_bench --csv files
(runs without the library and with it, any number of each, at one rank
count) and prints a Markdown table: per call and size the median time and
busbw of each side and the speedup (time before / time after).

  for rep in 1 2 3; do
    mpirun -np 2 build/bin/mpi_collectives_bench --csv before_$rep.csv
    mpirun -np 2 -x LD_PRELOAD=$PWD/build/src/libchorus_pmpi.so \\
        build/bin/mpi_collectives_bench --csv after_$rep.csv
  done
  bench/mpi_collectives_report.py before_*.csv after_*.csv
"""
import collections
import csv
import statistics
import sys


def size_name(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def main(paths):
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    order = []
    ranks = set()
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                key = (r["call"], int(r["bytes"]))
                if key not in order:
                    order.append(key)
                ranks.add(r["ranks"])
                runs[key][r["library"]].append((float(r["time_us"]), float(r["busbw_gbs"])))
    if len(ranks) != 1:
        sys.exit(f"files of several rank counts: {sorted(ranks)}")
    print(f"p = {ranks.pop()}; medians of {len(paths) // 2} runs each; speedup = time before / time after\n")
    print("| call | block | before: us (busbw GB/s) | after: us (busbw GB/s) | speedup |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for key in order:
        sides = runs[key]
        if "mpi" not in sides or "chorus_pmpi" not in sides:
            continue
        cells = []
        medians = []
        for side in ("mpi", "chorus_pmpi"):
            t = statistics.median(x[0] for x in sides[side])
            b = statistics.median(x[1] for x in sides[side])
            medians.append(t)
            cells.append(f"{t:.2f}" + (f" ({b:.2f})" if b > 0 else ""))
        print(f"| {key[0]} | {size_name(key[1])} | {cells[0]} | {cells[1]} | {medians[0] / medians[1]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:])
