#!/usr/bin/env python3
"""Twentieth pass (docs/performance.md): run.sh's data, in the tables of the
passes before (the sixteenth's to nineteenth's report.py). Run from this
directory: python3 report.py"""
import csv
import importlib.util
import os
import statistics
import sys

here = os.path.dirname(os.path.abspath(__file__))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, "..", name, "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, os.path.join(here, "..", "shm_pass16"))
pass16, pass17, pass18, pass19 = (load("shm_pass%d" % n) for n in (16, 17, 18, 19))


def the_256_byte_cell(title):
    """Step 2: one row a launch, in the order they ran, with the state before it."""
    print(title + " (us; speedup = Open MPI's better column / Chorus's out of place; state: "
          "line_flags' 8-byte header time just before)\n")
    print("| launch | binding | state (us) | Chorus | Open MPI | speedup |")
    print("| --- | --- | --- | --- | --- | --- |")
    speedups = []
    for rep in range(1, 6):
        for bind in ("core", "none"):
            state = open("state_%d_%s.txt" % (rep, bind)).read().split()[3]
            for r in csv.DictReader(open("allreduce_256_%d_%s.csv" % (rep, bind))):
                if int(r["size"]) != 256:
                    continue
                chorus = float(r["oop_time_us"])
                mpi = min(float(r["mpi_time_us"]), float(r["mpi_ip_time_us"]))
                speedups.append(mpi / chorus)
                print("| %d | %s | %s | %.2f | %.2f | %.2f |" % (rep, bind, state, chorus, mpi, mpi / chorus))
    print("\nmedian (range) of the %d launches: %s\n" % (len(speedups), pass19.spread(speedups)))


def before_after(title):
    """Step 5: per size, the two builds' times and their speedups against Open MPI."""
    print(title + " (us, out of place / in place, medians of 3 runs; before / after out of place, and "
          "each build's speedup = Open MPI's better column / its out of place, median (range))\n")
    print("| size | before | after | before / after | speedup before | speedup after | after runs |")
    print("| ---: | --- | --- | --- | --- | --- | --- |")
    by = {}
    for which in ("before", "after"):
        for rep in (1, 2, 3):
            for r in csv.DictReader(open("before_after/%s_%d.csv" % (which, rep))):
                cell = by.setdefault(int(r["size"]), {}).setdefault(which, [])
                cell.append((float(r["oop_time_us"]), float(r["ip_time_us"]),
                             min(float(r["mpi_time_us"]), float(r["mpi_ip_time_us"])), r["algo"]))
    for size in sorted(by):
        b, a = by[size]["before"], by[size]["after"]
        med = lambda runs, i: statistics.median(x[i] for x in runs)
        print("| %s | %.2f / %.2f | %.2f / %.2f | %s | %s | %s | %s |" % (
            pass16.size_text(size), med(b, 0), med(b, 1), med(a, 0), med(a, 1),
            pass19.spread([x[0] / y[0] for x, y in zip(b, a)]), pass19.spread([x[2] / x[0] for x in b]),
            pass19.spread([x[2] / x[0] for x in a]), a[0][3]))
    print()


def sixteen_mib():
    """Step 9: 16 MiB at p = 2, one row a run."""
    print("## Step 9: AllReduce p = 2 at 16 MiB beside Open MPI (us, out of place / in place; speedup = "
          "Open MPI's better column / Chorus's out of place)\n")
    print("| run | Chorus | Open MPI | speedup | in place against in place |")
    print("| --- | --- | --- | --- | --- |")
    speedups = []
    for rep in range(1, 6):
        for r in csv.DictReader(open("allreduce_16m_%d.csv" % rep)):
            c, ci, m, mi = (float(r[k]) for k in ("oop_time_us", "ip_time_us", "mpi_time_us", "mpi_ip_time_us"))
            speedups.append(min(m, mi) / c)
            print("| %d | %.0f / %.0f | %.0f / %.0f | %.2f | %.2f |" % (rep, c, ci, m, mi, min(m, mi) / c, mi / ci))
    print("\nmedian (range): %s\n" % pass19.spread(speedups))


def in_directory(name, show):
    os.chdir(os.path.join(here, name))
    show()
    os.chdir(here)


if __name__ == "__main__":
    os.chdir(here)
    print("# Before the change (8c1b891)\n")
    in_directory("before", lambda: (
        pass19.beside_mpi("## Step 1: AllReduce p = 2 beside Open MPI", "allreduce_p2_small_*.csv"),
        the_256_byte_cell("## Step 2: AllReduce p = 2 at 256 B, one launch a row"),
        pass19.loops(),
        print("## Step 4: line_flags (line_flags.txt)\n\n" + open("line_flags.txt").read())))
    print("# A build with one-shot up to 512 KiB at p = 2 and 128 KiB at p = 3 (1c1c94c)\n")
    in_directory("first", lambda: (
        before_after("## Step 5: p = 2 beside Open MPI, 8c1b891 against 1c1c94c"),
        pass18.edge()))
    print("# The last build (6e967fe): one-shot up to 64 KiB at every p\n")
    in_directory("second", pass18.edge)
    before_after("## Step 5: p = 2 beside Open MPI, 8c1b891 against 6e967fe")
    in_directory("targets", lambda: (
        pass16.in_place("## Step 7: in place against out of place (out-of-place time / in-place time; each run's "
                        "cell the median of 5 rounds; median (range) of 3 runs; >= 0.95 meets the target)"),
        pass16.allreduce("## Step 7: AllReduce beside Open MPI (speedup = MPI time / Chorus time; each run's cell "
                         "the median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs)"),
        pass16.tail("## Step 7: the tail, 10^5 back-to-back 8-byte AllReduces at p = 2")))
    in_directory("choice", lambda: (
        pass16.choice("## Step 8: the automatic choice against the best forced algorithm of the same launch "
                      "(each time the median of 3 rounds)"),
        pass17.choice_by_twin()))
    in_directory("16mib", sixteen_mib)
    in_directory("after", lambda: (
        the_256_byte_cell("## Step 2 on 1c1c94c: AllReduce p = 2 at 256 B, one launch a row"),
        pass19.loops()))
