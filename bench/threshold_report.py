#!/usr/bin/python3
"""Medians of two builds' perf CSV files, size by size, and their ratio.

How the thresholds of the other collectives were chosen (docs/tuning.md):
  threshold_report.py docs/perf/collectives/thresholds A C
reads {ag,rd}_{A,C}_<run>.csv (allgather_perf and reduce_perf runs of two
builds, alternated) and prints, per size, each build's median out-of-place
time, the algorithm it ran, and the ratio second / first.
"""
import csv
import glob
import statistics
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    directory, first, second = sys.argv[1:]
    for kind in ("ag", "rd"):
        times = {}
        for build in (first, second):
            for path in sorted(glob.glob(f"{directory}/{kind}_{build}_*.csv")):
                for row in csv.DictReader(open(path)):
                    times.setdefault((int(row["size"]), build), []).append(
                        (float(row["oop_time_us"]), row["algo"]))
        print({"ag": "allgather", "rd": "reduce"}[kind])
        for size in sorted({size for size, _ in times}):
            a, b = times[(size, first)], times[(size, second)]
            ma = statistics.median(t for t, _ in a)
            mb = statistics.median(t for t, _ in b)
            print(f"{size:>10}  {first} {ma:9.1f} us ({a[0][1]})  {second} {mb:9.1f} us ({b[0][1]})"
                  f"  {second}/{first} {mb / ma:5.2f}")


if __name__ == "__main__":
    main()
