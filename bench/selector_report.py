#!/usr/bin/env python3
"""How good is the automatic algorithm choice? Reads allreduce_perf --csv files
of a run with -A all (every algorithm, then auto, per size; -N cycles repeat the
sweep; files of separate launches, each with its own probe, may be given
together) and prints, per rank count and size, the best forced algorithm, the
automatic choice(s), auto's time over the best one's, and chosen/best: the
forced time of the slowest algorithm auto chose over the best one's (what the
choice costs, without the noise between separate measurements). Times are the medians
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
    worst = worst_choice = 0.0
    print(f"{'ranks':>5} {'size':>10}  {'best forced':<20} {'us':>9}  {'auto chose':<20} {'us':>9}  {'auto/best':>9}  {'chosen/best':>12}")
    for ranks, size in keys:
        forced = {a: statistics.median(v) for (p, s, a), v in times.items()
                  if p == ranks and s == size and not a.startswith("auto:")}
        # Runs launched separately probe separately and may choose
        # differently: auto's time pools them all, and every choice is named
        # (with how many cycles made it).
        chosen = collections.Counter()
        auto_times = []
        for (p, s, a), v in times.items():
            if p == ranks and s == size and a.startswith("auto:"):
                chosen[a[5:]] += len(v)
                auto_times += v
        if not forced or not auto_times:
            continue
        best = min(forced, key=forced.get)
        auto_us = statistics.median(auto_times)
        chose = "+".join(a if n == len(auto_times) else f"{a}({n})" for a, n in chosen.most_common())
        ratio = auto_us / forced[best]
        # What the worst choice costs, by the forced runs of what was chosen:
        # free of the noise between auto's own runs and the forced ones.
        choice = max(forced.get(a, forced[best]) for a in chosen) / forced[best]
        worst = max(worst, ratio)
        worst_choice = max(worst_choice, choice)
        print(f"{ranks:>5} {size:>10}  {best:<20} {forced[best]:9.2f}  {chose:<20} {auto_us:9.2f}  "
              f"{ratio:9.2f}  {choice:12.2f}")
    print(f"worst auto/best: {worst:.2f}")
    print(f"worst chosen/best: {worst_choice:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
