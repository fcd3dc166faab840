#!/usr/bin/python3
"""The lab's table (bench/lab_bench.sh): per size, medians over the runs of
Chorus's automatic choice, Chorus's flat ring and MPI_Allreduce, and the
link bound: each host sends 2(H-1)/H of the buffer through its link, so
  bound = 2 (H - 1) / H * bytes * 8 / rate.

  bench/lab_report.py --hosts 2 --rate 1gbit [--plot busbw.png] DIR
"""
import argparse
import collections
import csv
import glob
import os
import statistics


def rate_bits(text):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def read(directory):
    # times[size][series] -> list of microseconds; algo[size] -> auto's choices;
    # speedups[size] -> MPI / auto of each run (measured in the same run)
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    speedups = collections.defaultdict(list)
    algos = collections.defaultdict(collections.Counter)
    ranks = None
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        series = "auto" if os.path.basename(path).startswith("auto") else "ring"
        with open(path) as f:
            for r in csv.DictReader(f):
                size = int(r["size"])
                ranks = int(r["ranks"])
                times[size][series].append(float(r["oop_time_us"]))
                if r.get("mpi_time_us") not in (None, "", "NA"):
                    times[size]["mpi"].append(float(r["mpi_time_us"]))
                if series == "auto":
                    algos[size][r["algo"]] += 1
                    if r.get("speedup") not in (None, "", "NA") and float(r["speedup"]) > 0:
                        speedups[size].append(float(r["speedup"]))
    return times, algos, ranks, speedups


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--plot")
    parser.add_argument("directory")
    a = parser.parse_args()
    times, algos, ranks, speedups = read(a.directory)
    h = a.hosts
    bits = rate_bits(a.rate)
    print(f"# {ranks} ranks on {h} hosts, links {a.rate}; medians of each series' runs;")
    print("# bound = 2(H-1)/H * bytes * 8 / rate; ratios > 1 mean Chorus (auto) is faster;")
    print("# run_vs_mpi: the median over runs of MPI / auto, each measured in one run")
    print(f"{'size':>10} {'auto_us':>10} {'ring_us':>10} {'mpi_us':>10} {'bound_us':>10} "
          f"{'auto/bound':>10} {'vs_mpi':>7} {'vs_ring':>7} {'run_vs_mpi':>10}  auto's choice")
    rows = []
    for size in sorted(times):
        t = {k: statistics.median(v) for k, v in times[size].items()}
        bound = 2 * (h - 1) / h * size * 8 / bits * 1e6
        auto, ring, mpi = t.get("auto"), t.get("ring"), t.get("mpi")
        choice = algos[size].most_common(1)[0][0] if algos[size] else "-"
        run_ratio = f"{statistics.median(speedups[size]):.2f}" if speedups[size] else "-"
        rows.append((size, auto, ring, mpi, bound))
        fmt = lambda x: f"{x:>10.1f}" if x is not None else f"{'-':>10}"
        ratio = lambda x, y: f"{x / y:>7.2f}" if x and y else f"{'-':>7}"
        print(f"{size:>10} {fmt(auto)} {fmt(ring)} {fmt(mpi)} {bound:>10.1f} "
              f"{(auto / bound if auto else 0):>10.2f} {ratio(mpi, auto)} {ratio(ring, auto)} "
              f"{run_ratio:>10}  {choice}")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        busbw = lambda size, us: size / us / 1e3 * 2 * (ranks - 1) / ranks if us else None
        fig, ax = plt.subplots(figsize=(7, 4.2))
        sizes = [r[0] for r in rows]
        for index, label in ((1, "Chorus (auto)"), (2, "Chorus flat ring"), (3, "Open MPI")):
            ax.plot(sizes, [busbw(r[0], r[index]) for r in rows], marker="o", label=label)
        ax.plot(sizes, [busbw(r[0], r[4]) for r in rows], linestyle="--", color="gray",
                label="link bound")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("AllReduce size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{ranks} ranks on {h} hosts, links shaped to {a.rate}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
