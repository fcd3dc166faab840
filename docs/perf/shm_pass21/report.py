#!/usr/bin/env python3
"""Twenty-first pass (docs/performance.md): run.sh's data. Run from this
directory: python3 report.py"""
import collections
import csv
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "shm_pass16"))
import report as pass16  # noqa: E402  (spread, size_text, in_place)


def ratios(pattern):
    """(algorithm, size) -> out-of-place time / in-place time, one per run."""
    by = collections.defaultdict(list)
    for name in sorted(glob.glob(pattern)):
        for r in csv.DictReader(open(name)):
            by[(r["algo"], int(r["size"]))].append(float(r["oop_time_us"]) / float(r["ip_time_us"]))
    return by


def cells():
    """Step 1: the ring at p = 2 and the tree at p = 4, both builds."""
    print("## Step 1: in place against out of place, forced (out-of-place time / in-place time; each "
          "run's cell the median of 5 rounds; median (range) of 3 runs; >= 0.95 meets the target)\n")
    for algo, p in (("ring", 2), ("tree", 4)):
        before = ratios("cells/before_%s_p%d_*.csv" % (algo, p))
        after = ratios("cells/after_%s_p%d_*.csv" % (algo, p))
        sizes = sorted(s for _, s in after)
        print("%s, p = %d\n" % (algo, p))
        print("| build | " + " | ".join(pass16.size_text(s) for s in sizes) + " |")
        print("| --- |" + " --- |" * len(sizes))
        for which, by in (("2783767", before), ("1e74400", after)):
            print("| %s | " % which + " | ".join(pass16.spread(by[(algo, s)]) for s in sizes) + " |")
        print()


def every_algorithm():
    """Step 2: every algorithm and auto, both builds, one table a build and p."""
    for which, commit in (("before", "2783767"), ("after", "1e74400")):
        os.chdir(os.path.join(here, which))
        pass16.in_place("## Step 2 on %s: in place against out of place (out-of-place time / in-place "
                        "time; each run's cell the median of 5 rounds; median (range) of 3 runs; >= 0.95 "
                        "meets the target)" % commit)
        os.chdir(here)


def again():
    """Step 3: step 2's cells below 0.95, with more calls, both builds."""
    print("## Step 3: step 2's cells below 0.95 again, more calls (out-of-place time / in-place time; "
          "each run's cell the median of 5 rounds; median (range) of 3 runs)\n")
    print("| cell | 2783767 | 1e74400 |")
    print("| --- | --- | --- |")
    for name, p in (("ring", 2), ("tree", 2), ("shm_one_shot", 4), ("direct_one_shot", 4),
                    ("hierarchical", 4)):
        cell = [ratios("again/%s_%s_p%d_*.csv" % (which, name, p)) for which in ("before", "after")]
        (algo, size), = cell[1].keys()
        print("| %s, p = %d, %s | %s | %s |" % (name, p, pass16.size_text(size),
                                               pass16.spread(cell[0][(algo, size)]),
                                               pass16.spread(cell[1][(algo, size)])))
    print()


if __name__ == "__main__":
    os.chdir(here)
    cells()
    every_algorithm()
    again()
