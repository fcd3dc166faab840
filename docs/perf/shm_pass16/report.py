#!/usr/bin/env python3
"""Sixteenth pass (docs/performance.md): issue 17's targets from run.sh's
data, one table per step. Run from this directory: python3 report.py"""
import collections
import csv
import glob
import re
import statistics

median = statistics.median


def rows(pattern):
    """(file index, row) of every CSV row of the files matching pattern; the
    row's "_file" is its file's name."""
    for i, name in enumerate(sorted(glob.glob(pattern))):
        with open(name) as f:
            for r in csv.DictReader(f):
                r["_file"] = name
                yield i, r


def spread(values, digits=2):
    fmt = "%%.%df" % digits
    if len(values) == 1:
        return fmt % values[0]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (median(values), min(values), max(values))


def size_text(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return "%d %s" % (b // scale, unit)
    return "%d B" % b


def allreduce(title="## Step 1: AllReduce beside Open MPI (speedup = MPI time / Chorus time, median (range) of 3 runs)"):
    print(title + "\n")
    for p in (2, 4):
        by = collections.defaultdict(lambda: collections.defaultdict(list))
        for i, r in rows("allreduce_p%d_*.csv" % p):
            b = int(r["size"])
            # The small launch up to 64 KiB, the large one beyond; neither's first size.
            if b < 8 or (b <= 65536) != ("_small_" in r["_file"]):
                continue
            d = by[b]
            for k in ("oop_time_us", "ip_time_us", "mpi_time_us", "mpi_ip_time_us"):
                d[k].append(float(r[k]))
            d["algo"].append(r["algo"])
        print("p = %d\n" % p)
        print("| size | Chorus out / in place us | Open MPI out / in place us | out of place | in place | Chorus's out of place against Open MPI's better column | algorithm |")
        print("| ---: | --- | --- | --- | --- | --- | --- |")
        for b in sorted(by):
            d = by[b]
            oop = [m / c for m, c in zip(d["mpi_time_us"], d["oop_time_us"])]
            ip = [m / c for m, c in zip(d["mpi_ip_time_us"], d["ip_time_us"])]
            best = [min(m, mi) / c for m, mi, c in zip(d["mpi_time_us"], d["mpi_ip_time_us"], d["oop_time_us"])]
            algo = collections.Counter(d["algo"]).most_common(1)[0][0]
            print("| %s | %.2f / %.2f | %.2f / %.2f | %s | %s | %s | %s |" % (
                size_text(b), median(d["oop_time_us"]), median(d["ip_time_us"]), median(d["mpi_time_us"]),
                median(d["mpi_ip_time_us"]), spread(oop), spread(ip), spread(best), algo))
        print()


def others(title="## Step 2: every other collective (speedup = MPI time / Chorus out-of-place time, median (range) of 3 runs; Chorus / MPI us)"):
    print(title + "\n")
    tools = ("allgather", "alltoall", "broadcast", "reduce", "reduce_scatter")
    print("| collective | p = 2: 8 B | 1 MiB | 64 MiB | p = 4: 8 B | 1 MiB | 64 MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for tool in tools:
        cells = []
        for p in (2, 4):
            for size in ("small", "1M", "64M"):
                pattern = "%s_%s_p%d_*.csv" % (tool, size, p)
                if size == "small":
                    pattern = "%s_[0-9]*_p%d_*.csv" % (tool, p)
                    files = [f for f in glob.glob(pattern) if re.match(r".*_(8|32)_p", f)]
                else:
                    files = glob.glob(pattern)
                c, m = [], []
                label = ""
                for name in sorted(files):
                    for r in csv.DictReader(open(name)):
                        c.append(float(r["oop_time_us"]))
                        m.append(float(r["mpi_time_us"]))
                        if size == "small" and int(r["size"]) != 8:
                            label = ", %s" % size_text(int(r["size"]))
                if not c:
                    cells.append("-")
                    continue
                cells.append("%s (%.4g / %.4g%s)" % (spread([x / y for x, y in zip(m, c)]), median(c), median(m), label))
        print("| %s | %s |" % (tool, " | ".join(cells)))
    print()


def in_place(title="## Step 3: in place against out of place (out-of-place time / in-place time, median (range) of 3 runs; >= 0.95 meets the target)"):
    print(title + "\n")
    for p in (2, 4):
        by = collections.defaultdict(list)
        for _, r in rows("inplace_p%d_*.csv" % p):
            by[(r["algo"], int(r["size"]))].append(float(r["oop_time_us"]) / float(r["ip_time_us"]))
        sizes = sorted({s for _, s in by})
        algos = sorted({a for a, _ in by})
        print("p = %d\n" % p)
        print("| algorithm | " + " | ".join(size_text(s) for s in sizes) + " |")
        print("| --- |" + " --- |" * len(sizes))
        for a in algos:
            print("| %s | " % a + " | ".join(spread(by[(a, s)]) if (a, s) in by else "-" for s in sizes) + " |")
        print()


def choice(title="## Step 4: the automatic choice against the best forced algorithm of the same launch"):
    print(title + "\n")
    print("| p | size | chosen (launches) | chosen time / best forced time, per launch | within 1.15x |")
    print("| --- | --- | --- | --- | --- |")
    within = total = 0
    worst = 0
    for p in (2, 4):
        per = collections.defaultdict(dict)  # (size) -> launch -> (auto time, best forced, chosen)
        launches = collections.defaultdict(lambda: collections.defaultdict(list))
        for i, r in rows("choice_p%d_*.csv" % p):
            launches[(int(r["size"]), i)][r["algo"]].append(float(r["oop_time_us"]))
        for (size, i), algos in launches.items():
            auto = [(a, t[0]) for a, t in algos.items() if a.startswith("auto:")]
            forced = [t[0] for a, t in algos.items() if not a.startswith("auto:")]
            if auto and forced:
                per[size][i] = (auto[0][1] / min(forced), auto[0][0][5:])
        for size in sorted(per):
            ratios = [per[size][i][0] for i in sorted(per[size])]
            chosen = collections.Counter(per[size][i][1] for i in per[size])
            ok = sum(1 for x in ratios if x <= 1.15)
            within += ok
            total += len(ratios)
            worst = max(worst, max(ratios))
            print("| %d | %s | %s | %s | %d of %d |" % (p, size_text(size), ", ".join("%s (%d)" % kv for kv in chosen.items()),
                                                      " ".join("%.2f" % x for x in ratios), ok, len(ratios)))
    print("\n%d of %d (size, launch) pairs within 1.15x; worst %.2fx\n" % (within, total, worst))


def tail(title="## Step 5: the tail, 10^5 back-to-back 8-byte AllReduces at p = 2"):
    print(title + "\n")
    print("| run | Chorus p50 / p99 us | p99 / p50 | Open MPI p50 / p99 us | p99 / p50 |")
    print("| --- | --- | --- | --- | --- |")
    for i, name in enumerate(sorted(glob.glob("tail_*.txt")), 1):
        got = {}
        for line in open(name):
            f = line.split()
            if f and f[0] in ("chorus", "mpi"):
                got[f[0]] = (float(f[2]), float(f[4]), float(f[7]))
        if "chorus" in got and "mpi" in got:
            c, m = got["chorus"], got["mpi"]
            print("| %d | %.2f / %.2f | %.2f | %.2f / %.2f | %.2f |" % (i, c[0], c[1], c[2], m[0], m[1], m[2]))
    print()


def read_loops(pattern):
    times = collections.defaultdict(list)
    for name in sorted(glob.glob(pattern)):
        for line in open(name):
            f = line.strip().split(",")
            if len(f) == 3:
                times[f[0]].append(float(f[2]))
    return times


def beside_mpi(title, prefix, sides, headers, speedup_headers):
    """Per call: Open MPI alone's time, each side's, and each side's speedup
    over Open MPI alone (run i of one against run i of the other)."""
    print(title + "\n")
    mpi = read_loops(prefix + "mpi_*.csv")
    times = [read_loops(prefix + side + "_*.csv") for side in sides]
    print("| call | Open MPI | " + " | ".join(headers) + " | " + " | ".join(speedup_headers) + " |")
    print("| --- | --- |" + " --- |" * (2 * len(sides)))
    for call in mpi:
        print("| %s | %.3f | %s | %s |" % (
            call, median(mpi[call]), " | ".join("%.3f" % median(t[call]) for t in times),
            " | ".join(spread([m / c for m, c in zip(mpi[call], t[call])]) for t in times)))
    print()


def loops():
    beside_mpi("## Step 6: every kind of call at 8 B, p = 2, through libchorus_pmpi (us per call, medians of 3; "
               "speedup = Open MPI alone / the library, median (range))",
               "loops_", ("default", "zero"), ("library, defaults", "library, CHORUS_MPI_MIN_BYTES=0"),
               ("speedup, defaults", "speedup, 0"))


def vforms():
    beside_mpi("## Step 7: MPI_Gatherv and MPI_Scatterv of 8 B at p = 2, the library's defaults, before and after "
               "(us per call, medians of 5)", "vforms_", ("base", "new"), ("before", "after"),
               ("speedup before", "after"))


if __name__ == "__main__":  # (the seventeenth pass's report.py imports the steps)
    for step in (allreduce, others, in_place, choice, tail, loops, vforms):
        step()
