#!/usr/bin/env python3
"""How good is the automatic algorithm choice? Reads allreduce_perf --csv files
of a run with -A all (every algorithm, then auto, per size; -N cycles repeat the
sweep) and prints, per rank count and size, the best forced algorithm, the
automatic choice, and auto's time over the best one's. Times are the medians
over cycles of the mean of the out-of-place and in-place times.

  allreduce_perf --np 4 -b 8 -e 64M -f 4 -A all -N 3 -c 0 --csv p4.csv
  bench/selector_report.py p4.csv
"""
import collections
import csv
import statistics
import sys


def main(paths):
    times = collections.defaultdict(list)  # (ranks, size, algo) -> [us]
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                t = (float(r["oop_time_us"]) + float(r["ip_time_us"])) / 2
                times[(int(r["ranks"]), int(r["size"]), r["algo"])].append(t)
    keys = sorted({(ranks, size) for ranks, size, _ in times})
    worst = 0.0
    print(f"{'ranks':>5} {'size':>10}  {'best forced':<20} {'us':>9}  {'auto chose':<20} {'us':>9}  {'auto/best':>9}")
    for ranks, size in keys:
        forced = {a: statistics.median(v) for (p, s, a), v in times.items()
                  if p == ranks and s == size and not a.startswith("auto:")}
        auto = {a: statistics.median(v) for (p, s, a), v in times.items()
                if p == ranks and s == size and a.startswith("auto:")}
        if not forced or not auto:
            continue
        best = min(forced, key=forced.get)
        chose, auto_us = next(iter(auto.items()))
        ratio = auto_us / forced[best]
        worst = max(worst, ratio)
        print(f"{ranks:>5} {size:>10}  {best:<20} {forced[best]:9.2f}  {chose[5:]:<20} {auto_us:9.2f}  {ratio:9.2f}")
    print(f"worst auto/best: {worst:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
