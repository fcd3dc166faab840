#!/usr/bin/env python3
"""Seventeenth pass (docs/performance.md): run.sh's data, in the sixteenth
pass's tables (its report.py; each time here is already a cell's median over
--rounds), and the automatic choice also judged by the chosen algorithm's
forced twin. Run from this directory: python3 report.py"""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shm_pass16"))
import report  # noqa: E402  (docs/perf/shm_pass16/report.py)


def choice_by_twin():
    """Per (p, size, launch): the best forced algorithm, and the chosen one's
    forced twin (the same algorithm, forced, in the same launch) against it.
    The auto row and its twin run the same code: what separates them is the
    machine, which the first table's ratio counts against the choice."""
    print("## Step 2b: the algorithm chosen, forced, against the best forced algorithm of the same launch\n")
    print("| p | size | best forced (launches) | chosen's forced twin / best forced, per launch | auto / its twin: median (range) |")
    print("| --- | --- | --- | --- | --- |")
    within = total = 0
    for p in (2, 4):
        launches = collections.defaultdict(dict)
        for i, r in report.rows("choice_p%d_*.csv" % p):
            launches[(int(r["size"]), i)][r["algo"]] = float(r["oop_time_us"])
        for size in sorted({s for s, _ in launches}):
            best_names, twin, noise = collections.Counter(), [], []
            for (s, i), algos in sorted(launches.items()):
                if s != size:
                    continue
                auto = next(a for a in algos if a.startswith("auto:"))
                forced = {a: t for a, t in algos.items() if not a.startswith("auto:")}
                best = min(forced, key=forced.get)
                best_names[best] += 1
                twin.append(forced[auto[5:]] / forced[best])
                noise.append(algos[auto] / forced[auto[5:]])
            ok = sum(1 for x in twin if x <= 1.15)
            within += ok
            total += len(twin)
            print("| %d | %s | %s | %s | %s |" % (p, report.size_text(size),
                                                  ", ".join("%s (%d)" % kv for kv in best_names.items()),
                                                  " ".join("%.2f" % x for x in twin), report.spread(noise)))
    print("\n%d of %d (size, launch) pairs: the chosen algorithm within 1.15x of the best\n" % (within, total))


def ring_in_place():
    print("## Step 6: the ring's in place at p = 2 (out-of-place time / in-place time; each run's cell the "
          "median of 9 rounds of 20 calls)\n")
    by = collections.defaultdict(list)
    for _, r in report.rows("ring_4M/ring_p2_*.csv"):
        by[int(r["size"])].append(float(r["oop_time_us"]) / float(r["ip_time_us"]))
    print("| size | per run | median |")
    print("| --- | --- | --- |")
    for size in sorted(by):
        print("| %s | %s | %.2f |" % (report.size_text(size), " ".join("%.2f" % x for x in by[size]),
                                      report.median(by[size])))
    print()


def in_place_rewritten():
    here = os.getcwd()
    os.chdir("rewrite")
    try:
        report.in_place("## Step 5: step 1 with --rewrite (out-of-place time / in-place time; each run's cell the "
                        "median of 5 rounds; median (range) of 3 runs)")
    finally:
        os.chdir(here)


if __name__ == "__main__":
    report.in_place("## Step 1: in place against out of place (out-of-place time / in-place time; each run's cell "
                    "the median of 5 rounds; median (range) of 3 runs; >= 0.95 meets the target)")
    report.choice("## Step 2: the automatic choice against the best forced algorithm of the same launch "
                  "(each time the median of 3 rounds)")
    choice_by_twin()
    report.others("## Step 3: every other collective (speedup = MPI time / Chorus out-of-place time; each run's "
                  "cell the median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs; Chorus / MPI us)")
    report.allreduce("## Step 4: AllReduce beside Open MPI (speedup = MPI time / Chorus time; each run's cell the "
                     "median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs)")
    in_place_rewritten()
    ring_in_place()
