#!/usr/bin/env python3
"""How often does the probe choose well? The choice is made once per
communicator, from a probe that four processes on two cores make noisy, so
one allreduce_perf run shows one draw. This launches allreduce_perf --np P
again and again (each launch probes afresh), reads which variant the
automatic choice ran at each size of the sweep (the algo column, auto:<variant>),
and scores every choice against forced times from
`allreduce_perf -A all --csv` files (bench/selector_report.py's input): the
chosen variant's forced time over the best forced time at that size.

Given --binary more than once, launches alternate between the binaries (A/B
on a noisy machine) and each gets its own table.

  bench/selector_choices.py --np 4 --launches 15 --reference docs/perf/select/p4_launch*.csv
"""
import argparse
import collections
import csv
import os
import statistics
import subprocess
import sys
import tempfile

LIMIT = 1.15  # the selector issue's target: never more than 15% slower than the best


def forced_times(paths, ranks):
    """(size, variant) -> median forced time in us, over every file and cycle."""
    times = collections.defaultdict(list)
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if int(r["ranks"]) != ranks or r["algo"].startswith("auto:"):
                    continue
                t = (float(r["oop_time_us"]) + float(r["ip_time_us"])) / 2
                times[(int(r["size"]), r["algo"])].append(t)
    return {k: statistics.median(v) for k, v in times.items()}


def choices_of_one_launch(binary, ranks, max_bytes):
    """size -> the variant the automatic choice ran (allreduce_perf's algo column, auto:<variant>)."""
    with tempfile.TemporaryDirectory(prefix="chorus-choices-") as tmp:
        out = os.path.join(tmp, "run.csv")
        cmd = [binary, "--np", str(ranks), "-b", "8", "-e", str(max_bytes), "-f", "4", "-n", "1",
               "-w", "0", "-c", "0", "--csv", out]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
        with open(out) as f:
            return {int(r["size"]): r["algo"].removeprefix("auto:") for r in csv.DictReader(f)}


def report(name, chosen, forced):
    sizes = sorted({s for s, _ in forced})
    print(f"== {name}")
    print(f"{'size':>10}  {'best forced':<20}  choices (count, forced time / best)")
    far = total = 0
    worst = 1.0
    for size in sizes:
        at = {v: t for (s, v), t in forced.items() if s == size}
        best = min(at, key=at.get)
        parts = []
        for variant, n in chosen[size].most_common():
            total += n
            if variant not in at:  # not in the reference (e.g. two-shot at p = 2: direct ran one-shot)
                parts.append(f"{variant} x{n} (?)")
                continue
            ratio = at[variant] / at[best]
            worst = max(worst, ratio)
            far += n if ratio > LIMIT else 0
            parts.append(f"{variant} x{n} ({ratio:.2f})")
        print(f"{size:>10}  {best:<20}  {'  '.join(parts)}")
    print(f"choices more than {LIMIT}x the best: {far} of {total}; worst {worst:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, required=True, help="ranks")
    ap.add_argument("--launches", type=int, default=10, help="launches per binary")
    ap.add_argument("--reference", nargs="+", required=True,
                    help="allreduce_perf -A all --csv files with forced times at these ranks")
    ap.add_argument("--binary", action="append",
                    help="allreduce_perf to launch (repeat to alternate several)")
    args = ap.parse_args()
    binaries = args.binary or [os.path.join(os.path.dirname(__file__), "..", "build", "bin", "allreduce_perf")]
    forced = forced_times(args.reference, args.np)
    if not forced:
        sys.exit(f"no forced times at {args.np} ranks in {' '.join(args.reference)}")
    max_bytes = max(s for s, _ in forced)
    chosen = {b: collections.defaultdict(collections.Counter) for b in binaries}
    for _ in range(args.launches):
        for b in binaries:
            for size, variant in choices_of_one_launch(b, args.np, max_bytes).items():
                if any(s == size for s, _ in forced):
                    chosen[b][size][variant] += 1
    for b in binaries:
        report(b, chosen[b], forced)


if __name__ == "__main__":
    main()
