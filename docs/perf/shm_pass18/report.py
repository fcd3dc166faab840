#!/usr/bin/env python3
"""Eighteenth pass (docs/performance.md): run.sh's data. Steps 1, 2, 4 and 5
in the seventeenth pass's tables (its report.py and the sixteenth's); steps
3 (two-shot before and after), 6 (one-shot against two-shot) and 7 (huge
pages) in tables of their own; step 8 (the tail) as the sixteenth's. Run
from this directory: python3 report.py"""
import collections
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "shm_pass16"))
import report  # noqa: E402  (docs/perf/shm_pass16/report.py)

spec = importlib.util.spec_from_file_location("pass17", os.path.join(here, "..", "shm_pass17", "report.py"))
pass17 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pass17)


def times(pattern):
    """(size, algo) -> [(out-of-place us, in-place us)], one per file."""
    by = collections.defaultdict(list)
    for _, r in report.rows(pattern):
        by[(int(r["size"]), r["algo"])].append((float(r["oop_time_us"]), float(r["ip_time_us"])))
    return by


def two_shot():
    print("## Step 3: two-shot before (449e9b5) and after, forced (us, out of place / in place, medians of 3 "
          "runs; speedup = before / after, median (range))\n")
    for p in (2, 4):
        before, after = times("two_shot/before_p%d_*.csv" % p), times("two_shot/after_p%d_*.csv" % p)
        print("p = %d\n" % p)
        print("| size | before | after | speedup out of place | in place |")
        print("| ---: | --- | --- | --- | --- |")
        for key in sorted(after):
            b, a = before[key], after[key]
            print("| %s | %.1f / %.1f | %.1f / %.1f | %s | %s |" % (
                report.size_text(key[0]), report.median(x[0] for x in b), report.median(x[1] for x in b),
                report.median(x[0] for x in a), report.median(x[1] for x in a),
                report.spread([x[0] / y[0] for x, y in zip(b, a)]), report.spread([x[1] / y[1] for x, y in zip(b, a)])))
        print()


def edge():
    print("## Step 6: one-shot against two-shot, forced (us, out of place / in place, medians of 3 runs; "
          "two-shot / one-shot out of place, median (range))\n")
    print("| p | size | one-shot | two-shot | two-shot / one-shot |")
    print("| --- | ---: | --- | --- | --- |")
    for p in (2, 3, 4):
        one, two = times("edge/shm_one_shot_p%d_*.csv" % p), times("edge/shm_two_shot_p%d_*.csv" % p)
        for size in sorted(s for s, _ in one):
            o, t = one[(size, "shm_one_shot")], two[(size, "shm_two_shot")]
            print("| %d | %s | %.2f / %.2f | %.2f / %.2f | %s |" % (
                p, report.size_text(size), report.median(x[0] for x in o), report.median(x[1] for x in o),
                report.median(x[0] for x in t), report.median(x[1] for x in t),
                report.spread([y[0] / x[0] for x, y in zip(o, t)])))
    print()


def huge_pages():
    print("## Step 7: p = 2 beside Open MPI, the buffers on 4 KiB pages and on transparent huge pages "
          "(us, out of place / in place, medians of 3 runs; speedup = Open MPI's better column / Chorus "
          "out of place, median (range))\n")
    print("| pages | size | Chorus | Open MPI | speedup |")
    print("| --- | ---: | --- | --- | --- |")
    for pages in ("small", "huge"):
        by = collections.defaultdict(list)
        for _, r in report.rows("huge_pages/%s_*.csv" % pages):
            by[int(r["size"])].append([float(r[k]) for k in ("oop_time_us", "ip_time_us", "mpi_time_us",
                                                              "mpi_ip_time_us")])
        for size in sorted(by):
            runs = by[size]
            print("| %s | %s | %.0f / %.0f | %.0f / %.0f | %s |" % (
                "4 KiB" if pages == "small" else "huge", report.size_text(size),
                *(report.median(x[i] for x in runs) for i in range(4)),
                report.spread([min(x[2], x[3]) / x[0] for x in runs])))
    print()


if __name__ == "__main__":
    os.chdir(here)
    report.in_place("## Step 1: in place against out of place (out-of-place time / in-place time; each run's cell "
                    "the median of 5 rounds; median (range) of 3 runs; >= 0.95 meets the target)")
    report.choice("## Step 2: the automatic choice against the best forced algorithm of the same launch "
                  "(each time the median of 3 rounds)")
    pass17.choice_by_twin()
    two_shot()
    report.allreduce("## Step 4: AllReduce beside Open MPI (speedup = MPI time / Chorus time; each run's cell the "
                     "median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs)")
    pass17.in_place_rewritten()
    edge()
    huge_pages()
    os.chdir("tail")
    report.tail("## Step 8: the tail, 10^5 back-to-back 8-byte AllReduces at p = 2")
